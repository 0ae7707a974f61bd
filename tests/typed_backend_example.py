"""A backend author's code as the docs show it, checked by ``mypy --strict``
(tests/test_backend_author_typing.py): a launcher backend's dispatch, its
transport, both forms of ``make_target`` and a marked ground truth, with no
ignore comment anywhere."""

from __future__ import annotations

from typing import Any

from sandrail.core import (
    Cancel,
    CommandState,
    Delivery,
    Effect,
    EffectFailure,
    Ensure,
    Inspect,
    Outcome,
    OutputChunk,
    Publish,
    Read,
    SandboxReady,
    SandboxState,
    Start,
    Wait,
)
from sandrail.interpreters.launcher import Box, Launcher, Transport, launcher_missing
from sandrail.testing import (
    SCRIPTS,
    BackendConformance,
    MarkedLaunches,
    Simulator,
    Strike,
    Target,
    simulator_target,
)


class ShellTransport:
    """A transport's shape (it reaches nothing: typing only)."""

    async def run(self, sandbox: Any, line: str, *, timeout: float, request_timeout: float) -> str:
        raise ConnectionRefusedError(line)

    async def write_files(
        self, sandbox: Any, files: list[tuple[str, bytes]], *, request_timeout: float
    ) -> None:
        raise ConnectionRefusedError(len(files))

    def exit_status(self, exc: BaseException) -> tuple[int, str] | None:
        return None

    def classify(self, exc: BaseException, what: str) -> EffectFailure:
        if isinstance(exc, ConnectionRefusedError) or launcher_missing(self.exit_status(exc)):
            return EffectFailure(Delivery.NOT_SENT, f"{what}: not sent")
        return EffectFailure(Delivery.MAYBE_SENT, f"{what}: maybe sent")


class ShellBackend:
    asynchronous = True

    def __init__(self, transport: Transport) -> None:
        self.boxes: dict[str, Box] = {}
        self.launcher = Launcher(
            transport,
            request_timeout=5.0,
            box=self._box,
            ledger_key=lambda: b"k" * 32,
            max_command_seconds=lambda: 60,
            note_gone=lambda sandbox_id, exc: None,
            is_dead=lambda sandbox_id: False,
        )

    async def _box(self, sandbox_id: str) -> Box:
        return self.boxes[sandbox_id]

    async def __call__(self, effect: Effect) -> Outcome:
        if isinstance(effect, Inspect):
            return SandboxState(
                sandbox_id=None, phase="absent", backend="shell", isolated=True, boundary="-"
            )
        if isinstance(effect, Ensure):
            return SandboxReady(sandbox_id="s", ledger_epoch=None, backend="shell")
        if isinstance(effect, Publish | Start | Wait | Read | Cancel):
            cached = self.launcher.cached(effect)
            if cached is not None:
                return cached
            return await self.launcher.answer(effect)
        raise EffectFailure(Delivery.NOT_SENT, "not a sandbox effect")

    def waited(self, effect: Wait) -> CommandState | None:
        return self.launcher.cached(effect)

    def read(self, effect: Read) -> OutputChunk | None:
        return self.launcher.cached(effect)

    def never_cached(self, effect: Start) -> None:
        return self.launcher.cached(effect)


class TestInFrontOfTheBackend(BackendConformance):
    def make_target(self) -> Target:
        return simulator_target()


class TestWhereTheBackendMeetsItsWorld(BackendConformance):
    def make_target(self, strike: Strike) -> Target:
        world = Simulator(scripts=SCRIPTS)
        marks: list[str] = []
        truth = MarkedLaunches(
            mark=lambda text: f"echo {text}",
            marks=lambda: marks,
            live_processes=world.live_processes,
        )
        return Target(backend=truth.backend(strike(world)), truth=truth)


def struck_transport(strike: Strike) -> ShellBackend:
    """The kit's faults on the backend's transport: ``strike`` keeps its type."""
    return ShellBackend(strike(ShellTransport()))
