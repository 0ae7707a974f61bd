"""Recording and replay (sandrail.interpreters.replay):
the cassette format, exact replay, loud divergence, redaction (C17), the
golden recordings and ``sandrail replay``.

The golden cassettes in tests/golden/ are re-recorded with
``python -m tests.golden.record``.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import sandrail
from sandrail import replay_file
from sandrail import replay_port as build_replay_port
from sandrail.cli.replay import replay as replay_command
from sandrail.core import (
    Allow,
    ApprovalRequired,
    ArtifactRef,
    AuthorityReport,
    Authorize,
    Cancel,
    CancelRequested,
    CheckAuthority,
    CommandState,
    Delivery,
    Deny,
    EffectFailure,
    Ensure,
    FatalInterpreterError,
    Inspect,
    OutputChunk,
    OwnedCommand,
    Publish,
    Published,
    Read,
    RememberOwned,
    ResolveOwned,
    SandboxReady,
    SandboxState,
    Start,
    Started,
    StartRefused,
    ToolRequest,
    Wait,
    WriteArtifact,
    request_digest,
)
from sandrail.interpreters.replay import (
    CassetteError,
    DivergenceError,
    Recorder,
    RecorderMisplacedError,
    Replayer,
    decode_effect,
    decode_failure,
    decode_outcome,
    encode_effect,
    encode_failure,
    encode_outcome,
    load_cassette,
    parse_cassette,
)
from sandrail.interpreters.simulator import Simulator
from tests.embed_rig import command_toolset
from tests.golden import record as golden

GOLDEN = Path(golden.__file__).parent
EFFECTS = (
    Authorize,
    CheckAuthority,
    ResolveOwned,
    RememberOwned,
    WriteArtifact,
    Inspect,
    Ensure,
    Publish,
    Start,
    Wait,
    Read,
    Cancel,
)
OUTCOMES = (
    Allow,
    ApprovalRequired,
    Deny,
    AuthorityReport,
    OwnedCommand,
    SandboxState,
    SandboxReady,
    Published,
    Started,
    StartRefused,
    CommandState,
    OutputChunk,
    CancelRequested,
    ArtifactRef,
)


_STATED = {
    # A backend's label and boundary are plain strings that validators bound.
    "backend": st.sampled_from(("e2b", "simulator", "other-1")),
    "boundary": st.none()
    | st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=244),
}


def _strategy(cls: type) -> st.SearchStrategy[Any]:
    """``st.from_type`` with finite floats (JSON has no NaN) for float fields,
    and backend labels and boundaries as backends may state them."""
    fields = attrs.fields(attrs.resolve_types(cls))
    given = {
        field.name: st.floats(allow_nan=False, allow_infinity=False)
        for field in fields
        if field.type is float
    } | {field.name: _STATED[field.name] for field in fields if field.name in _STATED}
    return st.builds(cls, **given) if given else st.from_type(cls)


def _through_line(data: Any) -> Any:
    from sandrail.interpreters._cassette import dump_line

    line = dump_line({"value": data})
    line.encode("utf-8")  # always valid UTF-8, even for lone surrogates
    return json.loads(line)["value"]


# ---------------------------------------------------------------------------
# The cassette format


@pytest.mark.parametrize("cls", EFFECTS, ids=lambda cls: cls.__name__)
@settings(max_examples=40)
@given(data=st.data())
def test_every_effect_round_trips_through_the_cassette_format(cls: type, data: Any) -> None:
    effect = data.draw(_strategy(cls))
    encoded = encode_effect(effect)
    assert next(iter(encoded)) == "type"
    assert encoded["type"] == cls.__name__
    assert decode_effect(_through_line(encoded)) == effect


@pytest.mark.parametrize("cls", OUTCOMES, ids=lambda cls: cls.__name__)
@settings(max_examples=40)
@given(data=st.data())
def test_every_outcome_round_trips_through_the_cassette_format(cls: type, data: Any) -> None:
    outcome = data.draw(_strategy(cls))
    assert decode_outcome(_through_line(encode_outcome(outcome))) == outcome


@given(
    delivery=st.sampled_from(Delivery),
    detail=st.text(),
    aborted=st.booleans(),
    refused=st.booleans(),
)
def test_failures_and_none_round_trip(
    delivery: Delivery, detail: str, aborted: bool, refused: bool
) -> None:
    failure = EffectFailure(delivery, detail, aborted=aborted, refused=refused)
    encoded = encode_failure(failure)
    assert decode_failure(_through_line(encoded)) == failure
    assert ("refused" in encoded) is refused  # older recordings read as they did
    assert decode_outcome(_through_line(encode_outcome(None))) is None


@pytest.mark.parametrize("refused", [False, "yes", None])
def test_a_failure_refused_is_kept_only_as_true(refused: object) -> None:
    with pytest.raises(ValueError, match="refused"):
        decode_failure(
            {"delivery": "not_sent", "detail": "d", "aborted": False, "refused": refused}
        )


def test_an_outcome_recorded_before_outcomes_named_their_backend_still_decodes() -> None:
    """A cassette written when ``SandboxReady``/``SandboxState`` had no
    ``backend`` field (it meant ``e2b`` then) replays as it did."""
    ready = {"type": "SandboxReady", "sandbox_id": "sbx-1", "ledger_epoch": "sbx-1/ledger-0"}
    state = {"type": "SandboxState", "sandbox_id": None, "phase": "absent"}
    assert decode_outcome(ready) == SandboxReady(
        sandbox_id="sbx-1", ledger_epoch="sbx-1/ledger-0", backend="e2b"
    )
    assert decode_outcome(state) == SandboxState(sandbox_id=None, phase="absent", backend="e2b")
    assert decode_outcome({**ready, "backend": "simulator"}).backend == "simulator"


def test_text_stays_readable_text() -> None:
    from sandrail.interpreters._cassette import dump_line

    chunk = OutputChunk(
        stdout="héllo wörld ✓\n",
        stderr="",
        next_stdout_cursor=17,
        next_stderr_cursor=0,
        more=False,
        state=CommandState(status="exited", exit_code=0),
    )
    line = dump_line({"outcome": encode_outcome(chunk)})
    assert "héllo wörld ✓" in line
    assert '"type": "OutputChunk"' in line


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"type": "Teleport"}, "unknown effect type 'Teleport'"),
        ({"type": "Wait", "sandbox_id": "s", "task_id": "t"}, "malformed effect 'Wait'"),
        ({"type": "Ensure", "session_id": 5, "owner_key": "k"}, "expected a string"),
        ([1, 2], "not a JSON object"),
    ],
)
def test_malformed_effects_are_refused_with_a_reason(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_effect(data)


# ---------------------------------------------------------------------------
# Golden recordings


def _goldens() -> list[Path]:
    return sorted(GOLDEN.glob("*.jsonl"))


def test_every_golden_scenario_has_its_recording() -> None:
    """Re-record with: python -m tests.golden.record"""
    assert {path.stem for path in _goldens()} == set(golden.SCENARIOS)


@pytest.mark.parametrize("path", _goldens(), ids=lambda path: path.stem)
def test_golden_recording_replays_exactly(path: Path) -> None:
    """A failure here after a deliberate behaviour change: re-record with
    ``python -m tests.golden.record`` and review ``git diff tests/golden``."""
    report = replay_file(path)
    cassette = load_cassette(path)
    assert report.calls == len(cassette.calls) > 0
    assert report.steps == cassette.step_count


@pytest.mark.parametrize("name", sorted(golden.SCENARIOS))
def test_record_a_simulator_session_and_replay_it_gives_identical_results(
    name: str, tmp_path: Path
) -> None:
    path = tmp_path / f"{name}.jsonl"
    session = golden.SCENARIOS[name](path)
    session.close()
    cassette = load_cassette(path)
    recorded = [call.result for call in cassette.calls]
    live = [json.loads(json.dumps(result.to_dict())) for result in session.results]
    if name != "secret_env":  # there the recording holds the redacted form
        assert recorded == live
    report = replay_file(path)
    assert report.calls == len(session.results)


# ---------------------------------------------------------------------------
# Divergence


def _edit(source: Path, tmp_path: Path, edit: Callable[[list[str]], list[str]]) -> Path:
    lines = source.read_text(encoding="utf-8").splitlines()
    target = tmp_path / source.name
    target.write_text("".join(line + "\n" for line in edit(lines)), encoding="utf-8")
    return target


def _divergence(path: Path) -> DivergenceError:
    """What replaying ``path`` raises; the test fails if it replays clean."""
    with pytest.raises(DivergenceError) as caught:
        replay_file(path)
    return caught.value


def _foreground_edited(tmp_path: Path, kind: str, old: str, new: str) -> Path:
    """The golden foreground recording, ``old`` replaced by ``new`` once in
    call 2's records of ``kind``."""
    return _edit(GOLDEN / "foreground.jsonl", tmp_path, _replace_in(kind, old, new, call=2))


def _replace_in(kind: str, old: str, new: str, *, call: int) -> Callable[[list[str]], list[str]]:
    def edit(lines: list[str]) -> list[str]:
        done = False
        out = []
        for line in lines:
            record = json.loads(line)
            if not done and record["kind"] == kind and record.get("call") == call and old in line:
                line = line.replace(old, new, 1)
                done = True
            out.append(line)
        assert done, f"nothing to edit: {old!r}"
        return out

    return edit


def test_a_changed_recorded_outcome_is_caught_at_the_result(tmp_path: Path) -> None:
    path = _foreground_edited(
        tmp_path, "step", '"stdout": "hello golden\\n"', '"stdout": "HELLO golden\\n"'
    )
    error = _divergence(path)
    assert error.field == "result.content.stdout"
    assert error.call == 2
    assert "replay diverged at the result of call 2: run_command call_id='call-2'" in str(error)
    assert 'recorded "hello golden\\n", live "HELLO golden\\n"' in str(error)
    assert error.report is not None
    assert error.report.calls == 1


def test_a_changed_recorded_outcome_is_caught_at_the_next_effect(tmp_path: Path) -> None:
    path = _foreground_edited(
        tmp_path,
        "step",
        '"outcome": {"type": "SandboxReady", "sandbox_id": "sbx-1", ',
        '"outcome": {"type": "SandboxReady", "sandbox_id": "sbx-9", ',
    )
    error = _divergence(path)
    assert error.field == "sandbox_id"
    assert error.step is not None
    assert error.line is not None
    message = str(error)
    assert f"replay diverged at step {error.step} (recording line {error.line}), effect " in message
    assert "of call 2: run_command call_id='call-2' operation_key='op-1'" in message
    assert "ran before it in this call:" in message
    assert "expected: RememberOwned(" in message
    assert 'differs:  sandbox_id: recorded "sbx-1", live "sbx-9"' in message


def test_a_changed_core_behaviour_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("sandrail.core._launch.WAIT_GRACE_SECONDS", 16)
    error = _divergence(GOLDEN / "foreground.jsonl")
    assert error.field == "timeout_seconds"
    assert "differs:  timeout_seconds: recorded 315, live 316" in str(error)


def test_a_different_budget_setting_is_caught(tmp_path: Path) -> None:
    path = _edit(
        GOLDEN / "big_output.jsonl",
        tmp_path,
        lambda lines: (
            [lines[0].replace('"max_output_bytes": 1024', '"max_output_bytes": 2048'), *lines[1:]]
        ),
    )
    with pytest.raises(DivergenceError, match="replay diverged at"):
        replay_file(path)


def test_a_mutated_request_is_caught_by_its_digest(tmp_path: Path) -> None:
    path = _foreground_edited(tmp_path, "call", "echo hello golden", "echo hello mutated")
    error = _divergence(path)
    assert error.field == "request_digest"
    assert "expected: CheckAuthority(" in str(error)


def test_a_call_that_ends_early_is_caught(tmp_path: Path) -> None:
    path = _foreground_edited(
        tmp_path,
        "step",
        '"outcome": {"type": "Allow"}',
        '"outcome": {"type": "Deny", "reason": "no"}',
    )
    message = str(_divergence(path))
    assert "the call ended, but the recording expects more effects" in message
    assert "expected: Ensure(" in message


def _live_port(cassette_path: Path, replayer: Replayer) -> sandrail.ToolPort:
    return build_replay_port(load_cassette(cassette_path), replayer)


def _request(port: sandrail.ToolPort, command: str, *, call_id: str, key: str) -> ToolRequest:
    return ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id=call_id, arguments={"command": command}),
        operation_key=key,
        session_id=golden.SESSION,
        definition=port.definition("run_command"),
        identity=sandrail.AgentIdentity(agent_id=golden.AGENT),
        cancel=sandrail.CancelToken(),
    )


def test_a_replayer_in_a_live_port_checks_the_request_first() -> None:
    replayer = Replayer(GOLDEN / "fault_abort.jsonl")
    port = _live_port(GOLDEN / "fault_abort.jsonl", replayer)
    with pytest.raises(DivergenceError) as caught:
        port.execute_sync(_request(port, "echo other", call_id="call-1", key="op-1"))
    assert caught.value.field == "request.call.arguments.command"
    assert 'recorded "echo faulty", live "echo other"' in str(caught.value)


def test_a_recording_not_fully_consumed_is_an_error() -> None:
    """A recording not fully consumed at the end fails."""
    replayer = Replayer(GOLDEN / "fault_abort.jsonl")
    port = _live_port(GOLDEN / "fault_abort.jsonl", replayer)
    first = port.execute_sync(_request(port, "echo faulty", call_id="call-1", key="op-1"))
    assert first.status == "uncertain"
    with pytest.raises(
        DivergenceError, match=r"not fully consumed: call 2: run_command call_id='call-2'"
    ):
        replayer.assert_consumed()
    port.execute_sync(_request(port, "echo faulty", call_id="call-2", key="op-1"))
    replayer.assert_consumed()
    with pytest.raises(DivergenceError, match="the recording holds 2 calls, and a call 3 came"):
        port.execute_sync(_request(port, "echo faulty", call_id="call-3", key="op-1"))


def test_dropping_the_last_result_line_is_caught(tmp_path: Path) -> None:
    # The last two lines: the end line, then the last call's result.
    path = _edit(GOLDEN / "stop.jsonl", tmp_path, lambda lines: lines[:-2])
    count = len(path.read_text(encoding="utf-8").splitlines())
    with pytest.raises(CassetteError) as caught:
        replay_file(path)
    message = str(caught.value)
    assert f"stop.jsonl:{count}: the recording ends before the result of call 3" in message
    assert "truncated" in message


def test_dropping_a_step_is_caught(tmp_path: Path) -> None:
    path = _edit(GOLDEN / "stop.jsonl", tmp_path, lambda lines: lines[:5] + lines[6:])
    with pytest.raises(CassetteError, match=r"stop.jsonl:6: expected step 4, found 5"):
        load_cassette(path)


# ---------------------------------------------------------------------------
# Redaction (C17)


def test_C17_env_values_and_named_secrets_leave_no_trace_in_the_recording(
    tmp_path: Path,
) -> None:
    path = tmp_path / "secret.jsonl"
    session = golden.secret_env(path)
    session.close()
    raw = path.read_bytes()
    live_request = session.harness.last_request
    assert live_request is not None
    for secret in (golden.SECRET_ENV, golden.SECRET_NAMED, request_digest(live_request)):
        assert secret.encode() not in raw
        assert json.dumps(secret).encode() not in raw
    assert b'"env": {"API_TOKEN": "<redacted>", "DEBUG": "<redacted>"}' in raw
    # The command printed its env value: the live result shows it masked (C17).
    live = json.dumps(session.results[0].to_dict())
    assert golden.SECRET_ENV not in live
    assert "<redacted>" in live
    # Redacted fields compare as redacted: the recording still replays exactly.
    assert replay_file(path).calls == 2


def test_C17_a_replayer_redacts_live_effects_the_same_way(tmp_path: Path) -> None:
    """Replaying the unredacted live requests matches the redacted recording
    when the replayer is told the same secrets."""
    path = tmp_path / "secret.jsonl"
    golden.secret_env(path).close()
    replayer = Replayer(path, secrets=[golden.SECRET_NAMED])
    port = _live_port(path, replayer)
    for number in (1, 2):
        request = ToolRequest(
            call=sandrail.ToolCall(
                name="run_command",
                call_id=f"call-{number}",
                arguments={
                    "command": f"deploy --tag {golden.SECRET_NAMED}",
                    "env": {"API_TOKEN": golden.SECRET_ENV, "DEBUG": "1"},
                },
            ),
            operation_key="op-1",
            session_id=golden.SESSION,
            definition=port.definition("run_command"),
            identity=sandrail.AgentIdentity(agent_id=golden.AGENT),
            cancel=sandrail.CancelToken(),
        )
        port.execute_sync(request)
    replayer.assert_consumed()


# ---------------------------------------------------------------------------
# Async recording


def _recording_port(
    path: Path, inner: Any, *, authorize: Callable[[ToolRequest], Any]
) -> tuple[Recorder, sandrail.ToolPort]:
    recorder = Recorder(inner, path)
    port = recorder.attach(
        sandrail.command_tools(
            backend=recorder,
            session_id=golden.SESSION,
            owner=sandrail.AgentOwner(agent_id=golden.AGENT),
            authorize=authorize,
            assert_authority=lambda request: True,
        )
    )
    return recorder, port


async def _async_allow(request: ToolRequest) -> sandrail.Allow:
    return sandrail.ALLOW


class _SlowSimulator:
    """An asynchronous backend: the simulator, with Wait taking real time."""

    asynchronous = True

    def __init__(self) -> None:
        self.sim = Simulator()

    async def __call__(self, effect: Any) -> Any:
        if isinstance(effect, Wait):
            await asyncio.sleep(30)
        return self.sim(effect)


def test_an_async_session_records_and_replays(tmp_path: Path) -> None:
    path = tmp_path / "async.jsonl"
    recorder, port = _recording_port(path, Simulator(), authorize=_async_allow)

    async def session() -> None:
        request = _request(port, "echo async", call_id="call-1", key="op-1")
        assert (await port.execute(request)).status == "ok"

    asyncio.run(session())
    recorder.close()
    assert replay_file(path).calls == 1


def test_an_async_effect_abandoned_on_abort_is_recorded_as_the_port_failed_it(
    tmp_path: Path,
) -> None:
    """C11: the port wakes at once on abort; the recording says so in order."""
    path = tmp_path / "abandoned.jsonl"
    recorder, port = _recording_port(path, _SlowSimulator(), authorize=_async_allow)

    async def session() -> sandrail.ToolResult:
        request = _request(port, "sleep 100", call_id="call-1", key="op-1")
        assert request.cancel is not None
        asyncio.get_running_loop().call_later(0.05, request.cancel.cancel)  # type: ignore[attr-defined]
        return await port.execute(request)

    result = asyncio.run(session())
    recorder.close()
    assert result.status == "uncertain"
    assert b'"failure": {"delivery": "maybe_sent", "detail": "aborted by the harness"' in (
        path.read_bytes()
    )
    assert replay_file(path).calls == 1


def _echo_port(backend: Any) -> tuple[sandrail.ToolPort, ToolRequest]:
    """A port on ``backend`` that allows everything, and one ``echo`` for it."""
    port = sandrail.command_tools(
        backend=backend,
        session_id="s",
        owner=sandrail.AgentOwner(agent_id="a"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )
    request = ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id="c", arguments={"command": "echo"}),
        operation_key="k",
        session_id="s",
        definition=port.definition("run_command"),
        identity=sandrail.AgentIdentity(agent_id="a"),
    )
    return port, request


def test_a_recorder_needs_its_port_attached_first() -> None:
    recorder = Recorder(Simulator(), io.StringIO())
    port, request = _echo_port(recorder)
    with pytest.raises(RuntimeError, match=r"recorder.attach\(port\)"):
        port.execute_sync(request)
    recorder.attach(port)
    with pytest.raises(RuntimeError, match="already records"):
        recorder.attach(port)


def test_a_recorder_outside_a_port_answers_nothing() -> None:
    """A recorder records through the layer the port opens for each call; a
    sandbox effect handed to it any other way (the recorder wrapped inside
    another backend) would go unrecorded, so it is refused."""
    recorder = Recorder(Simulator(), io.StringIO())
    with pytest.raises(TypeError, match="port's backend"):
        recorder(Ensure(session_id="s", owner_key="o"))


def test_c5_a_recorder_wrapped_in_another_backend_stops_the_call_for_its_developer() -> None:
    """Wrapped inside another backend, a recorder answers nothing, so nothing
    runs: the setup mistake reaches the caller as an exception (a result
    would tell the model the call may have run)."""
    recorder = Recorder(Simulator(), io.StringIO())

    class Proxy:
        def __call__(self, effect: Any) -> Any:
            return recorder(effect)

    port, request = _echo_port(Proxy())
    with pytest.raises(RecorderMisplacedError, match="not inside another backend"):
        port.execute_sync(request)
    assert recorder.inner.launches == {}  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------
# What the recorder writes when its interpreter raises


class _RaisesOnStart:
    """The simulator, except that ``Start`` raises ``error`` (sync or async)."""

    def __init__(self, error: BaseException, *, asynchronous: bool) -> None:
        self.sim = Simulator()
        self.error = error
        self.asynchronous = asynchronous

    def __call__(self, effect: Any) -> Any:
        if not self.asynchronous:
            return self._answer(effect)

        async def answer() -> Any:
            return self._answer(effect)

        return answer()

    def _answer(self, effect: Any) -> Any:
        if isinstance(effect, Start):
            raise self.error
        return self.sim(effect)


def _record_one_call(path: Path, inner: _RaisesOnStart) -> sandrail.ToolResult:
    authorize = _async_allow if inner.asynchronous else lambda request: sandrail.ALLOW
    recorder, port = _recording_port(path, inner, authorize=authorize)
    request = _request(port, "echo hi", call_id="call-1", key="op-1")
    try:
        if inner.asynchronous:
            return asyncio.run(port.execute(request))
        return port.execute_sync(request)
    finally:
        recorder.close()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_an_unexpected_error_is_recorded_as_the_failure_the_port_made_of_it(
    tmp_path: Path, asynchronous: bool
) -> None:
    """The recording holds what the core saw (the port's
    conversion of an unclassified error), so the replay runs the same."""
    path = tmp_path / "raises.jsonl"
    result = _record_one_call(path, _RaisesOnStart(ValueError("boom"), asynchronous=asynchronous))
    assert result.status == "uncertain"
    starts = [
        json.loads(line)
        for line in path.read_text(encoding="utf-8").splitlines()
        if '"type": "Start"' in line
    ]
    assert [step["failure"] for step in starts] == [
        {"delivery": "maybe_sent", "detail": "Start raised ValueError", "aborted": False}
    ]
    assert replay_file(path).calls == 1


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_fatal_interpreter_error_is_let_through_and_not_recorded(
    tmp_path: Path, asynchronous: bool
) -> None:
    path = tmp_path / "fatal.jsonl"
    fatal = FatalInterpreterError("the backend is misconfigured")
    with pytest.raises(FatalInterpreterError, match="misconfigured"):
        _record_one_call(path, _RaisesOnStart(fatal, asynchronous=asynchronous))
    assert '"type": "Start"' not in path.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------
# Unreadable cassettes


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda data: data[:-40], r":\d+: the last line has no newline: the file is truncated"),
        (lambda data: data.replace(b'"kind": "step"', b'"kind": step', 1), r":3: not valid JSON"),
        (
            lambda data: data.replace(b'"version": 1', b'"version": 99', 1),
            r":1: .*version 99 is newer",
        ),
        (lambda data: b"", r"the file is empty"),
        (lambda data: b'{"kind": "header"}\n', r":1: not a sandrail cassette"),
        (lambda data: b"\xff\xfe\n", r":1: not UTF-8"),
        (
            lambda data: data.replace(b'"type": "Allow"', b'"type": "Maybe"', 1),
            r":3: unknown outcome type 'Maybe'",
        ),
        (
            lambda data: data.replace(b'"contract": ', b'"contract_was": ', 1),
            r":1: unknown tool contract None",
        ),
    ],
    ids=[
        "truncated",
        "corrupt",
        "future",
        "empty",
        "no-header",
        "binary",
        "bad-outcome",
        "no-contract",
    ],
)
def test_unreadable_cassettes_name_the_line(damage: Callable[[bytes], bytes], message: str) -> None:
    data = damage((GOLDEN / "foreground.jsonl").read_bytes())
    with pytest.raises(CassetteError, match=message):
        parse_cassette(data, source="x.jsonl")


# ---------------------------------------------------------------------------
# Command line


def test_cli_replays_a_golden_recording_and_prints_the_transcript() -> None:
    result = CliRunner().invoke(replay_command, [str(GOLDEN / "stop.jsonl")])
    assert result.exit_code == 0, result.output
    assert "call 2: stop_command" in result.output
    assert "  step 1    Authorize(" in result.output
    assert "-> Allow()" in result.output
    assert "  result    ok " in result.output
    assert result.output.rstrip().endswith("every result matched the recording.")


def test_cli_exits_non_zero_on_divergence(tmp_path: Path) -> None:
    path = _foreground_edited(tmp_path, "call", "echo hello golden", "echo hello mutated")
    result = CliRunner().invoke(replay_command, [str(path)])
    assert result.exit_code == 1
    assert "DIVERGED: replay diverged at step" in result.output
    assert "differs:  request_digest" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"kind": "header", "format": "sandrail-cassette", "vers', "truncated"),
        (b"not json\n", ":1: not valid JSON"),
        (
            b'{"kind": "header", "format": "sandrail-cassette", "version": 2}\n',
            "version 2 is newer than this sandrail reads",
        ),
    ],
    ids=["truncated", "corrupt", "future"],
)
def test_cli_explains_unreadable_files_without_a_traceback(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    result = CliRunner().invoke(replay_command, [str(path)])
    assert result.exit_code == 2
    assert message in result.output
    assert "error: " in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_cli_explains_a_missing_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(replay_command, [str(tmp_path / "nope.jsonl")])
    assert result.exit_code == 2
    assert "cannot read the file" in result.output


def test_text_that_is_not_unicode_still_makes_a_valid_utf8_line() -> None:
    chunk = OutputChunk(
        stdout="bad \ud800 half",
        stderr="",
        next_stdout_cursor=0,
        next_stderr_cursor=0,
        more=False,
        state=CommandState(status="running"),
    )
    assert decode_outcome(_through_line(encode_outcome(chunk))) == chunk


def test_c17_a_secret_with_json_escapes_leaves_no_trace_in_an_artifact(tmp_path: Path) -> None:
    """The artifact's content is JSON text, where a secret holding quotes or
    backslashes appears escaped; the recorder finds that form too."""
    from sandrail.interpreters.simulator import Script

    secret = 'pa"ss\\w0rd-ünï-xyz'
    output = "A" * 3000 + " token=" + secret + " " + "B" * 3000 + "\n"
    path = tmp_path / "escaped.jsonl"
    session = golden.Session(
        path, scripts={"dump": Script.prints(output)}, max_output_bytes=2000, artifacts=True
    )
    session.run("run_command", {"command": "dump", "env": {"TOKEN": secret}}, key="op-1")
    session.close()
    raw = path.read_bytes().decode("utf-8")
    assert "AppendArtifact" in raw
    for form in (secret, json.dumps(secret, ensure_ascii=False)[1:-1]):
        assert form not in raw


def _recorded_with_env_name(path: Path, secret: str) -> str:
    from sandrail.interpreters.replay import Recorder

    recorder = Recorder(Simulator(), path, secrets=[secret])
    toolset = command_toolset(recorder, session_id="s1", agent_id="a1", redact=[secret])
    env = {"PLAIN": "x", secret: "1", "REDACTED_NAME_1": "y"}
    result = toolset.call_sync(
        "run_command", {"command": "true", "env": env}, call_id="c1", operation_key="k1"
    )
    assert result.status == "ok", result.content
    recorder.close()
    return path.read_text(encoding="utf-8")


def test_c17_a_secret_used_as_an_env_name_leaves_no_byte_that_depends_on_it(
    tmp_path: Path,
) -> None:
    """A masked value as an env *name*: the cassette writes a name of its own
    in its place (never one already in the env), so no digest it keeps
    (``CheckAuthority``, ``Start``, ``RememberOwned``) is a function of the
    name, whatever its length; and the recording still replays."""
    texts = [
        _recorded_with_env_name(tmp_path / f"{n}.jsonl", name)
        for n, name in enumerate(("AKIAJ2QWERTYUIOPASDF", "AKIAIOSFODNN7EXAMPLE", "PW12345678"))
    ]
    assert texts[0] == texts[1] == texts[2]
    assert "AKIA" not in texts[0]
    assert '"REDACTED_NAME_2": "<redacted>"' in texts[0]
    report = replay_file(tmp_path / "0.jsonl")
    assert (report.calls, report.complete) == (1, True)


def test_a_recording_cut_between_two_calls_is_flagged_not_passed_silently(tmp_path: Path) -> None:
    """Every call in it replays, but the missing end line says it may be cut."""
    lines = (GOLDEN / "foreground.jsonl").read_bytes().splitlines(keepends=True)
    calls = [n for n, line in enumerate(lines) if line.startswith(b'{"kind": "call"')]
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[: calls[-1]]))  # drop the last call and the end line
    assert not load_cassette(cut).complete
    assert load_cassette(GOLDEN / "foreground.jsonl").complete
    result = CliRunner().invoke(replay_command, ["-q", str(cut)])
    assert result.exit_code == 0
    assert "warning: the recording has no end line" in result.output


def test_an_end_line_with_the_wrong_count_is_corrupt(tmp_path: Path) -> None:
    data = (GOLDEN / "foreground.jsonl").read_bytes()
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(data.replace(b'{"kind": "end", "calls": 4}', b'{"kind": "end", "calls": 9}'))
    with pytest.raises(CassetteError, match=r"the end line counts 9 calls, the file holds 4"):
        load_cassette(bad)
