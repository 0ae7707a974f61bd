"""Re-record the golden cassettes in ``tests/golden/``.

    python -m tests.golden.record          # from the repository root

Run it when a deliberate change of the core's behaviour makes a golden
recording diverge (``tests/test_replay.py`` fails and names the step), then
review ``git diff tests/golden`` like any other change of behaviour: every
changed line is a decision the core now makes differently.

Each scenario is a short simulator session. The same functions serve the
tests, which record a fresh session and replay it (``SCENARIOS``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import sandrail
from sandrail import ToolRequest, ToolResult
from sandrail.core import ApprovalRequired, Deny, NativeIdentity
from sandrail.interpreters.artifacts import MemoryArtifactStore
from sandrail.interpreters.replay import Recorder
from sandrail.interpreters.simulator import (
    Chunk,
    Fault,
    FaultKind,
    FaultPlan,
    Script,
    SimulatedHarness,
    Simulator,
)
from sandrail.testing import native_identity

GOLDEN = Path(__file__).resolve().parent
SESSION = "golden-session"
AGENT = "golden-agent"
SCOPE: Mapping[str, Any] = {"tenant": "acme", "project": "golden"}
SECRET_ENV = "tok-7f3a9c2e5b1d8f40"
SECRET_NAMED = "named-secret-e91b"


class Session:
    """A port on a simulator, recorded into ``path``."""

    def __init__(
        self,
        path: Path,
        *,
        tools: Literal["command", "code"] = "command",
        mode: Literal["agent", "native"] = "agent",
        plan: FaultPlan | None = None,
        scripts: Mapping[str, Script] | None = None,
        max_output_bytes: int = 24_000,
        artifacts: bool = False,
        secrets: Iterable[str] = (),
    ) -> None:
        self.sim = Simulator(scripts=scripts, plan=plan, harness=SimulatedHarness())
        self.harness = self.sim.harness
        self.mode = mode
        self.owner: sandrail.AgentOwner | sandrail.NativeOwner = (
            sandrail.AgentOwner(agent_id=AGENT)
            if mode == "agent"
            else sandrail.NativeOwner(scope=SCOPE)
        )
        self.recorder = Recorder(self.sim, path, secrets=secrets)
        factory = sandrail.command_tools if tools == "command" else sandrail.code_tools
        self.port = self.recorder.attach(
            factory(
                backend=self.recorder,
                session_id=SESSION,
                owner=self.owner,
                authorize=self.harness.authorize,
                assert_authority=self.harness.assert_authority,
                max_output_bytes=max_output_bytes,
                artifacts=MemoryArtifactStore() if artifacts else None,
            )
        )
        self.results: list[ToolResult] = []
        self._calls = 0

    def run(self, name: str, arguments: Mapping[str, Any] | None = None, *, key: str) -> ToolResult:
        """One call with a fresh harness state (new token, authority held)."""
        self.harness.reset()
        self._calls += 1
        identity: sandrail.AgentIdentity | NativeIdentity = (
            sandrail.AgentIdentity(agent_id=AGENT)
            if self.mode == "agent"
            else native_identity(fence=3, scope=SCOPE)
        )
        request = ToolRequest(
            call=sandrail.ToolCall(
                name=name, call_id=f"call-{self._calls}", arguments=dict(arguments or {})
            ),
            operation_key=key,
            session_id=SESSION,
            definition=self.port.definition(name),
            identity=identity,
            cancel=self.harness.cancel_token,
        )
        result = self.port.execute_sync(request)
        self.results.append(result)
        return result

    def task_id(self, key: str) -> str:
        return sandrail.task_id(SESSION, self.owner, key)

    def close(self) -> None:
        self.recorder.close()


def foreground(path: Path) -> Session:
    session = Session(path)
    session.run("sandbox_status", key="status-1")
    session.run("run_command", {"command": "echo hello golden"}, key="op-1")
    session.run("run_command", {"command": "echo hello golden"}, key="op-1")  # a retry: C2
    session.run("run_command", {"command": "exit 3"}, key="op-2")
    return session


def background_reads(path: Path) -> Session:
    build = Script(
        chunks=(
            Chunk(offset=0.0, stream="stdout", text="compiling\n"),
            Chunk(offset=5.0, stream="stderr", text="warning: ünïcode\n"),
            Chunk(offset=10.0, stream="stdout", text="done\n"),
        ),
        duration=12.0,
        exit_code=0,
    )
    session = Session(path, scripts={"make build": build})
    session.run("run_command", {"command": "make build", "background": True}, key="bg-1")
    task = session.task_id("bg-1")
    session.sim.advance(6)
    first = session.run("read_command_output", {"task_id": task}, key="read-1")
    cursors = {
        "stdout_cursor": first.content.get("next_stdout_cursor", 0),
        "stderr_cursor": first.content.get("next_stderr_cursor", 0),
    }
    session.run(
        "read_command_output", {"task_id": task, "wait_seconds": 30, **cursors}, key="read-2"
    )
    session.run("read_command_output", {"task_id": "f" * 64}, key="read-3")  # not owned: C4
    return session


def stop(path: Path) -> Session:
    session = Session(path)
    session.run("run_command", {"command": "sleep inf", "background": True}, key="bg-1")
    task = session.task_id("bg-1")
    session.sim.advance(2)
    session.run("stop_command", {"task_id": task}, key="stop-1")
    session.run("read_command_output", {"task_id": task}, key="read-1")
    return session


def run_code(path: Path) -> Session:
    source = "print('hello from golden')\n"
    scripts = {source: Script.prints("hello from golden\n")}
    session = Session(path, tools="code", mode="native", scripts=scripts)
    session.run("run_code", {"code": source, "language": "py"}, key="code-1")
    session.run("run_code", {"code": source, "language": "cobol"}, key="code-2")
    return session


def big_output(path: Path) -> Session:
    session = Session(path, max_output_bytes=1024, artifacts=True)
    session.run("run_command", {"command": "seq 2000"}, key="op-1")
    return session


def policy(path: Path) -> Session:
    session = Session(path)
    session.harness.decision = Deny(reason="not in this repository")
    session.harness.reset()
    session.run("run_command", {"command": "echo denied"}, key="op-1")
    session.harness.decision = ApprovalRequired(interaction_id="ask-7")
    session.run("run_command", {"command": "echo approval"}, key="op-2")
    return session


def secret_env(path: Path) -> Session:
    """C17: env values and a named secret, echoed in the output too."""
    scripts = {f"deploy --tag {SECRET_NAMED}": Script.prints(f"using token {SECRET_ENV}\n")}
    session = Session(path, scripts=scripts, secrets=[SECRET_NAMED])
    arguments = {
        "command": f"deploy --tag {SECRET_NAMED}",
        "env": {"API_TOKEN": SECRET_ENV, "DEBUG": "1"},
    }
    session.run("run_command", arguments, key="op-1")
    session.run("run_command", arguments, key="op-1")
    return session


_FAULT_WHEN: Mapping[FaultKind, Literal["before", "after"]] = {
    FaultKind.HANG: "after",
    FaultKind.ABORT: "after",
    FaultKind.SANDBOX_DIES: "after",
    FaultKind.LEDGER_WIPED: "after",
}


def fault(kind: FaultKind) -> Callable[[Path], Session]:
    """A foreground command whose Start meets ``kind``, then a retry with
    the same operation key (reconciliation: C2, C6)."""

    def scenario(path: Path) -> Session:
        plan = FaultPlan((Fault(effect="Start", kind=kind, when=_FAULT_WHEN.get(kind, "before")),))
        session = Session(path, plan=plan)
        session.run("run_command", {"command": "echo faulty"}, key="op-1")
        session.run("run_command", {"command": "echo faulty"}, key="op-1")
        return session

    scenario.__name__ = f"fault_{kind.value}"
    return scenario


SCENARIOS: Mapping[str, Callable[[Path], Session]] = {
    "foreground": foreground,
    "background_reads": background_reads,
    "stop": stop,
    "run_code": run_code,
    "big_output": big_output,
    "policy": policy,
    "secret_env": secret_env,
    **{f"fault_{kind.value}": fault(kind) for kind in FaultKind},
}


def record(name: str, directory: Path = GOLDEN) -> Path:
    """Record scenario ``name`` into ``directory/name.jsonl``."""
    path = directory / f"{name}.jsonl"
    SCENARIOS[name](path).close()
    return path


def main(argv: list[str]) -> int:
    names = argv or list(SCENARIOS)
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown:
        print(f"unknown scenarios: {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
        return 2
    for stale in GOLDEN.glob("*.jsonl"):
        if not argv and stale.stem not in SCENARIOS:
            stale.unlink()
    for name in names:
        path = record(name)
        print(
            f"recorded {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
