"""Values drawn from sandrail's JSON Schemas, in every profile.

The schema-honesty property (an argument a tool's schema accepts is never
refused as invalid) needs many draws per tool and profile; this compiler is
fast enough for that and independent of the port's own checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from sandrail.core import TASK_ID_PATTERN

__all__ = ["schema_values"]

# Values drawn from a JSON Schema, for the schema-honesty property.
#
# Strategy: hypothesis-jsonschema is the independent reading (a cross-check
# draws from it), but it rebuilds strategies on every draw (about 20 ms each),
# too slow for 500 draws per tool and profile. This compiler covers exactly
# the keywords sandrail's schemas use, refuses any other keyword (so a new
# rule cannot be skipped silently), and leans on edges: bounds, lengths at
# their limits, names next to the reserved ones.

_ANNOTATIONS = frozenset({"description", "title", "default"})
_HANDLED = frozenset(
    {
        "type",
        "anyOf",
        "enum",
        "const",
        "minimum",
        "maximum",
        "pattern",
        "minLength",
        "maxLength",
        "items",
        "minItems",
        "maxItems",
        "properties",
        "required",
        "additionalProperties",
        "propertyNames",
        "maxProperties",
        "if",
        "then",
        "else",
    }
)


def schema_values(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid under ``schema`` (sandrail's JSON Schema subset; patterns
    read as ECMA-262). Raises ``ValueError`` for a keyword it does not know."""
    unknown = set(schema) - _HANDLED - _ANNOTATIONS
    if unknown:
        raise ValueError(f"schema_values does not know {sorted(unknown)}")
    if "anyOf" in schema:
        return st.one_of([schema_values(branch) for branch in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(list(schema["enum"]))
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema["type"]
    if kind == "integer":
        low, high = schema.get("minimum"), schema.get("maximum")
        edges = [value for value in (low, high) if value is not None]
        return st.integers(low, high) | st.sampled_from(edges or [0])
    if kind == "string":
        return _strings(schema)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        most = min(schema.get("maxItems", 6), 6)
        return st.lists(
            schema_values(schema["items"]), min_size=schema.get("minItems", 0), max_size=most
        )
    assert kind == "object", kind
    return _objects(schema)


def _strings(schema: Mapping[str, Any]) -> st.SearchStrategy[str]:
    least, most = schema.get("minLength", 0), schema.get("maxLength")
    if schema.get("pattern") == TASK_ID_PATTERN and most is None and least == 0:
        # Exactly the strings the pattern matches, drawn as 32 bytes in one
        # choice instead of 64 (hypothesis's cost is per choice).
        return st.binary(min_size=32, max_size=32).map(bytes.hex)
    if "pattern" in schema:
        from sandrail.core import ecma_regex

        regex = ecma_regex(schema["pattern"])
        # Also the names next to every refused env name the pattern lets
        # through: a pattern that lets through one the port refuses (a strict
        # profile's env-name rule, say) is caught on the first draws.
        drawn = st.from_regex(regex)
        near = [name for name in _NEAR_RESERVED if regex.search(name)]
        if near:
            drawn = drawn | st.sampled_from(near)
        if most is not None:
            # Also the longest legal strings: the shortest match padded by repeating a
            # character the pattern allows where it repeats (checked by the filter).
            drawn = drawn | st.builds(lambda text: text * (most // max(len(text), 1)), drawn)
        return drawn.filter(
            lambda text: least <= len(text) <= (most or len(text)) and regex.search(text)
        )
    short = st.text(min_size=least, max_size=least + 20)
    if most is None:
        return short
    return short | st.builds(lambda char: char * most, st.characters(codec="utf-8"))


def _objects(schema: Mapping[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    properties = schema.get("properties", {})
    required = set(schema.get("required", ()))
    extra = schema.get("additionalProperties", True)
    if isinstance(extra, Mapping):
        names = schema.get("propertyNames", {})
        keys = _strings({"type": "string", **names}) | st.sampled_from(_NEAR_RESERVED).filter(
            lambda name: _matches(names, name)
        )
        most = min(schema.get("maxProperties", 6), 6)
        drawn: st.SearchStrategy[dict[str, Any]] = st.dictionaries(
            keys, schema_values(extra), max_size=most
        )
    else:
        assert extra is False, "open objects are not sandrail's"
        drawn = st.fixed_dictionaries(
            {name: schema_values(properties[name]) for name in sorted(required)},
            optional={
                name: schema_values(field)
                for name, field in properties.items()
                if name not in required
            },
        )
    if "if" in schema:
        validator = Draft202012Validator(
            {key: schema[key] for key in ("if", "then", "else") if key in schema}
        )
        drawn = drawn.filter(validator.is_valid)
    return drawn


def _matches(names: Mapping[str, Any], name: str) -> bool:
    from sandrail.core import ecma_regex

    pattern = names.get("pattern")
    return (pattern is None or bool(ecma_regex(pattern).search(name))) and len(name) <= names.get(
        "maxLength", len(name)
    )


def _near_reserved() -> list[str]:
    """Names next to every refused env name and prefix (the port's whole
    rule, :data:`~sandrail.core.REFUSED_ENV_NAMES` included)."""
    from sandrail.core import REFUSED_ENV_NAMES, RESERVED_ENV_PREFIXES

    near: set[str] = set()
    for word in [*REFUSED_ENV_NAMES, *RESERVED_ENV_PREFIXES]:
        for cut in range(1, len(word) + 1):
            near.update({word[:cut], word[:cut] + "X", word[:cut] + "_", word[:cut] + "9"})
        near.update({word + "A", "A" + word, word.lower()})
    return sorted(near)


_NEAR_RESERVED = _near_reserved()
