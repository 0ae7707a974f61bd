"""Hostile inputs against the simulator, the port, the replayer and the
command line: identity values as env values, what a session masks across
ports, signals during a call, shell words, cassettes that are not files.

Each test names the contract line it proves. The same cases against the
real launcher on local-e2b are in ``test_adversarial_cli_e2b.py``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

import sandrail
from sandrail import _masks
from sandrail.cli import _tool_call
from sandrail.cli import main as cli_main
from sandrail.core import (
    Ensure,
    ErrorCode,
    SandboxReady,
    SandboxState,
    Start,
)
from sandrail.interpreters.replay import CassetteError, parse_cassette
from sandrail.interpreters.simulator import Script, Simulator
from tests.golden import record as golden
from tests.rig import Rig

GOLDEN = Path(golden.__file__).parent
SECRET = "sk-live-0123456789abcdef"


# -- identity values the session shows are refused as env values (C17)


def _refused_env(result: sandrail.ToolResult, name: str) -> None:
    assert result.status == "error", result.content
    assert result.content["error_type"] == ErrorCode.ARGUMENTS_INVALID.value
    assert result.content["executed"] is False
    (problem,) = result.content["problems"]
    assert problem["field"] == f"arguments.env.{name}"


def test_c17_an_earlier_task_id_is_refused_as_an_env_value() -> None:
    """An earlier task's id passed as an env value ran, and every
    later read of that task showed it whole in ``task_id``."""
    rig = Rig()
    first = rig.run("run_command", {"command": "true", "background": True}, key="op-1")
    task = first.content["task_id"]
    starts = _starts(rig.sim)
    second = rig.run(
        "run_command", {"command": "true", "env": {"LEAK": task}}, key="op-2", call_id="call-2"
    )
    _refused_env(second, "LEAK")
    assert task not in second.to_json()
    assert _starts(rig.sim) == starts
    # The earlier task is still read as before, its id whole.
    read = rig.run("read_command_output", {"task_id": task}, key="op-3", call_id="call-3")
    assert (read.status, read.content["task_id"]) == ("ok", task)


@pytest.mark.parametrize("part", ["whole", "inside"])
@pytest.mark.parametrize("field", ["operation_key", "call_id"])
def test_c17_an_earlier_calls_operation_key_or_call_id_is_refused(field: str, part: str) -> None:
    """A retry of the earlier call shows its operation key and call
    id whole; an env value equal to (or inside) one of them is refused."""
    rig = Rig()
    first = rig.run(
        "run_command", {"command": "true"}, key="op-key-0123456789", call_id="call-id-0123456789"
    )
    assert first.status == "ok"
    shown = str(first.content[field])
    value = shown if part == "whole" else shown[3:15]
    result = rig.run(
        "run_command", {"command": "true", "env": {"LEAK": value}}, key="op-2", call_id="call-2"
    )
    _refused_env(result, "LEAK")
    retry = rig.run(
        "run_command", {"command": "true"}, key="op-key-0123456789", call_id="call-id-0123456789"
    )
    assert (retry.status, retry.content["deduplicated"]) == ("ok", True)


def test_c17_this_calls_own_task_id_is_refused() -> None:
    """A launch's result shows its own task id (a pure function of
    session, owner and operation key, C1), so it cannot be an env value."""
    rig = Rig()
    own = rig.task_id("op-1")
    result = rig.run("run_command", {"command": "true", "env": {"LEAK": own}})
    _refused_env(result, "LEAK")
    assert rig.sim.effects_seen == []


class _LongSandboxIds:
    """The simulator behind E2B-like sandbox ids, long enough to be masked."""

    PREFIX = "isolated-sandbox-"

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    def __call__(self, effect: Any) -> Any:
        sandbox_id = getattr(effect, "sandbox_id", None)
        if isinstance(sandbox_id, str):
            effect = attrs.evolve(effect, sandbox_id=sandbox_id.removeprefix(self.PREFIX))
        outcome = self.sim(effect)
        if isinstance(outcome, SandboxReady | SandboxState) and outcome.sandbox_id is not None:
            outcome = attrs.evolve(outcome, sandbox_id=self.PREFIX + outcome.sandbox_id)
        return outcome


def test_c17_the_sessions_sandbox_id_is_refused_as_an_env_value() -> None:
    """On E2B: the session's sandbox id passed as an env value ran,
    and every later result showed it in ``sandbox_id``."""
    sim = Simulator()
    rig = Rig(sim=sim)
    rig.port = sandrail.command_tools(
        backend=_LongSandboxIds(sim),
        session_id=rig.session_id,
        owner=rig.owner,
        authorize=rig.harness.authorize,
        assert_authority=rig.harness.assert_authority,
    )
    first = rig.run("run_command", {"command": "true"}, key="op-1")
    sandbox_id = first.content["sandbox_id"]
    assert sandbox_id.startswith(_LongSandboxIds.PREFIX)
    starts = _starts(sim)
    result = rig.run(
        "run_command", {"command": "true", "env": {"LEAK": sandbox_id}}, key="op-2", call_id="c2"
    )
    _refused_env(result, "LEAK")
    assert sandbox_id not in result.to_json()
    assert _starts(sim) == starts


def test_c17_a_restarted_harness_learns_the_sandbox_id_before_the_start() -> None:
    """A port that never showed the sandbox id (a restarted harness,
    on a new backend object) refuses it once Ensure names it: after Ensure,
    before any Start, nothing ran (``executed: false``)."""
    sim = Simulator()
    first_port = Rig(sim=sim)
    first_port.port = sandrail.command_tools(
        backend=_LongSandboxIds(sim),
        session_id=first_port.session_id,
        owner=first_port.owner,
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )
    sandbox_id = first_port.run("run_command", {"command": "true"}).content["sandbox_id"]
    restarted = Rig(sim=sim)
    restarted.port = sandrail.command_tools(
        backend=_LongSandboxIds(sim),
        session_id=restarted.session_id,
        owner=restarted.owner,
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )
    starts = _starts(sim)
    result = restarted.run(
        "run_command", {"command": "true", "env": {"LEAK": sandbox_id[4:20]}}, key="op-2"
    )
    _refused_env(result, "LEAK")
    assert _starts(sim) == starts
    assert isinstance(sim.effects_seen[-1], Ensure)  # refused once Ensure named it


def test_c17_a_session_that_showed_too_much_refuses_env_values_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a session showed is kept up to a cap; past it an env
    value can no longer be checked, so a call with one is refused (nothing
    runs), while calls without env go on."""
    monkeypatch.setattr(_masks, "MAX_SHOWN_BYTES", 200)
    rig = Rig()
    for number in range(4):
        done = rig.run("run_command", {"command": "true"}, key=f"op-{number:020}")
        assert done.status == "ok"
    refused = rig.run("run_command", {"command": "true", "env": {"X": SECRET}}, key="op-env")
    _refused_env(refused, "X")
    assert "start a new session" in refused.content["problems"][0]["reason"]
    assert rig.run("run_command", {"command": "true"}, key="op-plain").status == "ok"


def _starts(sim: Simulator) -> int:
    return sum(isinstance(effect, Start) for effect in sim.effects_seen)


# -- what a session masks lives as long as the backend holds it (C17)


def _shared_record() -> dict[str, Any]:
    record: dict[str, Any] = {}
    return {
        "remember_owned_command": lambda request, owned: record.__setitem__(owned.task_id, owned),
        "resolve_owned_command": lambda request, task: record.get(task),
    }


def test_c17_a_new_port_on_the_same_backend_and_session_still_masks() -> None:
    """A web harness builds a port per request; the second port read
    the task the first launched with env, and showed the value in clear."""
    sim = Simulator(scripts={"printenv TOKEN": Script.prints(SECRET + "\n")})
    shared = _shared_record()
    launched = Rig(sim=sim, **shared).run(
        "run_command", {"command": "printenv TOKEN", "env": {"TOKEN": SECRET}, "background": True}
    )
    assert launched.status == "ok"
    later = Rig(sim=sim, **shared)  # a new port: same backend object, same session
    read = later.run("read_command_output", {"task_id": launched.content["task_id"]}, key="op-2")
    assert read.status == "ok", read.content
    assert read.content["stdout"] == "<redacted>\n"
    assert SECRET not in read.to_json()


def test_c17_a_new_port_refuses_the_value_in_its_identity() -> None:
    """The new port also knows the value for the identity rule
    (a later call whose operation key holds it is refused)."""
    sim = Simulator()
    Rig(sim=sim).run("run_command", {"command": "true", "env": {"TOKEN": SECRET}})
    result = Rig(sim=sim).run("run_command", {"command": "true"}, key=f"op-{SECRET}")
    assert result.status == "error"
    assert result.content["problems"][0]["field"] == "operation_key"


@pytest.mark.parametrize("other", ["backend", "session"])
def test_c17_masks_are_the_sessions_on_its_backend_not_the_process(other: str) -> None:
    """Not process-global. Another backend object, or another
    session on the same backend, never passed the value: it is not masked
    there (``redact=`` hands values over, as across a restart)."""
    script = {"printenv TOKEN": Script.prints(SECRET + "\n")}
    sim = Simulator(scripts=script)
    Rig(sim=sim).run("run_command", {"command": "printenv TOKEN", "env": {"TOKEN": SECRET}})
    if other == "backend":
        elsewhere = Rig(sim=Simulator(scripts=script))
    else:
        elsewhere = Rig(sim=sim, session_id="session-2")
    shown = elsewhere.run("run_command", {"command": "printenv TOKEN"}, key="op-9")
    assert shown.content["stdout"] == SECRET + "\n"
    handed = Rig(sim=Simulator(scripts=script), redact=[SECRET])
    masked = handed.run("run_command", {"command": "printenv TOKEN"}, key="op-9")
    assert masked.content["stdout"] == "<redacted>\n"


def test_c17_a_sessions_memory_lives_as_long_as_its_backend() -> None:
    """The memory is the backend object's, forgotten with it (a
    harness making backends does not grow the process for good)."""
    sim = Simulator()
    Rig(sim=sim).run("run_command", {"command": "true", "env": {"TOKEN": SECRET}})
    key = id(sim)
    assert SECRET in _masks._MEMORIES[key]["session-1"].secrets
    del sim
    gc.collect()
    assert key not in _masks._MEMORIES


def test_c17_a_toolset_and_a_port_on_its_backend_share_one_memory() -> None:
    """A :class:`~sandrail.Toolset` keeps
    the same memory of the session as a port on its backend (one mechanism,
    not two). What the toolset passed, a later port masks; what the
    toolset's results showed, a later port refuses as an env value."""
    sim = Simulator(scripts={"printenv TOKEN": Script.prints(SECRET + "\n")})
    tools = sandrail.Toolset(
        backend=sim,
        session_id="session-1",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )
    launched = tools.call_sync(
        "run_command",
        {"command": "printenv TOKEN", "env": {"TOKEN": SECRET}, "background": True},
        call_id="call-1",
        operation_key="op-toolset-1",
    )
    assert launched.status == "ok", launched.content
    assert _masks.masks_for(sim, "session-1") is tools._masks
    port = Rig(sim=sim, session_id="session-1")
    shown = port.run("run_command", {"command": "printenv TOKEN"}, key="op-2", call_id="call-2")
    assert shown.content["stdout"] == "<redacted>\n"
    refused = port.run(
        "run_command",
        {"command": "true", "env": {"LEAK": launched.content["task_id"]}},
        key="op-3",
        call_id="call-3",
    )
    _refused_env(refused, "LEAK")


# -- a claimed task's retry answers from the claim (C3, C7) -------------


def test_c3_the_simulator_answers_a_claimed_tasks_publish_from_the_claim() -> None:
    """On the simulator's model: once the task is claimed its
    Publish is answered ``Published`` whatever the file holds, and the
    start decides by the claim (other source under the key: a conflict)."""
    first_port = Rig(tools="code")
    first = first_port.run(first_port.code_tool, {"code": "print(1)", "language": "python"})
    assert first.status == "ok"
    rig = Rig(tools="code", sim=first_port.sim)  # restarted: no record of the first launch
    starts = _starts(rig.sim)
    other = rig.run(rig.code_tool, {"code": "print(2)", "language": "python"}, call_id="c2")
    assert other.status == "error"
    assert other.content["error_type"] == ErrorCode.OPERATION_CONFLICT.value
    assert _starts(rig.sim) == starts + 1  # the claim said no, not the file
    assert rig.sim.launches[rig.task_id()] == 1


# -- SIGINT and SIGTERM on `sandrail run` (C6, C11) --------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_c11_a_signal_fires_the_calls_cancel_token_and_is_restored(signum: int) -> None:
    """The command line turns SIGINT and SIGTERM into the call's
    abort (C11) instead of an exception in the middle of it; the handlers
    it replaced are back afterwards."""
    from sandrail.cli._interrupt import cancelled_by_signals

    before = signal.getsignal(signum)
    with cancelled_by_signals() as token:
        assert signal.getsignal(signum) is not before
        os.kill(os.getpid(), signum)
        deadline = time.monotonic() + 10
        while not token.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        assert token.cancelled
    assert signal.getsignal(signum) is before


@pytest.fixture(autouse=True)
def stray_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM that reach no handler of the code under test are
    noted here instead of ending the test run (a test that sends one fails
    on its own assertions, not by killing pytest)."""
    noted: list[int] = []
    previous = {
        signum: signal.signal(signum, lambda number, frame: noted.append(number))
        for signum in (signal.SIGINT, signal.SIGTERM)
    }
    yield noted
    for signum, handler in previous.items():
        signal.signal(signum, handler)


@pytest.fixture
def tokens(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The cancel tokens the command line's calls get, in order."""
    seen: list[Any] = []
    real = _tool_call.cancelled_by_signals

    @contextlib.contextmanager
    def recording() -> Iterator[Any]:
        with real() as token:
            seen.append(token)
            yield token

    monkeypatch.setattr(_tool_call, "cancelled_by_signals", recording)
    return seen


def _signal_and_wait(signum: int, tokens: list[Any]) -> None:
    """Send this process ``signum`` and wait (bounded) until it has fired
    the call's token, as a harness's abort would have."""
    os.kill(os.getpid(), signum)
    deadline = time.monotonic() + 10
    while tokens and not tokens[-1].cancelled and time.monotonic() < deadline:
        time.sleep(0.01)


class _SignalsAtStart:
    """The simulator; once it has applied a Start, this process gets
    ``signum`` (Ctrl-C while the command runs)."""

    def __init__(self, signum: int, tokens: list[Any]) -> None:
        self.sim = Simulator()
        self.signum = signum
        self.tokens = tokens

    def __call__(self, effect: Any) -> Any:
        outcome = self.sim(effect)
        if isinstance(effect, Start):
            _signal_and_wait(self.signum, self.tokens)
        return outcome


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_c6_a_signal_after_the_start_is_uncertain_with_its_locator(
    signum: int, monkeypatch: pytest.MonkeyPatch, tokens: list[Any]
) -> None:
    """Ctrl-C after the start left exited 1 with ``Aborted!``: no
    task id, no operation key. It must be ``uncertain`` (exit 3) with the
    locator, which a retry with the same key reconciles."""
    backend = _SignalsAtStart(signum, tokens)
    monkeypatch.setattr(_tool_call, "make_backend", lambda name: backend)
    done = CliRunner().invoke(cli_main, ["run", "--operation-key", "op-sig", "--", "sleep", "60"])
    assert done.exit_code == 3, done.output
    result = json.loads(done.output)
    assert result["status"] == "uncertain"
    content = result["content"]
    assert content["operation_key"] == "op-sig"
    assert content["task_id"] == sandrail.task_id(
        "cli-session", sandrail.AgentOwner(agent_id="cli-agent"), "op-sig"
    )
    assert "Aborted" not in done.output
    assert backend.sim.launches[content["task_id"]] == 1


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_c5_a_signal_before_anything_left_is_an_error_exit_1(
    signum: int, monkeypatch: pytest.MonkeyPatch, tokens: list[Any]
) -> None:
    """A signal before any side effect may have left is ``error``
    (``canceled``, ``executed: false``), exit 1, and nothing ran."""
    sim = Simulator()

    def signalled_backend(name: str) -> Simulator:
        _signal_and_wait(signum, tokens)  # while the backend is being made
        return sim

    monkeypatch.setattr(_tool_call, "make_backend", signalled_backend)
    done = CliRunner().invoke(cli_main, ["run", "--", "echo", "hi"])
    assert done.exit_code == 1, done.output
    result = json.loads(done.output)
    assert (result["status"], result["content"]["error_type"]) == ("error", "canceled")
    assert result["content"]["executed"] is False
    assert sim.effects_seen == []


# -- `sandrail run` quotes its words (C16) -----------------------------


def test_c16_several_words_are_quoted_as_one_shell_line() -> None:
    """``sandrail run -- sh -c 'exit 3'`` ran ``sh -c exit 3``."""
    done = CliRunner().invoke(cli_main, ["run", "--", "sh", "-c", "exit 3"])
    content = json.loads(done.output)["content"]
    assert content["command"] == "sh -c 'exit 3'"
    one = CliRunner().invoke(cli_main, ["run", "--", "echo hi | wc -c"])
    assert json.loads(one.output)["content"]["command"] == "echo hi | wc -c"


def test_run_help_says_how_words_are_joined() -> None:
    done = CliRunner().invoke(cli_main, ["run", "--help"])
    text = " ".join(done.output.split())
    assert "one shell line" in text
    assert "quoted" in text


# -- `sandrail replay` reads bounded input (C12's kin: no unbounded memory)


def test_replay_refuses_a_special_file_with_one_line() -> None:
    """``/dev/zero`` grew to 5.5 GiB in 12 s."""
    done = CliRunner().invoke(cli_main, ["replay", "/dev/zero"])
    assert done.exit_code == 2
    assert done.output.count("\n") == 1, done.output
    assert "not a regular file" in done.output


def test_replay_refuses_a_fifo_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    outcome: list[Any] = []
    worker = threading.Thread(
        target=lambda: outcome.append(CliRunner().invoke(cli_main, ["replay", str(fifo)])),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=20)
    assert outcome, "replay blocked on a FIFO"
    assert outcome[0].exit_code == 2
    assert "not a regular file" in outcome[0].output


def test_replay_refuses_a_cassette_above_the_cap_without_reading_it(tmp_path: Path) -> None:
    """A 4 GiB sparse file went 1.5 GiB resident in seconds."""
    sparse = tmp_path / "huge.jsonl"
    with sparse.open("wb") as handle:
        handle.truncate(4 * 1024**3)
    started = time.monotonic()
    done = CliRunner().invoke(cli_main, ["replay", str(sparse)])
    assert time.monotonic() - started < 10
    assert done.exit_code == 2
    assert done.output.count("\n") == 1, done.output
    assert "larger than" in done.output
    assert "--max-bytes" in done.output


def test_the_cap_is_an_option(tmp_path: Path) -> None:
    path = tmp_path / "stop.jsonl"
    path.write_bytes((GOLDEN / "stop.jsonl").read_bytes())
    small = CliRunner().invoke(cli_main, ["replay", "-q", "--max-bytes", "1000", str(path)])
    assert small.exit_code == 2
    assert "larger than 1000 bytes" in small.output
    enough = CliRunner().invoke(cli_main, ["replay", "-q", "--max-bytes", "1000000", str(path)])
    assert enough.exit_code == 0, enough.output


# -- the replayer reports malformed outcomes (C7, C12) ----------------


@pytest.mark.parametrize(
    ("golden", "old", "new", "field"),
    [
        ("foreground", '"exit_code": 3', '"exit_code": 18446744073709551616', "exit_code"),
        ("foreground", '"exit_code": 3', '"exit_code": -18446744073709551616', "exit_code"),
        ("foreground", '"stdout_bytes": 13', '"stdout_bytes": -5', "stdout_bytes"),
        (
            "foreground",
            '"next_stdout_cursor": 13',
            '"next_stdout_cursor": -1',
            "next_stdout_cursor",
        ),
        (
            "foreground",
            '"sandbox_id": "sbx-1", "backend',
            '"sandbox_id": "sbx 1", "backend',
            "sandbox_id",
        ),
        ("big_output", '"size_bytes": 11279', '"size_bytes": -1', "size_bytes"),
    ],
)
def test_c12_a_malformed_outcome_is_reported_with_its_line(
    golden: str, old: str, new: str, field: str, tmp_path: Path
) -> None:
    """An exit code of 2^64 or a negative size was replayed as
    identical (the tampered result agreeing). The cassette is refused at
    the line of the outcome, naming the field."""
    data = (GOLDEN / f"{golden}.jsonl").read_text(encoding="utf-8")
    assert old in data
    tampered = data.replace(old, new)
    line = next(n for n, text in enumerate(tampered.splitlines(), 1) if new in text)
    with pytest.raises(CassetteError, match=rf"x.jsonl:{line}: .*{field}"):
        parse_cassette(tampered.encode(), source="x.jsonl")
    path = tmp_path / "tampered.jsonl"
    path.write_text(tampered, encoding="utf-8")
    done = CliRunner().invoke(cli_main, ["replay", str(path)])
    assert done.exit_code == 2
    assert f"tampered.jsonl:{line}:" in done.output


# -- `sandrail run --env NAME` takes the value from the environment (C17)


def test_c17_env_name_alone_takes_the_value_from_the_callers_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--env NAME=VALUE`` puts the secret in the process list;
    ``--env NAME`` reads it from the caller's environment (as ``docker run
    -e NAME``), so it is never in any process's arguments."""
    sim = Simulator()
    monkeypatch.setattr(_tool_call, "make_backend", lambda name: sim)
    done = CliRunner().invoke(
        cli_main, ["run", "--env", "TOKEN", "--", "true"], env={"TOKEN": SECRET}
    )
    assert done.exit_code == 0, done.output
    (start,) = [effect for effect in sim.effects_seen if isinstance(effect, Start)]
    assert start.env == {"TOKEN": SECRET}
    assert SECRET not in done.output


def test_env_name_missing_from_the_environment_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sim = Simulator()
    monkeypatch.setattr(_tool_call, "make_backend", lambda name: sim)
    monkeypatch.delenv("SANDRAIL_TEST_ABSENT", raising=False)
    done = CliRunner().invoke(
        cli_main, ["run", "--env", "A=1", "--env", "SANDRAIL_TEST_ABSENT", "--", "true"]
    )
    assert done.exit_code == 2
    assert "--env #2 names a variable that is not set" in " ".join(done.output.split())
    assert "SANDRAIL_TEST_ABSENT" not in done.output  # it may be a value typed alone
    assert sim.effects_seen == []


def test_run_help_documents_env_name_alone() -> None:
    done = CliRunner().invoke(cli_main, ["run", "--help"])
    text = " ".join(done.output.split())
    assert "--env NAME[=VALUE]" in text
    assert "NAME alone takes its value from this environment" in text
