"""Signals, closed standard output and masks at the edges of a call,
against the port, the recorder and the command line on the simulator.

The cases: SIGHUP, standard output closed, a later call's task id as an env
value, signals before the handlers, a signal after the result, a Recorder
put around a session's backend; each name names the contract line it
proves. The same cases against local-e2b are in
``test_adversarial_cli_e2b.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import sandrail
from sandrail.cli import _tool_call
from sandrail.cli import main as cli_main
from sandrail.core import ErrorCode, Start
from sandrail.interpreters.replay import Recorder
from sandrail.interpreters.simulator import Script, SimulatedHarness, Simulator
from tests.local_e2b_helpers import signals_at_default
from tests.rig import Rig

SECRET = "sk-live-0123456789abcdef"
ROOT = Path(__file__).resolve().parent.parent


# -- C: an env value equal to (or inside) a later call's own task id (C17) -----


@pytest.mark.parametrize("part", ["whole", "inside"])
def test_c17_a_later_calls_task_id_held_by_an_env_value_is_refused(part: str) -> None:
    """C: task ids are a public pure function (C1), so an env value can be
    a later call's task id before that call comes; the later call then
    showed the masked value whole in ``task_id``. It is refused when it
    comes, as a later operation key already was."""
    rig = Rig()
    later = rig.task_id("op-later")
    value = later if part == "whole" else later[8:40]
    first = rig.run("run_command", {"command": "true", "env": {"TOKEN": value}}, key="op-1")
    assert first.status == "ok", first.content
    starts = len(rig.sim.effects_seen)
    result = rig.run("run_command", {"command": "echo later"}, key="op-later", call_id="c-later")
    assert result.status == "error", result.content
    assert result.content["error_type"] == ErrorCode.ARGUMENTS_INVALID.value
    assert result.content["executed"] is False
    (problem,) = result.content["problems"]
    assert problem["field"] == "task_id"
    assert value not in result.to_json()
    assert len(rig.sim.effects_seen) == starts  # refused before any effect
    # A call whose task id holds no masked value still runs.
    other = rig.run("run_command", {"command": "echo ok"}, key="op-other", call_id="c-other")
    assert other.status == "ok", other.content


# -- the command line's process: A, B, E, F (C5, C6, C11) ---------------------

_NOTED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_SIGNAL_ON_LOAD = """
import os, sys
SIGNUM = int(sys.argv[1])
class SignalOnLoad:
    # Sends this process a signal as the library starts to load (the
    # second or so a busy machine takes to import it).
    def find_spec(self, name, path=None, target=None):
        if name == "sandrail":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), SIGNUM)
        return None
sys.meta_path.insert(0, SignalOnLoad())
sys.argv = ["sandrail", *sys.argv[2:]]
from _sandrail_start import main
main()
"""


def _start(script: str, *args: str, **popen: Any) -> subprocess.CompletedProcess[str]:
    """``script`` in a fresh interpreter, bounded in time."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=popen.pop("capture_output", True),
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
        **{"preexec_fn": signals_at_default, **popen},
    )


def test_c11_the_console_script_starts_before_the_library() -> None:
    """E: the installed ``sandrail`` starts in the module that notes
    signals, not in ``sandrail.cli`` (whose import loads the library)."""
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="sandrail")
    assert script.value == "_sandrail_start:main"


@pytest.mark.parametrize("signum", _NOTED)
@pytest.mark.parametrize("command", ["run", "code"])
def test_c5_a_signal_while_the_library_loads_is_the_documented_error(
    signum: int, command: str
) -> None:
    """E: Ctrl-C in the first second or so of ``sandrail run`` (before the
    handlers were installed) printed a ``KeyboardInterrupt`` traceback
    (exit 130); SIGTERM and SIGHUP killed it silently. Each is the
    ``error`` result --help promises: ``canceled``, nothing ran, exit 1,
    and nothing on standard error."""
    args = ["run", "--indent", "0", "--", "echo hi"] if command == "run" else ["code", "-"]
    done = _start(_SIGNAL_ON_LOAD, str(int(signum)), *args, input="print(1)")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr == ""
    result = json.loads(done.stdout)
    assert (result["status"], result["content"]["error_type"]) == ("error", "canceled")
    assert result["content"]["executed"] is False


def test_c11_a_signal_inherited_as_ignored_stays_ignored() -> None:
    """A (``nohup``): a SIGHUP the process inherited as ignored is not
    turned into an abort; the call runs and answers ``ok``."""
    done = _start(
        _SIGNAL_ON_LOAD,
        str(int(signal.SIGHUP)),
        "run",
        "--indent",
        "0",
        "--",
        "echo hi",
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert json.loads(done.stdout)["content"]["stdout"] == "hi\n"


_SIGINT_AFTER_THE_RESULT = """
import os, signal, sys
real = signal.signal
def restore_then_interrupt(signum, handler):
    previous = real(signum, handler)
    if signum == signal.SIGINT and getattr(previous, "__name__", "") == "handle":
        # The call's handler just gave way to the one before it.
        os.kill(os.getpid(), signal.SIGINT)
    return previous
signal.signal = restore_then_interrupt
sys.argv = ["sandrail", "run", "--indent", "0", "--", "echo hi"]
from _sandrail_start import main
main()
"""


def test_c6_a_signal_after_the_result_does_not_change_the_exit_status() -> None:
    """F: Ctrl-C right after the result was printed (``ok`` with its
    locator on standard output) ended the process with status 130."""
    done = _start(_SIGINT_AFTER_THE_RESULT)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert json.loads(done.stdout)["status"] == "ok"
    assert "Traceback" not in done.stderr


def test_c6_closed_standard_output_is_exit_5_with_the_status_on_stderr() -> None:
    """B: with standard output closed the command ran, then ``sandrail``
    exited 1 ("nothing ran") with an ``AttributeError`` traceback. It is
    exit 5 (the result could not be written) with its status on stderr,
    as a full disk or a broken pipe already were."""
    done = _start(
        "import sys; sys.argv = ['sandrail', 'run', '--', 'echo hi']\n"
        "from _sandrail_start import main\nmain()",
        capture_output=False,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: os.close(1),
    )
    assert done.returncode == 5, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line == (
        "Error: could not write the result (standard output is closed); its status was ok"
    )


@pytest.fixture
def stray_hangups() -> Iterator[list[int]]:
    """SIGHUP that reaches no handler of the code under test is noted here
    instead of ending the test run."""
    noted: list[int] = []
    previous = signal.signal(signal.SIGHUP, lambda number, frame: noted.append(number))
    yield noted
    signal.signal(signal.SIGHUP, previous)


class _HangupAtStart:
    """The simulator; once it has applied a Start, this process gets SIGHUP
    (the terminal closed while the command runs), and the call waits
    (bounded) until the signal has aborted it."""

    def __init__(self) -> None:
        self.sim = Simulator()
        self.tokens: list[Any] = []

    def __call__(self, effect: Any) -> Any:
        outcome = self.sim(effect)
        if isinstance(effect, Start):
            os.kill(os.getpid(), signal.SIGHUP)
            deadline = time.monotonic() + 10
            while not self.tokens[-1].cancelled and time.monotonic() < deadline:
                time.sleep(0.01)
        return outcome


def test_c6_a_sighup_after_the_start_is_uncertain_with_its_locator(
    monkeypatch: pytest.MonkeyPatch, stray_hangups: list[int]
) -> None:
    """A: SIGHUP after the start killed ``sandrail run`` silently (status
    129): no result, no locator, the default key lost for good. It is
    handled as SIGTERM: ``uncertain`` (exit 3) with its operation key and
    task id, and the command launched once."""
    backend = _HangupAtStart()
    real = _tool_call.cancelled_by_signals

    @contextlib.contextmanager
    def recording() -> Iterator[Any]:
        with real() as token:
            backend.tokens.append(token)
            yield token

    monkeypatch.setattr(_tool_call, "cancelled_by_signals", recording)
    monkeypatch.setattr(_tool_call, "make_backend", lambda name: backend)
    done = CliRunner().invoke(cli_main, ["run", "--operation-key", "op-hup", "--", "sleep", "60"])
    assert done.exit_code == 3, done.output
    content = json.loads(done.output)["content"]
    assert json.loads(done.output)["status"] == "uncertain"
    owner = sandrail.AgentOwner(agent_id="cli-agent")
    assert (content["operation_key"], content["task_id"]) == (
        "op-hup",
        sandrail.task_id("cli-session", owner, "op-hup"),
    )
    assert backend.sim.launches[content["task_id"]] == 1
    assert stray_hangups == []


@pytest.mark.parametrize("command", ["run", "code"])
def test_help_says_sighup_aborts_as_sigterm(command: str) -> None:
    """A: --help names SIGHUP with SIGINT and SIGTERM."""
    done = CliRunner().invoke(cli_main, [command, "--help"])
    assert "SIGHUP" in " ".join(done.output.split())


def test_run_help_says_the_results_exit_code_not_sandrails() -> None:
    """The trial: ``run --help`` said ``sandrail run -- sh -c 'exit 3'``
    "exits 3", but sandrail exits 0 with the result's ``exit_code`` 3
    (sandrail's own exit 3 means uncertain)."""
    text = " ".join(CliRunner().invoke(cli_main, ["run", "--help"]).output.split())
    assert "exits 3" not in text
    assert "exit_code is 3" in text


# -- the Recorder doubt: it shares its inner backend's session memory (C17) ----


def test_c17_a_recorder_on_a_sessions_backend_masks_what_the_session_masks(
    tmp_path: Path,
) -> None:
    """Doubt: a Recorder wrapping, mid-session, the backend a session had
    already used started with no masks: a read through it put an env value
    of the session in clear in the result and in the cassette. The
    session's memory lives with the backend the Recorder wraps."""
    sim = Simulator(
        scripts={"./deploy.sh": Script.prints(f"deploying with {SECRET}\n")},
        harness=SimulatedHarness(),
    )
    store: dict[str, Any] = {}
    shared: dict[str, Any] = {
        "remember_owned_command": lambda request, owned: store.__setitem__(owned.task_id, owned),
        "resolve_owned_command": lambda request, task: store.get(task),
    }
    first = Rig(sim=sim, **shared)
    launched = first.run(
        "run_command", {"command": "./deploy.sh", "env": {"T": SECRET}, "background": True}
    )
    task = launched.content["task_id"]
    cassette = tmp_path / "wrap.jsonl"
    recorder = Recorder(sim, cassette)
    port = recorder.attach(
        sandrail.command_tools(
            backend=recorder,
            session_id=first.session_id,
            owner=first.owner,
            authorize=lambda request: sandrail.ALLOW,
            assert_authority=lambda request: True,
            **shared,
        )
    )
    read = port.execute_sync(
        first.request("read_command_output", {"task_id": task, "wait_seconds": 1}, key="op-2")
    )
    recorder.close()
    assert read.status == "ok", read.content
    assert "deploying with" in read.content["stdout"]
    assert SECRET not in read.to_json()
    assert SECRET not in cassette.read_text(encoding="utf-8")


# -- D: what the MCP HTTP guard lets through ------------------------------------


def _served(app: Any) -> tuple[list[dict[str, Any]], BaseException | None]:
    """``app`` wrapped as ``sandrail mcp --transport http`` serves it, run on
    one HTTP request: the messages that reached the server, and the error
    that left the app."""
    import asyncio

    from sandrail.adapters._mcp_serve import _QuietAfterTheResponse

    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    try:
        asyncio.run(_QuietAfterTheResponse(app)({"type": "http"}, receive, send))
    except BaseException as error:
        return sent, error
    return sent, None


def _answering_then(error: BaseException, *, answer_first: bool = True) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if answer_first:
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        await send({"type": "http.response.start", "status": 500, "headers": []})
        raise error

    return app


def test_a_closed_session_after_the_response_ends_the_request() -> None:
    """D: after a whole response, a second one is dropped and a closed
    session stream (the client left) is not raised to uvicorn."""
    import anyio

    sent, error = _served(_answering_then(anyio.ClosedResourceError()))
    assert error is None
    assert [message.get("status") for message in sent] == [202, None]


def test_every_other_error_still_raises() -> None:
    """D: the guard is narrow: another error after the response, or a
    closed stream before it, still reaches uvicorn."""
    import anyio

    _, error = _served(_answering_then(RuntimeError("boom")))
    assert isinstance(error, RuntimeError)
    _, early = _served(_answering_then(anyio.ClosedResourceError(), answer_first=False))
    assert isinstance(early, anyio.ClosedResourceError)
