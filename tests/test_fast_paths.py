"""The fast paths the port takes for speed say exactly what the
slow ones say: the structural drift check agrees with the request digest
(C9), the size bound is never below the canonical size (C12), and a
sanitized page without secrets is the masked page (C17)."""

from __future__ import annotations

import copy
import inspect
import json
import sys
from typing import Any, get_args
from unittest import mock

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sandrail
from sandrail.core import (
    Effect,
    OutcomeValue,
    SandboxReady,
    SandboxState,
    canonical_json,
    request_digest,
    snapshot_request,
    unchanged,
)
from sandrail.core._call import _fits_whole, _size_bound
from sandrail.core._snapshot import RequestParts, digest_text, plain_arguments, request_parts
from sandrail.interpreters import _cassette_codec as codec_module
from sandrail.interpreters._cassette import _read_line
from sandrail.interpreters._cassette_codec import (
    _dumps,
    encode_effect,
    encode_outcome,
    normalize,
)
from sandrail.testing import World, native_identity
from sandrail.testing.strategies import anything, json_values, result_json_values

_PORTS = {
    mode: World.simulated().command_tools(owner=mode, max_output_bytes=4_000)
    for mode in ("agent", "native")
}


def _request(mode: str, arguments: dict[str, Any], scope: dict[str, Any]) -> sandrail.ToolRequest:
    port = _PORTS[mode]
    identity: Any = (
        sandrail.AgentIdentity(agent_id="agent-1")
        if mode == "agent"
        else native_identity(scope=scope)
    )
    return sandrail.ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id="c1", arguments=arguments),
        operation_key="op-1",
        session_id="session-1",
        definition=port.definition("run_command"),
        identity=identity,
    )


def _mutate(value: Any, data: st.DataObject) -> None:
    """Change ``value`` (a dict or list) in place, somewhere, somehow."""
    change_one = data.draw(st.booleans())
    if isinstance(value, dict):
        if value and change_one:
            key = data.draw(st.sampled_from(sorted(value)))
            if isinstance(value[key], dict | list) and data.draw(st.booleans()):
                _mutate(value[key], data)
            else:
                value[key] = data.draw(anything)
        else:
            value[data.draw(st.text(max_size=3))] = data.draw(anything)
    elif isinstance(value, list):
        if value and change_one:
            value[data.draw(st.integers(0, len(value) - 1))] = data.draw(anything)
        else:
            value.append(data.draw(anything))


@given(
    mode=st.sampled_from(["agent", "native"]),
    arguments=st.dictionaries(st.text(max_size=5), json_values(8), max_size=4),
    scope=st.dictionaries(st.text(max_size=5), json_values(4), max_size=3),
    data=st.data(),
)
def test_c9_structural_drift_check_agrees_with_the_digest(
    mode: str, arguments: dict[str, Any], scope: dict[str, Any], data: st.DataObject
) -> None:
    """Whatever the harness does to its request in place, the structural
    check says what comparing digests says, or leaves it to the digest."""
    port = _PORTS[mode]
    settings = attrs_settings(port, scope if mode == "native" else None)
    request = _request(mode, arguments, scope)
    snap = snapshot_request(request, settings)
    if snap is None or not snap.digest:
        return
    assert unchanged(request, snap) is True
    if data.draw(st.booleans()):
        _mutate(arguments, data)
    if mode == "native" and data.draw(st.booleans()):
        _mutate(scope, data)
    verdict = unchanged(request, snap)
    try:
        same = request_digest(request) == snap.digest
    except Exception:
        same = False
    assert verdict is None or verdict == same


@pytest.mark.parametrize("mode", ["agent", "native"])
def test_c9_a_value_whose_comparison_raises_is_left_to_the_digest(mode: str) -> None:
    """A harness that puts in its arguments a value whose ``==`` raises: the
    structural check cannot tell, so it says so (``None``) instead of
    raising (the digest, which cannot encode it either, then reads drift)."""

    class Hostile:
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("eq")

        __hash__ = object.__hash__

    arguments: dict[str, Any] = {"command": "echo hi"}
    request = _request(mode, arguments, {})
    snap = snapshot_request(request, attrs_settings(_PORTS[mode], {} if mode == "native" else None))
    assert snap is not None
    assert unchanged(request, snap) is True
    arguments["command"] = Hostile()
    assert unchanged(request, snap) is None


def attrs_settings(port: sandrail.ToolPort, scope: dict[str, Any] | None) -> Any:
    import attrs

    if scope is None:
        return port.settings
    return attrs.evolve(port.settings, owner=sandrail.NativeOwner(scope=copy.deepcopy(scope)))


def test_c9_drift_the_digest_sees_the_structure_sees() -> None:
    """The cases a value comparison would miss: 1 is not 1.0 nor True, and a
    key moved into a nested object is a change."""
    for before, after in (
        ({"timeout": 1}, {"timeout": 1.0}),
        ({"timeout": 1}, {"timeout": True}),
        ({"env": {"A": "1"}}, {"env": {"A": "1", "B": "2"}}),
        ({"x": [1, 2]}, {"x": [2, 1]}),
        ({"x": -0.0}, {"x": 0.0}),
    ):
        arguments = dict(before)
        request = _request("agent", arguments, {})
        snap = snapshot_request(request, _PORTS["agent"].settings)
        assert snap is not None
        arguments.clear()
        arguments.update(after)
        assert unchanged(request, snap) is False, (before, after)
        assert request_digest(request) != snap.digest


@pytest.mark.untraced
@given(result_json_values)
def test_c12_the_size_bound_is_never_below_the_canonical_size(value: Any) -> None:
    bound = _size_bound(value)
    if bound is not None:
        assert bound >= len(canonical_json(value))


@given(st.dictionaries(st.text(max_size=8), result_json_values, max_size=6), st.integers(2, 400))
def test_c12_fits_whole_is_exact(content: dict[str, Any], budget: int) -> None:
    assert _fits_whole(content, budget) == (len(canonical_json(content)) <= budget)


def test_c12_fits_whole_refuses_what_has_no_canonical_form() -> None:
    import pytest

    from sandrail.core import CanonicalJSONError

    for bad in ({"n": 2**60}, {1: "x"}, {"s": "\ud800" * 5000}):
        with pytest.raises(CanonicalJSONError):
            _fits_whole(bad, 10)  # type: ignore[arg-type]


def test_c9_what_only_the_digest_can_judge_is_left_to_it() -> None:
    """A replaced field, a tuple, a mapping that is not a dict, a key that is
    not a string, nesting too deep to walk: the structural check says
    nothing, and the digest decides."""
    import collections

    for before, arguments in (
        ({"command": ["a", "b"]}, {"command": ("a", "b")}),
        ({"command": {"a": 1}}, {"command": collections.OrderedDict(a=1)}),
        ({"command": [1, ["x"]]}, {"command": [1, ("x",)]}),
    ):
        request = _request("agent", dict(before), {})
        snap = snapshot_request(request, _PORTS["agent"].settings)
        assert snap is not None
        live = request.call.arguments
        assert isinstance(live, dict)
        live.clear()
        live.update(arguments)
        assert unchanged(request, snap) is None
    request = _request("agent", {"command": "echo", "env": {"A": "1"}}, {})
    snap = snapshot_request(request, _PORTS["agent"].settings)
    assert snap is not None
    request.call.arguments["env"] = {1: "1"}  # type: ignore[index]
    assert unchanged(request, snap) is None
    deep: dict[str, Any] = {"A": "1"}
    for _ in range(200):
        deep = {"A": deep}
    request = _request("agent", {"command": "echo", "env": deep}, {})
    snap = snapshot_request(request, _PORTS["agent"].settings)
    assert snap is not None
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 100)
    try:
        assert unchanged(request, snap) is None  # too deep to walk here
    finally:
        sys.setrecursionlimit(limit)
    assert unchanged(request, snap) is True
    object.__setattr__(request, "operation_key", "op-2")
    assert unchanged(request, snap) is None
    assert request_digest(request) != snap.digest


_FLAT_VALUES = st.one_of(
    st.text(), st.integers(), st.booleans(), st.none(), st.floats(allow_nan=True)
)
_FLAT_KEYS = st.one_of(st.text(max_size=4), st.integers(0, 3), st.none())


@given(st.dictionaries(_FLAT_KEYS, _FLAT_VALUES, max_size=5) | anything)
def test_c8_plain_arguments_read_flat_dicts_as_the_json_round_trip_does(value: Any) -> None:
    """The flat-dict shortcut of :func:`plain_arguments` gives
    the very copy the JSON round trip gives: equal values of the same exact
    types, keys in the same order, or no copy at all."""
    expected: Any
    try:
        expected = json.loads(digest_text(value))
    except (TypeError, ValueError, RecursionError, AttributeError):
        expected = None
    except Exception as exc:  # a hostile mapping: the shortcut must not hide it
        with pytest.raises(type(exc)):
            plain_arguments(value)
        return
    if not isinstance(expected, dict):
        expected = None
    got = plain_arguments(value)
    assert (got is None) == (expected is None)
    if got is not None:
        assert expected is not None
        assert got is not value
        assert list(got) == list(expected)
        assert [type(item) for item in got.values()] == [type(item) for item in expected.values()]
        assert json.dumps(got) == json.dumps(expected)


_LINE_TEXT = st.one_of(
    st.text(max_size=12),
    json_values(4).map(lambda value: json.dumps(value, ensure_ascii=False)),
    st.tuples(
        st.sampled_from(["", " ", "\t", "x", ",1", "}", "\r"]),
        json_values(3).map(json.dumps),
        st.sampled_from(["", " ", "\t", "x", ",1", "}", "\r"]),
    ).map("".join),
)


@given(_LINE_TEXT)
def test_cassette_lines_read_as_json_loads_reads_them(text: str) -> None:
    """The C scanner's shortcut for cassette lines accepts
    exactly what ``json.loads`` accepts, with the same value, and raises
    what it raises otherwise (so errors still name the line)."""
    try:
        expected: Any = json.loads(text)
    except json.JSONDecodeError:
        expected = _INVALID
    if expected is _INVALID:
        with pytest.raises(json.JSONDecodeError):
            _read_line(text)
    else:
        assert json.dumps(_read_line(text)) == json.dumps(expected)


_INVALID = object()


@given(
    anything | json_values(6) | st.floats(),
    st.booleans(),
    st.booleans(),
)
def test_cassette_lines_are_written_as_json_dumps_writes_them(
    value: Any, ensure_ascii: bool, allow_nan: bool
) -> None:
    """The direct C encoder of cassette lines writes exactly what
    ``json.dumps`` writes, and refuses what it refuses with the same error."""
    try:
        expected = json.dumps(value, ensure_ascii=ensure_ascii, allow_nan=allow_nan)
    except Exception as exc:
        with pytest.raises(type(exc)):
            _dumps(value, ensure_ascii=ensure_ascii, allow_nan=allow_nan)
        return
    assert _dumps(value, ensure_ascii=ensure_ascii, allow_nan=allow_nan) == expected


def test_cassette_lines_refuse_a_cycle_as_json_dumps_does() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        _dumps({"a": cycle})
    assert _dumps({"a": [1, 2]}) == json.dumps({"a": [1, 2]})  # nothing left behind


def test_c9_the_digest_text_is_sorted_compact_unescaped_json() -> None:
    """What digests are taken of: keys sorted, no spaces, text as it is
    (a ``\\u`` escape would make two spellings of one request), a mapping
    that is not a dict as the dict it holds; no NaN, no other types."""
    from types import MappingProxyType

    assert digest_text({"b": 1, "a": ["é", None]}) == '{"a":["é",null],"b":1}'
    assert digest_text(MappingProxyType({"k": 1.5})) == '{"k":1.5}'
    with pytest.raises(ValueError, match="not JSON compliant"):
        digest_text(float("nan"))
    with pytest.raises(TypeError, match="set is not JSON data"):
        digest_text({1, 2})


def test_c9_the_parts_are_every_field_of_a_request_but_its_abort_signal() -> None:
    """One definition of "the same request": a field added to a request or
    its call is drift-checked (and recorded) only once it is a part."""
    import attrs

    fields = {f.name for f in attrs.fields(sandrail.ToolCall)}
    fields |= {f.name for f in attrs.fields(sandrail.ToolRequest)} - {"call", "cancel"}
    assert fields == set(RequestParts._fields)


_REPLACED: dict[str, Any] = {
    "name": "read_command_output",
    "call_id": "c2",
    "arguments": {"command": "echo other"},
    "operation_key": "op-2",
    "session_id": "session-2",
    "definition": _PORTS["agent"].definition("read_command_output"),
    "identity": sandrail.AgentIdentity(agent_id="agent-2"),
    "result_governance": "runtime-artifacts/v1",
}


@pytest.mark.parametrize("part", RequestParts._fields)
def test_c9_a_replaced_part_is_drift_to_both_checks(part: str) -> None:
    """Replacing any part of a request mid-call changes its digest, and the
    fast comparison never calls it unchanged."""
    request = _request("agent", {"command": "echo hi"}, {})
    snap = snapshot_request(request, _PORTS["agent"].settings)
    assert snap is not None
    assert unchanged(request, snap) is True
    owner = request.call if part in ("name", "call_id", "arguments") else request
    object.__setattr__(owner, part, _REPLACED[part])
    assert getattr(request_parts(request), part) is _REPLACED[part]
    assert request_digest(request) != snap.digest
    assert unchanged(request, snap) is not True


# -- replay: decoding a cassette's effects and outcomes ------------------------

_UNIONS = {"effect": Effect, "outcome": OutcomeValue}


_LABELS = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True)
_VALID = {
    # Outcomes whose fields have validators st.from_type does not read.
    SandboxState: st.builds(
        SandboxState,
        backend=_LABELS,
        boundary=st.none() | st.from_regex(r"[ -~]{1,244}", fullmatch=True),
    ),
    SandboxReady: st.builds(SandboxReady, backend=_LABELS),
}


@st.composite
def _encoded(draw: st.DrawFn) -> tuple[str, dict[str, Any], bool]:
    """An effect or outcome as a cassette holds it, and sometimes changed:
    a key dropped or added, a value replaced (also inside a nested state)."""
    what = draw(st.sampled_from(sorted(_UNIONS)))
    kind = draw(st.sampled_from(get_args(_UNIONS[what])))
    value = draw(_VALID[kind] if kind in _VALID else st.from_type(kind))
    data = normalize(encode_effect(value) if what == "effect" else encode_outcome(value))
    changed = draw(st.booleans())
    if changed:
        target = data
        if isinstance(data.get("state"), dict) and draw(st.booleans()):
            target = data["state"]
        change = draw(st.sampled_from(["drop", "add", "replace"]))
        keys = sorted(target)
        if change == "drop" and keys:
            target.pop(draw(st.sampled_from(keys)))
        elif change == "add" or not keys:
            target[draw(st.text(max_size=12))] = draw(json_values(3))
        else:
            target[draw(st.sampled_from(keys))] = draw(
                json_values(3) | st.sampled_from([True, 1, 1.0, 0, None, "", "exited", {}])
            )
    return what, data, changed


def _converter_only(data: dict[str, Any], what: str) -> tuple[str, Any]:
    """What the cattrs converter alone makes of ``data``: the value, or its error."""
    with mock.patch.dict(codec_module._FAST, clear=True):
        try:
            return "value", codec_module._structure(data, _UNIONS[what], what)
        except ValueError as exc:
            return "error", str(exc)


def _typed(value: Any) -> Any:
    """``value`` as nested tuples of (type, field values): ``1`` is not ``True``."""
    if attrs.has(type(value)):
        fields = attrs.fields(type(value))
        return (type(value), tuple(_typed(getattr(value, f.name)) for f in fields))
    if isinstance(value, dict):
        return (dict, tuple((key, type(key), _typed(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return (type(value), tuple(_typed(item) for item in value))
    if isinstance(value, float) and value != value:
        return (float, "nan")
    return (type(value), value)


@given(_encoded())
def test_replay_fast_decoding_answers_as_the_converter(drawn: tuple[str, Any, bool]) -> None:
    """The compiled decoders of the replay's load decode exactly what the
    converter decodes, to values of the same types, and leave everything
    else to it (so a bad line is reported in the converter's words)."""
    what, data, changed = drawn
    fast = codec_module._FAST[what].decode(copy.deepcopy(data))
    slow = _converter_only(copy.deepcopy(data), what)
    if fast is not None:
        assert slow[0] == "value"
        assert _typed(fast) == _typed(slow[1])
    elif not changed:
        raise AssertionError(f"the fast path left a recorded {what} to the converter: {data}")
    try:
        public = "value", codec_module._structure(copy.deepcopy(data), _UNIONS[what], what)
    except ValueError as exc:
        public = "error", str(exc)
    assert public[0] == slow[0]
    assert (_typed(public[1]) if public[0] == "value" else public[1]) == (
        _typed(slow[1]) if slow[0] == "value" else slow[1]
    )


_NEAR_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=1 << 63, max_value=1 << 70)
    | st.floats()
    | st.text(alphabet=st.characters(codec=None), max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(
            st.text(max_size=3) | st.integers(0, 3) | st.booleans(), inner, max_size=3
        )
    ),
    max_leaves=10,
)


@given(_NEAR_JSON)
def test_replay_requests_skip_the_json_round_trip_only_when_it_changes_nothing(
    value: Any,
) -> None:
    """A recorded request is compared as it reads back from its line: the
    round trip is skipped only for data it leaves exactly as it is."""
    if codec_module._json_data(value):
        assert _typed(normalize(value)) == _typed(value)
