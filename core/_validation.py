"""Checking a call's arguments against its tool's JSON Schema (the
``e2b_command_arguments_invalid`` content that reports what is wrong is
:mod:`._rejection`'s).

Strategy: arguments arrive from a model through a harness, so they may be
anything at all. :func:`check_arguments` first walks them once, without
recursion, into a plain copy that holds only exact JSON types (``dict``,
``list``, ``str``, ``int``, ``float``, ``bool``, ``None``); whatever is not
JSON data (a custom object, NaN, a lone surrogate, a non-text key, a cycle or
absurd nesting) becomes a problem of its own and an opaque stand-in in the
copy. Only that copy reaches ``jsonschema``, whose errors are then turned into
plain-words reasons. So the schema check never meets a ``repr`` that raises,
never recurses deeply, and never quotes a value back: a reason names the
field and what it must be, never what it held (environment values stay out
of results, C17).

Almost every call is valid, so a call first takes a fast path: arguments
that are already plain JSON data and that the tool's schema, compiled to a
predicate (:mod:`~sandrail.core._compiled_schema`), accepts have no problem
to report. Everything else goes the whole way above, so every reason is
still ``jsonschema``'s reading in plain words.

Number semantics follow JSON Schema: ``1.0`` counts as the integer 1 (JSON
has one number type, and the reference port cannot tell them apart), while
``true``/``false`` are never integers. Programs that read an integer argument
convert it with ``int()``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import attrs
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

from ._compiled_schema import Predicate, compile_schema, ecma_regex, is_plain_json, is_unicode
from ._definitions import (
    COMMAND_PATTERN,
    NO_NUL_PATTERN,
    SANDBOX_ID_PATTERN,
    TASK_ID_PATTERN,
    ToolDefinition,
)
from ._env import ENV_NAME_PATTERN, env_name_problem
from ._env_strict import STRICT_ENV_NAME_PATTERN
from ._rejection import ArgumentProblem, arguments_rejection, printable
from ._tools import tool_record

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "MAX_ARGUMENT_VALUES",
    "ArgumentProblem",
    "arguments_rejection",
    "check_arguments",
    "ecma_regex",
]

MAX_ARGUMENT_DEPTH: Final = 64
"""Containers nested deeper than this are reported, not inspected."""
MAX_ARGUMENT_VALUES: Final = 100_000
"""Arguments holding more JSON values than this are refused as a whole."""

ROOT: Final = "arguments"

_PATTERN_MEANINGS: Final = {
    TASK_ID_PATTERN: "64 lowercase hex characters",
    SANDBOX_ID_PATTERN: "1 to 128 letters, digits, '_' or '-'",
}
_PATTERN_REASONS: Final = {NO_NUL_PATTERN: "must not contain a NUL character"}
_PATTERN_NOUNS: Final = {
    COMMAND_PATTERN: "a string that is not blank and holds no NUL character",
    NO_NUL_PATTERN: "a string without NUL characters",
}


def check_arguments(definition: ToolDefinition, arguments: object) -> tuple[ArgumentProblem, ...]:
    """Every problem with ``arguments`` for ``definition``, sorted by path then
    reason; an empty tuple means they are valid.

    The rules the tool's record answers with its own error codes (its
    ``own_code_rules``) are left out: the port checks them next. Raises
    :class:`~sandrail.core.UnknownToolError` for a definition of a tool
    without a record.

    Never raises for any ``arguments``. (A ``definition`` whose parameters are
    not a valid JSON Schema raises ``jsonschema.SchemaError``: that is a bug in
    the definition, not in the call.)
    """
    tool_record(definition.name)  # no record, no check: what it leaves to its refusal is unknown
    checker = _checker_for(definition)
    if (
        checker.accepts is not None
        and type(arguments) is dict
        and is_plain_json(arguments)
        and checker.accepts(arguments)
    ):
        # The fast path: plain data its compiled schema accepts,
        # where jsonschema would find nothing to report either.
        return ()
    return _problems(definition, checker.validator, arguments)


def _problems(
    definition: ToolDefinition, validator: Any, arguments: object
) -> tuple[ArgumentProblem, ...]:
    """:func:`check_arguments` the whole way: walk, validate, explain."""
    walked = _to_plain_json(arguments)
    if isinstance(walked, ArgumentProblem):
        return (walked,)
    plain, found = walked
    own_code = tool_record(definition.name).own_code_rules
    for error in validator.iter_errors(plain):
        where = tuple(error.schema_path)
        if any(where[: len(rule)] == rule for rule in own_code):
            continue
        found.update(_explain(error, validator))
    return tuple(sorted(found, key=lambda problem: (problem.path, problem.reason)))


# --- walking arbitrary input into plain JSON ---------------------------------------


class _NotJSON:
    """Stands in for a value already reported; the schema check skips it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<not JSON>"


_NOT_JSON: Final = _NotJSON()

_Path = tuple[str | int, ...]


class _TooManyValuesError(Exception):
    pass


def _to_plain_json(
    arguments: object,
) -> tuple[dict[str, Any], set[ArgumentProblem]] | ArgumentProblem:
    """A plain copy of ``arguments`` and the problems found on the way, or the
    single problem that stops the check (not an object, far too many values)."""
    if not issubclass(type(arguments), Mapping):
        return ArgumentProblem(ROOT, "must be a JSON object")
    walker = _Walker()
    try:
        root = walker.run(arguments)
    except _TooManyValuesError:
        return ArgumentProblem(ROOT, f"must hold at most {MAX_ARGUMENT_VALUES} values in all")
    if not isinstance(root, dict):
        return ArgumentProblem(ROOT, "must be a JSON object")
    return root, walker.problems


class _Walker:
    """Iterative copy of JSON-like data: each node's plain value is stored into
    its parent's slot; bad nodes become :data:`_NOT_JSON` plus a problem."""

    def __init__(self) -> None:
        self.problems: set[ArgumentProblem] = set()
        self._count = 0

    def run(self, value: object) -> object:
        holder: list[object] = [None]
        stack: list[tuple[object, _Path, Any, str | int]] = [(value, (), holder, 0)]
        while stack:
            node, path, parent, slot = stack.pop()
            self._count += 1
            if self._count > MAX_ARGUMENT_VALUES:
                raise _TooManyValuesError
            try:
                parent[slot] = self._plain(node, path, stack)
            except Exception:
                # A custom object may fail in any way while it is read.
                parent[slot] = self._bad(path, "must be JSON data")
        return holder[0]

    def _bad(self, path: _Path, reason: str) -> _NotJSON:
        self.problems.add(ArgumentProblem(_format_path(path), reason))
        return _NOT_JSON

    def _plain(
        self, node: Any, path: _Path, stack: list[tuple[object, _Path, Any, str | int]]
    ) -> object:
        # Types are read with `type()` and copied with the base class's own
        # methods, so a subclass's overrides never run on the way to the copy.
        kind = type(node)
        if node is None or node is True or node is False:
            return node
        if issubclass(kind, str):
            text = str.__str__(node)
            if not is_unicode(text):
                return self._bad(path, "must be valid Unicode text (holds a lone surrogate)")
            return text
        if issubclass(kind, int):
            return int.__int__(node)
        if issubclass(kind, float):
            number = float.__float__(node)
            if not math.isfinite(number):
                return self._bad(path, "must be JSON data (a finite number)")
            return number
        is_object = issubclass(kind, Mapping)
        if not is_object and not issubclass(kind, (list, tuple)):
            return self._bad(path, "must be JSON data")
        if len(path) >= MAX_ARGUMENT_DEPTH:
            return self._bad(path, f"must be nested at most {MAX_ARGUMENT_DEPTH} levels deep")
        # Read the whole container before scheduling any child, so a container
        # that fails half-way leaves no orphans behind.
        children: list[tuple[str | int, object]]
        copy: dict[str, Any] | list[Any]
        if is_object:
            children = []
            for key, item in list(node.items()):
                if not issubclass(type(key), str):
                    self._bad(
                        path, f"must be JSON data (keys must be text, not {type(key).__name__})"
                    )
                    continue
                children.append((str.__str__(key), item))
            copy = {str(name): None for name, _ in children}
        else:
            children = list(enumerate(list(node)))
            copy = [None] * len(children)
        for name, item in children:
            child = (*path, name)
            if isinstance(name, str) and not is_unicode(name):
                self._bad(child, "must be valid Unicode text (holds a lone surrogate)")
            stack.append((item, child, copy, name))
        return copy


def _format_path(path: Iterable[str | int]) -> str:
    parts = [ROOT]
    for part in path:
        parts.append(f"[{part}]" if isinstance(part, int) else f".{part}")
    return printable("".join(parts))


# --- turning jsonschema errors into plain words ------------------------------------


def _ecma_pattern(
    validator: Any, pattern: str, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not ecma_regex(pattern).search(instance):
        yield ValidationError("does not match the pattern")


_Validator: Final = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, {"pattern": _ecma_pattern}
)


@attrs.frozen
class _Checker:
    """What checks the arguments of one definition: ``jsonschema``'s
    validator (``pattern`` read as ECMA-262, see :func:`ecma_regex`), and the
    schema compiled to a predicate when it can be (the fast path)."""

    validator: Any
    accepts: Predicate | None


_CHECKERS: dict[str, _Checker] = {}
_CHECKERS_LIMIT: Final = 256


def _checker_for(definition: ToolDefinition) -> _Checker:
    """Built once per definition and reused for every call.

    Keyed by the definition's digest (computed once, when it was made), so a
    definition equal to one seen before, even another object, finds its
    checker by one string comparison instead of comparing whole schemas.
    """
    found = _CHECKERS.get(definition.digest)
    if found is not None:
        return found
    schema = definition.to_dict()["parameters"]
    Draft202012Validator.check_schema(schema)
    checker = _Checker(validator=_Validator(schema), accepts=compile_schema(schema))
    if len(_CHECKERS) >= _CHECKERS_LIMIT:
        _CHECKERS.pop(next(iter(_CHECKERS)), None)  # the oldest
    _CHECKERS[definition.digest] = checker
    return checker


_DESCRIBED_BY_SCHEMA: Final = frozenset(
    {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "enum", "const"}
)


def _explain(error: ValidationError, validator: Any) -> Iterator[ArgumentProblem]:
    if isinstance(error.instance, _NotJSON):
        return  # reported while walking
    path = tuple(error.absolute_path)
    # jsonschema types these as "maybe unset"; for a yielded error they are set.
    schema: Any = error.schema
    instance: Any = error.instance
    value: Any = error.validator_value
    kind = error.validator
    if "propertyNames" in error.schema_path:
        # A rule on a key (an env name): name the key, as a path would.
        if not is_unicode(instance):
            return  # reported while walking
        path = (*path, instance)
    if kind == "pattern" and value in (ENV_NAME_PATTERN, STRICT_ENV_NAME_PATTERN):
        reason = env_name_problem(instance) if isinstance(instance, str) else None
        yield ArgumentProblem(_format_path(path), reason or "must be an allowed env name")
        return
    if kind == "required":
        for name in value:
            if name not in instance:
                yield ArgumentProblem(_format_path((*path, name)), "is required")
    elif kind == "additionalProperties":
        allowed = schema.get("properties", {})
        for name in instance:
            if name not in allowed:
                yield ArgumentProblem(_format_path((*path, name)), "is not an allowed field")
    elif kind in ("anyOf", "oneOf"):
        yield from _explain_alternatives(error, validator, path)
    elif kind in _DESCRIBED_BY_SCHEMA:
        yield ArgumentProblem(_format_path(path), "must be " + _describe(schema))
    elif kind == "minLength":
        least = value
        reason = "must not be empty" if least == 1 else f"must be at least {least} characters long"
        yield ArgumentProblem(_format_path(path), reason)
    elif kind == "maxLength":
        yield ArgumentProblem(_format_path(path), f"must be at most {value} characters long")
    elif kind == "maxProperties":
        yield ArgumentProblem(_format_path(path), f"must hold at most {value} entries")
    elif kind == "pattern":
        reason = _PATTERN_REASONS.get(value) or "must match " + _pattern(value)
        yield ArgumentProblem(_format_path(path), reason)
    else:
        yield ArgumentProblem(_format_path(path), f"does not meet the schema's {kind} rule")


def _explain_alternatives(
    error: ValidationError, validator: Any, path: _Path
) -> Iterator[ArgumentProblem]:
    """For ``anyOf`` (nullable fields): if the value has the type one branch
    wants, say what is wrong with it under that branch; else list the branches."""
    branches: Any = error.validator_value
    schema: Any = error.schema
    index = next(
        (
            index
            for index, branch in enumerate(branches)
            if isinstance(branch.get("type"), str)
            and validator.is_type(error.instance, branch["type"])
        ),
        None,
    )
    inner = [sub for sub in error.context or () if sub.relative_schema_path[0] == index]
    if inner:
        for sub in inner:
            yield from _explain(sub, validator)
        return
    yield ArgumentProblem(_format_path(path), "must be " + _describe(schema))


def _describe(schema: Mapping[str, Any]) -> str:
    """What a value must be under a (simple) schema, in plain words."""
    if "anyOf" in schema:
        return ", or ".join(_describe(branch) for branch in schema["anyOf"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return ", or ".join(_describe({**schema, "type": one}) for one in kind)
    if kind in ("integer", "number"):
        noun = "an integer" if kind == "integer" else "a number"
        least, most = schema.get("minimum"), schema.get("maximum")
        if least is not None and most is not None:
            return f"{noun} from {least} to {most}"
        if least is not None:
            return f"{noun} of at least {least}"
        if most is not None:
            return f"{noun} of at most {most}"
        return noun
    if kind == "string":
        if schema.get("pattern") in _PATTERN_NOUNS:
            return _PATTERN_NOUNS[schema["pattern"]]
        if "pattern" in schema:
            return "a string matching " + _pattern(schema["pattern"])
        return "a non-empty string" if schema.get("minLength", 0) >= 1 else "a string"
    if kind == "object":
        values = schema.get("additionalProperties")
        if isinstance(values, Mapping):
            return f"a JSON object whose every value is {_describe(values)}"
        return "a JSON object"
    if kind in _NOUNS:
        return _NOUNS[kind]
    if "enum" in schema:
        return "one of " + ", ".join(str(option) for option in schema["enum"])
    if "const" in schema:
        return f"exactly {schema['const']}"
    return "a value the schema allows"


_NOUNS: Final = {"boolean": "true or false", "null": "null", "array": "an array"}


def _pattern(pattern: str) -> str:
    meaning = _PATTERN_MEANINGS.get(pattern)
    return f"{pattern} ({meaning})" if meaning else pattern
