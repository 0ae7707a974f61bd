"""A backend author's code as the docs show it, checked by ``mypy --strict``
(tests/test_backend_author_typing.py): a launcher backend's dispatch, its
transport, both forms of ``make_target`` and a marked ground truth, with no
ignore comment anywhere."""

from __future__ import annotations

from typing import Any

from sandrail import core
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

    def classify(self, exc: BaseException, what: str) -> core.EffectFailure:
        if isinstance(exc, ConnectionRefusedError) or launcher_missing(self.exit_status(exc)):
            return core.EffectFailure(core.Delivery.NOT_SENT, f"{what}: not sent")
        return core.EffectFailure(core.Delivery.MAYBE_SENT, f"{what}: maybe sent")


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

    async def __call__(self, effect: core.Effect) -> core.Outcome:
        if isinstance(effect, core.Inspect):
            return core.SandboxState(
                sandbox_id=None, phase="absent", backend="shell", isolated=True, boundary="-"
            )
        if isinstance(effect, core.Ensure):
            return core.SandboxReady(sandbox_id="s", ledger_epoch=None, backend="shell")
        if isinstance(effect, core.Publish | core.Start | core.Wait | core.Read | core.Cancel):
            cached = self.launcher.cached(effect)
            if cached is not None:
                return cached
            return await self.launcher.answer(effect)
        raise core.EffectFailure(core.Delivery.NOT_SENT, "not a sandbox effect")

    def waited(self, effect: core.Wait) -> core.CommandState | None:
        return self.launcher.cached(effect)

    def read(self, effect: core.Read) -> core.OutputChunk | None:
        return self.launcher.cached(effect)

    def never_cached(self, effect: core.Start) -> None:
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
