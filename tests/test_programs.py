"""The tool programs driven directly, with some effects answered by a script.

The simulator answers every sandbox effect the script leaves alone; the
script replaces chosen answers with wrong shapes, failures or edge values, to
prove that no answer, however odd, makes a program guess: it reports
``uncertain`` after dispatch, ``error`` before it, and never raises.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import sandrail
from sandrail.core import (
    RETAINED_OUTPUT_LIMIT,
    Allow,
    AppendArtifact,
    ArtifactRef,
    AuthorityReport,
    Authorize,
    Cancel,
    CheckAuthority,
    CloseArtifact,
    CommandState,
    Delivery,
    Effect,
    EffectFailure,
    Ensure,
    ErrorCode,
    Inspect,
    OpenArtifact,
    OutputChunk,
    OwnedCommand,
    PortSettings,
    Publish,
    Read,
    RememberOwned,
    ResolveOwned,
    SandboxState,
    Start,
    Started,
    ToolResult,
    Wait,
    WriteArtifact,
    bound_result,
    code_tool_definitions,
    command_tool_definitions,
    crash_result,
    request_digest,
    snapshot_request,
    tool_program,
)
from sandrail.core._budget import parse_omissions
from sandrail.core._canonical import canonical_json
from sandrail.core._streamed import STREAM_PAGE_BYTES
from sandrail.interpreters._drivers import drive
from sandrail.interpreters.simulator import Script, Simulator
from sandrail.testing import native_identity

OWNER = sandrail.AgentOwner(agent_id="agent-1")
IDENTITY = sandrail.AgentIdentity(agent_id="agent-1")
TASK = sandrail.task_id("s", OWNER, "op-1")
FAIL_MAYBE = EffectFailure(Delivery.MAYBE_SENT, "lost")
FAIL_NOT_SENT = EffectFailure(Delivery.NOT_SENT, "refused")
ABORTED = EffectFailure(Delivery.MAYBE_SENT, "aborted", aborted=True)

Answer = Callable[[Effect], Any]
_PASS = object()


def settings(*, code: bool = False, artifacts: bool = False, budget: int = 24_000) -> PortSettings:
    definitions = code_tool_definitions(agent_owner=True) if code else command_tool_definitions()
    return PortSettings(
        session_id="s",
        owner=OWNER,
        definitions=definitions,
        contract="test",
        max_output_bytes=budget,
        artifacts_enabled=artifacts,
    )


def request(settings: PortSettings, name: str, arguments: dict[str, Any]) -> sandrail.ToolRequest:
    definition = next(d for d in settings.definitions if d.name == name)
    return sandrail.ToolRequest(
        call=sandrail.ToolCall(name=name, call_id="c1", arguments=arguments),
        operation_key="op-1",
        session_id="s",
        definition=definition,
        identity=IDENTITY,
    )


def run(
    name: str,
    arguments: dict[str, Any],
    overrides: dict[type, Any] | None = None,
    *,
    sim: Simulator | None = None,
    owned: OwnedCommand | None = None,
    **settings_options: Any,
) -> ToolResult:
    """Drive one program; an override is a value, an EffectFailure, or a function."""
    port_settings = settings(**settings_options)
    sim = sim or Simulator(scripts={"x": Script.prints("out\n")})
    live = request(port_settings, name, arguments)
    digest = request_digest(live)
    overrides = overrides or {}

    def interpret(effect: Effect) -> Any:
        override = overrides.get(type(effect), _PASS)
        if override is not _PASS:
            answer = override(effect) if callable(override) else override
            if isinstance(answer, EffectFailure):
                raise answer
            return answer
        if isinstance(effect, Authorize):
            return Allow()
        if isinstance(effect, CheckAuthority):
            return AuthorityReport(
                aborted=False, drifted=effect.request_digest != digest, authority_held=True
            )
        if isinstance(effect, ResolveOwned):
            return owned
        if isinstance(effect, RememberOwned):
            return None
        if isinstance(effect, WriteArtifact):
            return ArtifactRef(uri="artifact://0123", size_bytes=len(effect.content))
        if isinstance(effect, OpenArtifact | AppendArtifact):
            return None
        if isinstance(effect, CloseArtifact):
            return ArtifactRef(uri="artifact://0123", size_bytes=1) if effect.keep else None
        return sim(effect)

    return drive(tool_program(live, port_settings), interpret)


def launched_background(sim: Simulator) -> OwnedCommand:
    run("run_command", {"command": "serve", "background": True}, sim=sim)
    return OwnedCommand(task_id=TASK, operation_key="op-1", sandbox_id="sbx-1")


# ---------------------------------------------------------------------------
# Wrong shapes after dispatch are uncertain (C6); before it, errors (C5)


@pytest.mark.parametrize("effect", [Ensure, Start, Wait, Read])
def test_c6_an_unexpected_answer_after_dispatch_is_uncertain(effect: type) -> None:
    result = run("run_command", {"command": "x"}, {effect: "garbage"})
    assert result.status == "uncertain"
    assert result.content["operation_key"] == "op-1"


def test_c6_an_unexpected_publish_answer_is_uncertain() -> None:
    result = run("sandbox_run_code", {"code": "print(1)"}, {Publish: None}, code=True)
    assert result.status == "uncertain"


def test_c6_a_start_answer_for_another_task_is_uncertain() -> None:
    other = Started(task_id="0" * 64, first_launch=True, state=CommandState(status="running"))
    result = run("run_command", {"command": "x"}, {Start: other})
    assert result.status == "uncertain"
    assert result.content["task_id"] == TASK


@pytest.mark.parametrize("effect", [Inspect])
def test_c5_an_unexpected_status_answer_is_an_error(effect: type) -> None:
    result = run("sandbox_status", {}, {effect: 42})
    assert result.status == "error"
    assert result.content["error_type"] == ErrorCode.READ_FAILED.value


def test_c5_a_failed_status_inspection_is_an_error() -> None:
    result = run("sandbox_status", {}, {Inspect: FAIL_MAYBE})
    assert (result.status, result.content["error_type"]) == ("error", ErrorCode.READ_FAILED.value)


def test_c6_a_foreground_command_canceled_without_an_exit_code_is_uncertain() -> None:
    state = CommandState(status="canceled", exit_code=None)
    result = run("run_command", {"command": "x"}, {Wait: state})
    assert result.status == "uncertain"
    assert result.content["observed_result"] == "canceled"


def test_c6_a_wait_failure_after_start_is_uncertain_and_an_abort_says_so() -> None:
    assert run("run_command", {"command": "x"}, {Wait: FAIL_NOT_SENT}).status == "uncertain"
    aborted = run("run_command", {"command": "x"}, {Wait: ABORTED})
    assert aborted.content["error_type"] == ErrorCode.ABORTED.value


def test_c11_an_ensure_aborted_in_flight_is_uncertain() -> None:
    result = run("run_command", {"command": "x"}, {Ensure: ABORTED})
    assert result.status == "uncertain"
    assert result.content["error_type"] == ErrorCode.ABORTED.value


def test_c11_an_abort_while_authorizing_is_canceled() -> None:
    result = run("run_command", {"command": "x"}, {Authorize: ABORTED})
    assert (result.status, result.content["error_type"]) == ("error", ErrorCode.CANCELED.value)


def test_c5_remembering_ownership_failing_after_ensure_means_the_start_never_leaves() -> None:
    """A record that cannot be written before the first start:
    the start never leaves (``error``, ``executed: false``)."""
    result = run("run_command", {"command": "x"}, {RememberOwned: FAIL_NOT_SENT})
    assert result.status == "error"
    assert result.content["executed"] is False
    assert result.content["error_type"] == ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE.value


# ---------------------------------------------------------------------------
# Reads


def test_read_output_is_gathered_across_pages_up_to_the_retention_limit() -> None:
    huge = RETAINED_OUTPUT_LIMIT // 2 + 10

    def page(effect: Read) -> OutputChunk:
        return OutputChunk(
            stdout="a" * min(effect.max_bytes, huge),
            stderr="",
            next_stdout_cursor=effect.stdout_cursor + min(effect.max_bytes, huge),
            next_stderr_cursor=0,
            more=True,
            state=CommandState(status="exited", exit_code=0),
        )

    result = run("run_command", {"command": "x"}, {Read: page})
    assert result.status == "ok"
    assert result.content["retention_limited"] is True
    assert result.content["output_budget"] == {"truncated": True}


def test_c6_a_read_whose_cursors_stall_is_uncertain() -> None:
    stalled = OutputChunk(
        stdout="",
        stderr="",
        next_stdout_cursor=0,
        next_stderr_cursor=0,
        more=True,
        state=CommandState(status="exited", exit_code=0),
    )
    assert run("run_command", {"command": "x"}, {Read: stalled}).status == "uncertain"


def test_read_of_an_owned_task_without_a_known_sandbox_inspects_first() -> None:
    sim = Simulator(scripts={"serve": Script.hangs("up\n")})
    launched_background(sim)
    owned = OwnedCommand(task_id=TASK, operation_key="op-1", sandbox_id=None)
    page = run("read_command_output", {"task_id": TASK}, sim=sim, owned=owned)
    assert (page.status, page.content["stdout"]) == ("ok", "up\n")
    nothing = SandboxState(sandbox_id=None, phase="absent", backend="e2b")
    missing = run("read_command_output", {"task_id": TASK}, {Inspect: nothing}, owned=owned)
    assert missing.content["error_type"] == ErrorCode.TASK_NOT_FOUND.value
    failed = run("read_command_output", {"task_id": TASK}, {Inspect: FAIL_MAYBE}, owned=owned)
    assert failed.content["error_type"] == ErrorCode.READ_FAILED.value


def test_c4_a_resolver_that_fails_refuses_naming_the_record() -> None:
    """Ownership that cannot be checked is refused before any
    sandbox call, saying the record was unavailable (not "not owned")."""
    result = run("read_command_output", {"task_id": TASK}, {ResolveOwned: FAIL_NOT_SENT})
    assert result.status == "error"
    assert result.content["error_type"] == ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE.value


@pytest.mark.parametrize(
    ("answer", "status", "code"),
    [
        ("garbage", "error", ErrorCode.READ_FAILED),
        (FAIL_MAYBE, "error", ErrorCode.READ_FAILED),
        (ABORTED, "error", ErrorCode.CANCELED),
    ],
)
def test_c5_reads_change_nothing_so_their_failures_are_errors(
    answer: Any, status: str, code: ErrorCode
) -> None:
    sim = Simulator(scripts={"serve": Script.hangs()})
    owned = launched_background(sim)
    result = run("read_command_output", {"task_id": TASK}, {Read: answer}, sim=sim, owned=owned)
    assert (result.status, result.content["error_type"]) == (status, code.value)
    waited = run(
        "read_command_output",
        {"task_id": TASK, "wait_seconds": 5},
        {Wait: answer if isinstance(answer, EffectFailure) else FAIL_NOT_SENT},
        sim=sim,
        owned=owned,
    )
    assert waited.status == "error"


UNKNOWN_PAGE = OutputChunk(
    stdout="",
    stderr="",
    next_stdout_cursor=0,
    next_stderr_cursor=0,
    more=False,
    state=CommandState(status="unknown"),
)
"""A read's answer when the sandbox cannot tell (or the output is gone)."""


def test_c6_a_read_that_cannot_tell_the_state_is_uncertain() -> None:
    sim = Simulator(scripts={"serve": Script.hangs()})
    owned = launched_background(sim)
    result = run(
        "read_command_output", {"task_id": TASK}, {Read: UNKNOWN_PAGE}, sim=sim, owned=owned
    )
    assert result.status == "uncertain"
    assert result.content["task_id"] == TASK


@pytest.mark.parametrize("stdout_bytes", [4, 1_000_000])
def test_c6_a_foreground_read_that_finds_its_output_gone_is_uncertain_not_ok(
    stdout_bytes: int,
) -> None:
    """The wait saw the command end; the reads that collect its output find
    the task's output gone (state ``unknown``: root deleted it meanwhile).
    Its empty text is not the command's output: ``uncertain``, never ``ok``
    with empty or partial output, whether the output is read whole (small)
    or at its two ends (too big for the budget)."""
    ended = CommandState(status="exited", exit_code=0, stdout_bytes=stdout_bytes)
    result = run("run_command", {"command": "x"}, {Wait: ended, Read: UNKNOWN_PAGE})
    assert result.status == "uncertain", result.content
    assert result.content["error_type"] == ErrorCode.EVIDENCE_INCOMPLETE.value
    assert result.content["task_id"] == TASK


@pytest.mark.parametrize("answer", ["garbage", None])
def test_c6_a_stop_with_an_unexpected_answer_is_uncertain(answer: Any) -> None:
    sim = Simulator(scripts={"serve": Script.hangs()})
    owned = launched_background(sim)
    result = run("stop_command", {"task_id": TASK}, {Cancel: answer}, sim=sim, owned=owned)
    assert result.status == "uncertain"


def test_c6_a_stop_that_observes_an_unknown_state_is_uncertain() -> None:
    sim = Simulator(scripts={"serve": Script.hangs()})
    owned = launched_background(sim)
    from sandrail.core import CancelRequested

    answer = CancelRequested(state=CommandState(status="unknown"))
    result = run("stop_command", {"task_id": TASK}, {Cancel: answer}, sim=sim, owned=owned)
    assert result.status == "uncertain"


# ---------------------------------------------------------------------------
# Budget edges (C12, C15)


def test_c15_an_artifact_uri_too_long_to_promise_is_left_out() -> None:
    sim = Simulator(scripts={"x": Script.prints("y" * 50_000)})
    long_ref = ArtifactRef(uri="artifact://" + "9" * 400, size_bytes=1)
    result = run(
        "run_command", {"command": "x"}, {CloseArtifact: long_ref}, sim=sim, artifacts=True
    )
    assert result.status == "ok"
    assert result.content["output_budget"] == {"truncated": True}
    assert result.artifact_refs == ()


def test_c9_authority_lost_while_storing_the_artifact_is_uncertain() -> None:
    sim = Simulator(scripts={"x": Script.prints("y" * 50_000)})
    lost = False

    def store(effect: CloseArtifact) -> ArtifactRef:
        nonlocal lost
        lost = True  # the lease lapses while the artifact is committed
        return ArtifactRef(uri="artifact://0123", size_bytes=1)

    def check(effect: CheckAuthority) -> AuthorityReport:
        return AuthorityReport(aborted=False, drifted=False, authority_held=not lost)

    result = run(
        "run_command",
        {"command": "x"},
        {CheckAuthority: check, CloseArtifact: store},
        sim=sim,
        artifacts=True,
    )
    assert lost
    assert result.status == "uncertain"
    assert result.content["error_type"] == ErrorCode.AUTHORITY_LOST.value


def test_c12_bound_result_cuts_what_the_harness_supplied_and_falls_back_to_the_bare_code() -> None:
    long = ToolResult(
        status="error",
        content={
            "ok": False,
            "error_type": "policy_denied",
            "executed": False,
            "instruction": "x" * 999,
        },
    )
    assert len(sandrail.canonical_json(bound_result(long, 256).content)) <= 256
    fixed_too_big = ToolResult(
        status="error",
        content={"ok": False, "error_type": "policy_denied", "executed": False, "who": "y" * 999},
    )
    bare = bound_result(fixed_too_big, 256)
    assert bare.content == {"ok": False, "error_type": "policy_denied", "executed": False}


def test_crash_results_are_errors_before_dispatch_and_uncertain_after() -> None:
    port_settings = settings()
    live = request(port_settings, "run_command", {"command": "x"})
    snap = snapshot_request(live, port_settings)
    assert snap is not None
    before = crash_result(snap, port_settings, dispatched=False, sandbox_id=None, task=None)
    assert (before.status, before.content["executed"]) == ("error", False)
    after = crash_result(snap, port_settings, dispatched=True, sandbox_id="sbx-1", task=TASK)
    assert after.status == "uncertain"
    assert (after.content["sandbox_id"], after.content["task_id"]) == ("sbx-1", TASK)
    assert after.content["operation_key"] == "op-1"
    assert snapshot_request("junk", port_settings) is None
    garbled = crash_result(None, port_settings, dispatched=True, sandbox_id=None, task=None)
    assert garbled.status == "uncertain"
    assert garbled.content["error_type"] == ErrorCode.INTERNAL.value


# ---------------------------------------------------------------------------
# Regressions from review


def test_c13_a_scope_mutated_mid_call_is_drift_and_the_locator_keeps_the_original() -> None:
    scope = {"tenant": "acme"}
    owner = sandrail.NativeOwner(scope={"tenant": "acme"})
    sim = Simulator(scripts={"x": Script.prints("1")})

    def mutate_after_start(effect: Effect) -> Any:
        outcome = sim(effect)
        if isinstance(effect, Start):
            scope["tenant"] = "evil" * 10_000  # the harness's own dict
        return outcome

    port = sandrail.command_tools(
        backend=mutate_after_start,
        session_id="s",
        owner=owner,
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        max_output_bytes=2_000,
    )
    identity = native_identity(scope=scope)
    live = sandrail.ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id="c1", arguments={"command": "x"}),
        operation_key="op-1",
        session_id="s",
        definition=port.definition("run_command"),
        identity=identity,
    )
    result = port.execute_sync(live)
    assert result.status == "uncertain"
    assert result.content["error_type"] == ErrorCode.REQUEST_DRIFTED.value
    assert result.content["scope"] == {"tenant": "acme"}
    assert result.content["task_id"] == sandrail.task_id("s", owner, "op-1")


def test_execute_never_raises_when_the_cancel_token_breaks_after_launch() -> None:
    sim = Simulator(scripts={"x": Script.prints("1")})
    broken = False

    class Token:
        @property
        def cancelled(self) -> bool:
            if broken:
                raise RuntimeError("token backend went away")
            return False

    def backend(effect: Effect) -> Any:
        nonlocal broken
        outcome = sim(effect)
        broken = broken or isinstance(effect, Start)
        return outcome

    port = sandrail.command_tools(
        backend=backend,
        session_id="s",
        owner=OWNER,
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )
    live = sandrail.ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id="c1", arguments={"command": "x"}),
        operation_key="op-1",
        session_id="s",
        definition=port.definition("run_command"),
        identity=IDENTITY,
        cancel=Token(),
    )
    result = port.execute_sync(live)
    assert result.status == "uncertain"  # an unreadable token may have fired (C11)
    assert result.content["error_type"] == ErrorCode.ABORTED.value


def test_whole_number_floats_are_integers_from_validation_on() -> None:
    sim = Simulator(scripts={"x": Script.hangs("abc")})
    result = run("run_command", {"command": "x", "timeout": 5.0}, sim=sim)
    assert (result.status, result.content["command_status"]) == ("ok", "timed_out")
    (start,) = [e for e in sim.applied if isinstance(e, Start)]
    assert type(start.timeout_seconds) is int
    again = run("run_command", {"command": "x", "timeout": 5}, sim=sim)
    assert again.content["deduplicated"] is True  # 5.0 and 5 are one launch (C3)
    owned = OwnedCommand(task_id=TASK, operation_key="op-1", sandbox_id="sbx-1")
    page = run(
        "read_command_output",
        {"task_id": TASK, "stdout_cursor": 1.0, "max_bytes": 4.0},
        sim=sim,
        owned=owned,
    )
    assert (page.status, page.content["stdout"]) == ("ok", "bc")


def test_integer_arguments_list_matches_the_schemas() -> None:
    from sandrail.core import TOOLS

    def integer(schema: Any) -> bool:
        options = schema.get("anyOf", [schema])
        return any(option.get("type") == "integer" for option in options)

    for definition in command_tool_definitions() + code_tool_definitions():
        named = {
            name for name, schema in definition.parameters["properties"].items() if integer(schema)
        }
        assert named == TOOLS[definition.name].integer_arguments


def test_c15_the_store_gets_at_most_the_retention_limit_of_both_streams_a_page_a_read() -> None:
    """With an artifact store the full output is streamed to it, at most
    RETAINED_OUTPUT_LIMIT bytes of both streams together, each read at most
    a page; the result shows the real ends of the output."""
    big = "o" * (RETAINED_OUTPUT_LIMIT * 5 // 8)
    sim = Simulator(scripts={"x": Script.prints(big, stderr=big.replace("o", "e"))})
    pieces: list[str] = []

    def append(effect: AppendArtifact) -> None:
        pieces.append(effect.text)

    result = run(
        "run_command",
        {"command": "x"},
        {AppendArtifact: append},
        sim=sim,
        budget=24_000,
        artifacts=True,
    )
    assert result.status == "ok"
    assert result.artifact_refs
    assert "retention_limited" not in result.content
    artifact = json.loads("".join(pieces))
    assert artifact["retention_limited"] is True
    assert len(artifact["stdout"]) == len(artifact["stderr"]) == RETAINED_OUTPUT_LIMIT // 2
    assert artifact["stdout_bytes"] == len(big)
    reads = [e for e in sim.applied if isinstance(e, Read)]
    assert all(e.max_bytes <= STREAM_PAGE_BYTES for e in reads)
    assert max(len(piece) for piece in pieces) <= STREAM_PAGE_BYTES


@pytest.mark.parametrize("stderr", ["", "e" * 3_000_000, "warning\n"])
def test_c12_without_an_artifact_store_only_the_ends_the_budget_can_show_are_read(
    stderr: str,
) -> None:
    """16 MiB of output moves about the budget, not 16 MiB: each
    stream that cannot fit is read at its two ends, and the marker counts the
    bytes never read."""
    big = "".join(f"line {n}\n" for n in range(2_000_000))  # about 16 MiB
    sim = Simulator(scripts={"x": Script.prints(big, stderr=stderr)})
    result = run("run_command", {"command": "x"}, sim=sim, budget=24_000)
    assert result.status == "ok"
    assert len(canonical_json(result.content)) <= 24_000
    assert "retention_limited" not in result.content
    stdout = result.content["stdout"]
    (marker,) = parse_omissions(stdout)
    head, tail = stdout[: marker.start], stdout[marker.end :]
    assert big.startswith(head)
    assert big.endswith(tail)
    assert marker.omitted_bytes == len(big) - len(head) - len(tail)
    assert len(head) > 5_000
    assert len(tail) > 5_000
    moved = sum(len(e.stdout) + len(e.stderr) for e in _chunks(sim))
    assert moved <= 2 * 24_000
    assert len(canonical_json(result.content)) >= 24_000 - 64  # the budget is used


def _chunks(sim: Simulator) -> list[Any]:
    """What each read returned (the simulator recomputes it from the read)."""
    return [sim._read(e) for e in sim.applied if isinstance(e, Read)]


def test_c12_c8_an_interaction_id_too_long_for_the_budget_is_a_harness_error() -> None:
    from sandrail.core import ApprovalRequired

    long_id = ApprovalRequired(interaction_id="i" * 5_000)
    result = run("run_command", {"command": "x"}, {Authorize: long_id}, budget=1_000)
    assert (result.status, result.content["error_type"]) == (
        "error",
        ErrorCode.HARNESS_CALLBACK_FAILED.value,
    )
    short = run(
        "run_command", {"command": "x"}, {Authorize: ApprovalRequired(interaction_id="i-1")}
    )
    assert (short.status, short.content["interaction_id"]) == ("approval_required", "i-1")


def test_c6_an_uncertain_ensure_already_names_the_task() -> None:
    result = run("run_command", {"command": "x"}, {Ensure: FAIL_MAYBE})
    assert result.status == "uncertain"
    assert result.content["task_id"] == TASK


def test_operation_keys_and_call_ids_must_be_valid_unicode() -> None:
    port_settings = settings()
    definition = port_settings.definitions[1]
    for key, call_id, code in (
        ("op-\ud800", "c1", ErrorCode.OPERATION_KEY_REQUIRED),
        ("op-1", "c\udfff", ErrorCode.REQUEST_UNBOUND),
    ):
        live = sandrail.ToolRequest(
            call=sandrail.ToolCall(name="run_command", call_id=call_id, arguments={"command": "x"}),
            operation_key=key,
            session_id="s",
            definition=definition,
            identity=IDENTITY,
        )
        result = drive(tool_program(live, port_settings), lambda effect: None)
        assert result.content["error_type"] == code.value


def test_c2_a_start_that_finds_its_claim_lost_is_uncertain_and_launches_nothing() -> None:
    from sandrail.core import StartRefused

    lost = StartRefused(reason="claim_lost")
    result = run("run_command", {"command": "x"}, {Start: lost})
    assert result.status == "uncertain"
    assert result.content["task_id"] == TASK


def test_c2_the_port_expects_the_claim_of_a_task_it_saw_launch() -> None:
    sim = Simulator(scripts={"x": Script.prints("1")})
    port = sandrail.command_tools(
        backend=sim,
        session_id="s",
        owner=OWNER,
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )
    live = request(port.settings, "run_command", {"command": "x"})
    assert port.execute_sync(live).status == "ok"
    assert port.owned_commands[TASK].launched
    assert port.execute_sync(live).content["deduplicated"] is True
    starts = [e for e in sim.applied if isinstance(e, Start)]
    assert [e.expect_claim for e in starts] == [False, True]
