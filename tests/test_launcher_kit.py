"""What a backend author reusing the launcher gets: every launcher effect
answered through one typed entry, the cache's reach stated by its types,
and a clear error for the effects the backend answers itself."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sandrail.core import Cancel, Delivery, EffectFailure, Ensure, Inspect, Publish, Start
from sandrail.interpreters.launcher import Box, Launcher, NotLauncherEffectError

_TASK = "a" * 64


class _Refused:
    """A transport whose every call is refused before it leaves."""

    async def run(self, sandbox: Any, line: str, *, timeout: float, request_timeout: float) -> str:
        raise ConnectionRefusedError

    async def write_files(
        self, sandbox: Any, files: list[tuple[str, bytes]], *, request_timeout: float
    ) -> None:
        raise ConnectionRefusedError

    def exit_status(self, exc: BaseException) -> tuple[int, str] | None:
        return None

    def classify(self, exc: BaseException, what: str) -> EffectFailure:
        return EffectFailure(Delivery.NOT_SENT, f"{what}: refused")


def _launcher() -> Launcher:
    async def box(sandbox_id: str) -> Box:
        return Box(sandbox=None, sandbox_id=sandbox_id)

    return Launcher(
        _Refused(),
        request_timeout=1.0,
        box=box,
        ledger_key=lambda: b"k" * 32,
        max_command_seconds=lambda: 60,
        note_gone=lambda sandbox_id, exc: None,
        is_dead=lambda sandbox_id: False,
    )


def _start() -> Start:
    return Start(
        sandbox_id="s",
        task_id=_TASK,
        request_digest="d",
        command="echo hi",
        cwd=None,
        env=None,
        timeout_seconds=5,
    )


@pytest.mark.parametrize(
    "effect",
    [
        _start(),
        Publish(sandbox_id="s", task_id=_TASK, path=f"/tmp/sandrail/code/{_TASK}.py", source="1"),
        Cancel(sandbox_id="s", task_id=_TASK),
    ],
)
def test_side_effects_are_never_answered_from_the_cache(effect: Any) -> None:
    assert _launcher().cached(effect) is None


@pytest.mark.parametrize(
    "effect",
    [Inspect(session_id="s", owner_key="o"), Ensure(session_id="s", owner_key="o"), "Wait"],
)
def test_an_effect_the_backend_answers_itself_is_a_clear_type_error(effect: Any) -> None:
    launcher = _launcher()
    with pytest.raises(
        NotLauncherEffectError, match="answers Publish, Start, Wait, Read and Cancel"
    ):
        launcher.cached(effect)
    with pytest.raises(TypeError, match="does not answer"):
        asyncio.run(launcher.answer(effect))


def test_answer_sends_a_launcher_effect_to_the_sandbox() -> None:
    with pytest.raises(EffectFailure, match="nothing ran") as failed:
        asyncio.run(_launcher().answer(Cancel(sandbox_id="s", task_id=_TASK)))
    assert failed.value.delivery is Delivery.NOT_SENT
