"""The session plan and the hot path's fast forms (``core/_plan.py`` and the
shortcuts beside it) answer exactly as the general functions they stand in
for, on random inputs: the same task ids (C1), admission sizes (C14),
canonical texts (C12), launch digests (C3) and drift digests (C9); and a
whole port run with the plan answers with the same results and sends the
same effects as one that builds everything per call."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sandrail
from sandrail import _port_call as port_call_module
from sandrail.core import (
    ALL_WELL,
    RUNTIME_ARTIFACTS,
    AgentIdentity,
    AgentOwner,
    AuthorityReport,
    CanonicalJSONError,
    CheckAuthority,
    CommandState,
    Delivery,
    EffectFailure,
    FatalInterpreterError,
    NativeOwner,
    OutputChunk,
    PortSettings,
    Read,
    Redactions,
    ToolCall,
    ToolRequest,
    canonical_json,
    command_tool_definitions,
    mask_chunk,
    task_id,
    tool_record,
    with_arguments,
)
from sandrail.core import _call as call_module
from sandrail.core import _canonical as canonical_module
from sandrail.core import _snapshot as snapshot_module
from sandrail.core._admission import record_admission_size
from sandrail.core._plan import SessionPlan, session_plan
from sandrail.core._rules import call_text, filled_arguments
from sandrail.core._tools import TOOLS
from sandrail.interpreters.simulator import Simulator

_TEXT = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12)
_OWNERS = st.builds(AgentOwner, agent_id=_TEXT) | st.builds(
    NativeOwner, scope=st.dictionaries(_TEXT, _TEXT | st.integers(-5, 5), max_size=3)
)


def _settings(owner: Any, session_id: str, budget: int = 24_000) -> PortSettings:
    return PortSettings(
        session_id=session_id,
        owner=owner,
        definitions=command_tool_definitions(),
        contract="sandrail.command-tools/v1",
        max_output_bytes=budget,
    )


@given(_OWNERS, _TEXT, _TEXT)
def test_c1_the_plans_task_id_is_the_task_id(owner: Any, session_id: str, key: str) -> None:
    """C1: the task id from the plan's pre-encoded frame is task_id's."""
    plan = session_plan(_settings(owner, session_id))
    assert plan.task_id(key) == task_id(session_id, owner, key)


@given(
    agent=_TEXT,
    other=_TEXT,
    session_id=_TEXT,
    key=_TEXT,
    call_id=_TEXT,
    tool=st.sampled_from(sorted(TOOLS)),
    internet=st.booleans(),
    own_agent=st.booleans(),
)
def test_c14_the_plans_admission_size_is_the_admission_size(
    agent: str,
    other: str,
    session_id: str,
    key: str,
    call_id: str,
    tool: str,
    internet: bool,
    own_agent: bool,
) -> None:
    """C14: the plan's admission size (its fixed parts measured once) is the
    general measure, for the port's own agent and (by the general path) any
    other identity."""
    settings = attrs.evolve(_settings(AgentOwner(agent_id=agent), session_id))
    settings = PortSettings(
        session_id=settings.session_id,
        owner=settings.owner,
        definitions=settings.definitions,
        contract=settings.contract,
        allow_internet_access=internet,
    )
    snap = snapshot_module._Snapshot(
        tool=tool,
        call_id=call_id,
        operation_key=key,
        session_id=session_id,
        identity=AgentIdentity(agent_id=agent if own_agent else other),
        arguments={},
        digest="",
        governed=False,
    )
    record = tool_record(tool)
    assert session_plan(settings).admission_size(record, snap) == record_admission_size(
        record, snap, settings
    )


_FLAT = st.dictionaries(
    st.text(max_size=4),
    st.text(max_size=6) | st.none() | st.booleans() | st.integers(-(2**54), 2**54),
    max_size=6,
)


def _walked(value: Any) -> bytes | type[CanonicalJSONError]:
    with mock.patch.object(canonical_module, "_flat_text", return_value=None):
        try:
            return canonical_json(value)
        except CanonicalJSONError:
            return CanonicalJSONError


@given(_FLAT | st.dictionaries(st.text(max_size=3), st.floats() | st.lists(st.integers())))
def test_c12_flat_objects_encode_as_the_walk_encodes_them(value: dict[str, Any]) -> None:
    """C12: a flat object written by the C encoder is the canonical walk's
    text, byte for byte (and what the walk refuses is refused)."""
    try:
        fast: bytes | type[CanonicalJSONError] = canonical_json(value)
    except CanonicalJSONError:
        fast = CanonicalJSONError
    assert fast == _walked(value)


@given(_FLAT, st.sampled_from(sorted(TOOLS)))
def test_c3_the_launch_text_is_the_canonical_json_of_tool_and_arguments(
    arguments: dict[str, Any], tool: str
) -> None:
    """C3: the launch digest's text, written from its parts, is the
    canonical JSON of the tool and its filled-in arguments."""
    defaults = tool_record(tool).digest_defaults
    whole = {"tool": tool, "arguments": filled_arguments(defaults, arguments)}
    expected = _walked(whole)
    if expected is CanonicalJSONError:
        with pytest.raises(CanonicalJSONError):
            call_text(tool, defaults, arguments)
    else:
        assert call_text(tool, defaults, arguments) == expected


@given(st.lists(st.text(max_size=4) | st.integers() | st.floats(allow_nan=False), max_size=4))
def test_c9_the_digest_text_is_the_json_encoders(value: list[Any]) -> None:
    """C9: the drift digest's text, from the C encoder called directly, is
    ``json.JSONEncoder(...).encode``'s."""
    answers: list[object] = []
    for encode in (snapshot_module.digest_text, snapshot_module._DIGEST_ENCODER.encode):
        try:
            answers.append(encode(value))
        except ValueError as exc:  # infinity has no JSON form
            answers.append(type(exc))
    assert answers[0] == answers[1]


@given(_FLAT)
def test_c8_with_arguments_is_evolve(arguments: dict[str, Any]) -> None:
    """C8: the policy's copy of a request, made by the generated copier, is
    what attrs.evolve makes."""
    request = ToolRequest(
        call=ToolCall(name="run_command", call_id="c", arguments={"command": "x"}),
        operation_key="k",
        session_id="s",
        definition=None,
        identity=AgentIdentity(agent_id="a"),
        cancel=sandrail.CancelToken(),
        result_governance="runtime-artifacts/v1",
    )
    copied = with_arguments(request, arguments)
    assert copied == attrs.evolve(request, call=attrs.evolve(request.call, arguments=arguments))
    assert copied.call.arguments is arguments


@given(st.text(max_size=20), st.text(max_size=20), st.integers(0, 5), st.booleans())
def test_c17_a_page_without_secrets_is_the_evolved_page(
    stdout: str, stderr: str, cursor: int, started: bool
) -> None:
    """C17: without secrets, the masked read's page (shared when already
    right) equals the page evolved field by field."""
    out_end = cursor + len(stdout.encode("utf-8", "surrogateescape"))
    err_end = cursor + len(stderr.encode("utf-8", "surrogateescape"))
    state = CommandState(status="exited", exit_code=0, stdout_bytes=out_end, stderr_bytes=err_end)
    chunk = OutputChunk(
        stdout=stdout,
        stderr=stderr,
        next_stdout_cursor=out_end,
        next_stderr_cursor=err_end,
        more=False,
        state=state,
        stdout_start=cursor if started else None,
        stderr_start=cursor if started else None,
    )
    read = Read(
        sandbox_id="s", task_id="t", stdout_cursor=cursor, stderr_cursor=cursor, max_bytes=99
    )
    page = mask_chunk(read, read, chunk, Redactions(frozenset()))
    sanitized = [
        text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        for text in (stdout, stderr)
    ]
    assert page == attrs.evolve(
        chunk,
        stdout=sanitized[0],
        stderr=sanitized[1],
        stdout_start=cursor,
        stderr_start=cursor,
    )


# -- a whole port: the plan against building everything per call -------------------


@contextlib.contextmanager
def _everything_per_call() -> Iterator[None]:
    """The port with every shortcut replaced by the general function it
    stands in for."""

    def planned_task_id(plan: SessionPlan, key: str) -> str:
        return task_id(plan._settings.session_id, plan._settings.owner, key)

    def admission_size(plan: SessionPlan, record: Any, snap: Any) -> int:
        return record_admission_size(record, snap, plan._settings)

    with (
        mock.patch.object(SessionPlan, "task_id", planned_task_id),
        mock.patch.object(SessionPlan, "admission_size", admission_size),
        mock.patch.object(canonical_module, "_flat_text", return_value=None),
        mock.patch.object(snapshot_module, "_make_encoder", None),
        mock.patch.object(snapshot_module, "_own_digest", return_value=""),
        # Every effect through PortCall.route, none routed directly.
        mock.patch.object(port_call_module, "_DIRECT", frozenset()),
        # An all-well observation no program recognises by identity.
        mock.patch.object(
            call_module,
            "ALL_WELL",
            AuthorityReport(aborted=False, drifted=False, authority_held=True),
        ),
    ):
        yield


_SECRET = "s3cret-value-1"
_CALLS = st.lists(
    st.tuples(
        st.sampled_from(["run_command", "read_command_output", "stop_command", "sandbox_status"]),
        st.sampled_from(["k1", "k2", "k3"]),
        st.sampled_from(["echo hi", "true", "false", "exit 3", "seq 400", f"echo {_SECRET}"]),
        st.booleans(),
        st.none() | st.just({"TOKEN": _SECRET}),
        st.sampled_from([None, 5, 5.0]),
    ),
    min_size=1,
    max_size=6,
)


def _run(calls: list[tuple[Any, ...]], budget: int) -> tuple[list[Any], list[Any], Any]:
    simulator = Simulator()
    effects: list[Any] = []

    def backend(effect: Any) -> Any:
        effects.append(effect)
        return simulator(effect)

    port = sandrail.command_tools(
        backend=backend,
        session_id="plan-session",
        owner=AgentOwner(agent_id="plan-agent"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        max_output_bytes=budget,
    )
    results: list[Any] = []
    tasks: list[str] = []
    for number, (tool, key, command, background, env, timeout) in enumerate(calls):
        arguments: dict[str, Any]
        if tool == "run_command":
            arguments = {"command": command}
            if background:
                arguments["background"] = True
            elif timeout is not None:
                arguments["timeout"] = timeout
            if env is not None:
                arguments["env"] = env
        elif tool == "sandbox_status":
            arguments = {}
        else:
            arguments = {"task_id": tasks[-1] if tasks else "0" * 64}
        request = ToolRequest(
            call=ToolCall(name=tool, call_id=f"c{number}", arguments=arguments),
            operation_key=key,
            session_id="plan-session",
            definition=port.definition(tool),
            identity=AgentIdentity(agent_id="plan-agent"),
        )
        result = port.execute_sync(request)
        found = result.content.get("task_id")
        if isinstance(found, str):
            tasks.append(found)
        results.append((result.status, result.content, result.background_command_ref))
    return results, effects, dict(port.owned_commands)


@settings(max_examples=40, deadline=None)
@given(_CALLS, st.sampled_from([1_000, 24_000]))
def test_c2_c12_c17_a_port_with_its_plan_answers_as_one_without(
    calls: list[tuple[Any, ...]], budget: int
) -> None:
    """C2, C12, C17: the same calls, run with the plan and fast forms and
    with everything built per call, give the same results, send the same
    sandbox effects (task ids and launch digests included) and leave the
    same ledger."""
    fast = _run(calls, budget)
    with _everything_per_call():
        slow = _run(calls, budget)
    assert fast == slow


_FAILURES = st.lists(
    st.tuples(
        st.integers(0, 14),
        st.sampled_from(
            ["raise", "cancelled", "maybe_sent", "not_sent", "none", "fatal", "deny", "lost"]
        ),
    ),
    max_size=3,
)


def _failing_run(failures: list[tuple[int, str]], calls: int) -> list[Any]:
    """``calls`` runs of one key through a port whose backend and callbacks
    fail as ``failures`` say at the effects they name (by their number
    among all the effects the port answered so far)."""
    simulator = Simulator()
    seen = [0]
    planned = dict(failures)

    def fail(kind: str) -> Any:
        if kind == "raise":
            raise RuntimeError("boom")
        if kind == "cancelled":
            raise asyncio.CancelledError()
        if kind == "maybe_sent":
            raise EffectFailure(Delivery.MAYBE_SENT, "lost")
        if kind == "not_sent":
            raise EffectFailure(Delivery.NOT_SENT, "down")
        if kind == "fatal":
            raise FatalInterpreterError("diverged")
        return None

    def step(answer: Any) -> Any:
        number = seen[0]
        seen[0] += 1
        kind = planned.get(number)
        if kind is None or kind in ("deny", "lost"):
            return answer()
        return fail(kind)

    def authorize(request: Any) -> Any:
        kind = planned.get(seen[0])
        return step(lambda: sandrail.Deny(reason="no") if kind == "deny" else sandrail.ALLOW)

    def authority(request: Any) -> bool:
        kind = planned.get(seen[0])
        return bool(step(lambda: kind != "lost"))

    port = sandrail.command_tools(
        backend=lambda effect: step(lambda: simulator(effect)),
        session_id="plan-session",
        owner=AgentOwner(agent_id="plan-agent"),
        authorize=authorize,
        assert_authority=authority,
    )
    outcomes: list[Any] = []
    for number in range(calls):
        request = ToolRequest(
            call=ToolCall(name="run_command", call_id=f"c{number}", arguments={"command": "true"}),
            operation_key="k",
            session_id="plan-session",
            definition=port.definition("run_command"),
            identity=AgentIdentity(agent_id="plan-agent"),
        )
        try:
            result = port.execute_sync(request)
        except (FatalInterpreterError, asyncio.CancelledError) as passed:
            # What the port lets through (a cancellation out of
            # assert_authority too): through either route alike.
            outcomes.append(("raised", type(passed), str(passed)))
            continue
        outcomes.append((result.status, result.content))
    return [*outcomes, dict(port.owned_commands)]


@settings(max_examples=60, deadline=None)
@given(_FAILURES, st.integers(1, 3))
def test_c5_c6_effects_routed_directly_fail_as_routed_generally(
    failures: list[tuple[int, str]], calls: int
) -> None:
    """C5, C6: a port that routes each effect of an exact type directly
    answers as one that routes every effect through its general route, when
    the backend or a callback raises, fails an effect, answers nothing, or
    denies, at any effect of a retried call."""
    fast = _failing_run(failures, calls)
    with mock.patch.object(port_call_module, "_DIRECT", frozenset()):
        slow = _failing_run(failures, calls)
    assert fast == slow


class _Token:
    """An abort signal that has or has not fired."""

    def __init__(self, cancelled: bool) -> None:
        self.cancelled = cancelled


@settings(max_examples=60, deadline=None)
@given(
    verdict=st.sampled_from([True, False, None, "yes", 1]),
    cancel=st.sampled_from([None, False, True]),
    drift=st.booleans(),
)
def test_c9_c11_the_guard_observes_what_the_call_is_told(
    verdict: Any, cancel: bool | None, drift: bool
) -> None:
    """C9, C11: the guard's observation, by whatever shortcut it is made,
    says exactly whether the call was aborted, its request drifted and its
    authority is held (only True holds it); all well is the one shared
    object a program recognises."""
    port = sandrail.command_tools(
        backend=Simulator(),
        session_id="plan-session",
        owner=AgentOwner(agent_id="plan-agent"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: verdict,
    )
    arguments = {"command": "true"}
    request = ToolRequest(
        call=ToolCall(name="run_command", call_id="c1", arguments=arguments),
        operation_key="k",
        session_id="plan-session",
        definition=port.definition("run_command"),
        identity=AgentIdentity(agent_id="plan-agent"),
        cancel=None if cancel is None else _Token(cancel),
    )
    call = port_call_module.PortCall(port._binding, request, asynchronous=False)
    assert call.snapshot is not None
    if drift:
        arguments["command"] = "false"
    report = call.interpret(CheckAuthority(request_digest=call.snapshot.digest))
    expected = AuthorityReport(
        aborted=cancel is True, drifted=drift, authority_held=verdict is True
    )
    assert report == expected
    assert (report is ALL_WELL) == (expected == ALL_WELL)


_KEY_TEXT = _TEXT.filter(lambda text: bool(text.strip()) and "\x00" not in text)


@settings(max_examples=200, deadline=None)
@given(
    agent=_TEXT,
    own_agent=st.booleans(),
    session_id=_TEXT,
    call_id=_KEY_TEXT,
    key=_KEY_TEXT,
    tool=st.sampled_from(["run_command", "read_command_output", "stop_command"]),
    arguments=_FLAT,
    governed=st.booleans(),
    calls=st.integers(1, 3),
)
def test_c9_the_digest_from_its_encoded_end_is_the_request_digest(
    agent: str,
    own_agent: bool,
    session_id: str,
    call_id: str,
    key: str,
    tool: str,
    arguments: dict[str, Any],
    governed: bool,
    calls: int,
) -> None:
    """C9: a snapshot's drift digest, made from the end of its text the
    port encoded once, is request_digest of the request and the snapshot's
    own copy of its arguments, on the first call and on later ones."""
    settings = _settings(AgentOwner(agent_id=agent), session_id)
    definition = settings.definition(tool)
    assert definition is not None
    for number in range(calls):
        request = ToolRequest(
            call=ToolCall(name=tool, call_id=f"{call_id}{number}", arguments=arguments),
            operation_key=key,
            session_id=session_id,
            definition=definition,
            identity=AgentIdentity(agent_id=agent if own_agent else agent + "x"),
            result_governance=RUNTIME_ARTIFACTS if governed else None,
        )
        snap = snapshot_module.snapshot_request(request, settings)
        if not own_agent:
            assert snap is None  # another agent's call is refused
            return
        assert snap is not None
        assert snap.digest == snapshot_module.request_digest(request, snap.arguments)
        own = snapshot_module._own_digest(request, dict(snap.arguments), settings)
        assert own == snap.digest
