"""The E2B interpreter on a local-e2b server as a ``sandrail.testing`` target:
its ground truth, its world controls, one fresh world per call.

Strategy: the judge needs, per task id, how many times a command really
launched, up to date as soon as a ``Start`` returns. The launcher's
supervised commands are not started through envd, so the server's process
records do not show them. Instead, in front of the backend, every ``Start``
gets a mark as the first thing its command runs
(:class:`sandrail.testing.MarkedLaunches` with ``server.mark``; a line to
the server's mark listener, which the sandbox cannot take back): a launch
is a command that really began, counted by the server, whatever the
launcher claims. Marks arrive a moment after the start's answer, so after
every ``Start`` (answered or failed) the target waits, bounded, until the
server has seen each launcher ``start`` process of that task end and, for
each that answered ``started 1`` (the first bytes of its stdout, in the
server's ground truth even when no client got them), a mark. A launch the
launcher did not own up to is still counted (it arrives late, and the
judge's check of all launches per task sees it).

Each world is a fresh backend and a fresh mark prefix, on one shared server;
closing the world kills the sandboxes it made, so the next world's sessions
create new ones.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from sandrail.interpreters.e2b import E2BBackend
from sandrail.interpreters.launcher import LAUNCHER_NAME, LEDGER
from sandrail.testing import MarkedLaunches, Strike, Target

from ._serve import LocalE2B
from ._truth import GroundTruth

__all__ = ["LaunchTruth", "e2b_target", "kill_sandboxes", "run_as_root", "server_target"]

_SETTLE_SECONDS = 20.0
"""The most a Start waits for its launches to show in the ground truth."""
_POLL_SECONDS = 0.005
_WIPE = f"rm -rf {LEDGER}/tasks {LEDGER}/claims.*"
"""What a root command that loses the ledger does (the launcher stays)."""


class LaunchTruth(MarkedLaunches):
    """A :class:`sandrail.testing.GroundTruth` of one world on a local-e2b
    server: launches per task id (from the marks its commands send to the
    server, :class:`sandrail.testing.MarkedLaunches`) and the live processes
    of a task (its command's session, looked up in the sandbox as root)."""

    def __init__(self, server: LocalE2B, prefix: str) -> None:
        super().__init__(
            mark=server.mark,
            marks=lambda: [mark.text for mark in server.truth().marks],
            live_processes=self._live_processes,
            prefix=prefix,
        )
        self.server = server

    def _live_processes(self, task_id: str) -> int:
        sandbox_id = self.sandbox_of.get(task_id)
        if sandbox_id is None or not self.server.alive:
            return 0
        session = f"{LEDGER}/tasks/{task_id}/pgid"
        answer = run_as_root(
            self.server,
            sandbox_id,
            f'sid=$(cat {session} 2>/dev/null); [ -n "$sid" ] && pgrep -s "$sid" | wc -l || echo 0',
        )
        try:
            return int(answer.split()[-1])
        except (IndexError, ValueError):
            return 0

    def _marks_in(self, truth: GroundTruth) -> Counter[str]:
        return self.counts(mark.text for mark in truth.marks)

    def settle(self, task_id: str) -> Callable[[], None]:
        """Before a ``Start`` of ``task_id``: what waits (bounded), once it
        returned, until every launcher ``start`` of the task since now has
        ended and each that answered ``started 1`` has its mark."""
        truth = self.server.truth()
        launchers_before = len(_launcher_starts(truth, task_id))
        marks_before = self._marks_in(truth)[task_id]

        def after() -> None:
            deadline = time.monotonic() + _SETTLE_SECONDS
            while time.monotonic() < deadline:
                truth = self.server.truth()
                starts = _launcher_starts(truth, task_id)[launchers_before:]
                if all(record.ended_at is not None for record in starts):
                    wanted = sum(1 for r in starts if r.stdout_head.startswith("started 1"))
                    if self._marks_in(truth)[task_id] >= marks_before + wanted:
                        return
                if not self.server.alive:
                    return
                time.sleep(_POLL_SECONDS)

        return after


def _options(server: LocalE2B) -> dict[str, Any]:
    """The server's SDK options, typed for any SDK call."""
    return dict(server.sdk_options)


def _launcher_starts(truth: GroundTruth, task_id: str) -> list[Any]:
    needle = f"{LAUNCHER_NAME} start {task_id} "
    return [record for record in truth.processes if needle in record.command]


def run_as_root(server: LocalE2B, sandbox_id: str, command: str) -> str:
    """Run ``command`` as root in ``sandbox_id`` of ``server`` (through the
    SDK) and return its stdout, or ``""`` when the sandbox or the server is
    gone: a world control of a test (wipe the ledger, look at processes),
    never a call a harness makes."""
    import e2b

    try:
        box = e2b.Sandbox.connect(sandbox_id, **_options(server))
        result = box.commands.run(command, user="root", timeout=30)
    except e2b.CommandExitException as exc:
        return str(exc.stdout)
    except Exception:  # a sandbox gone, a server killed: nothing to read
        return ""
    return str(result.stdout)


def e2b_target(
    server: LocalE2B,
    strike: Strike | None = None,
    *,
    request_timeout_seconds: float = 10,
    **backend_options: Any,
) -> Target:
    """A :class:`sandrail.testing.Target` of a fresh :class:`E2BBackend` on
    ``server`` (``backend_options`` go to it): launches counted by marks
    (:class:`LaunchTruth`), and the world controls ``kill_sandbox`` (the
    control plane kills it) and ``wipe_ledger`` (a root command deletes the
    claims and their log). Closing the target closes the backend and kills
    every sandbox its world used. ``real_processes`` is true. With
    ``strike`` (what a :class:`~sandrail.testing.conformance.BackendConformance`
    ``make_target(self, strike)`` is given), the kit's faults strike the
    launcher's calls on the E2B transport (``wrap_transport``), so the
    backend's own failure handling and its failure table meet them."""
    if strike is not None:
        backend_options["wrap_transport"] = strike
    backend = E2BBackend(
        **_options(server), request_timeout_seconds=request_timeout_seconds, **backend_options
    )
    return server_target(server, backend)


def server_target(
    server: LocalE2B,
    backend: Any,
    *,
    kill_sandbox: Callable[[str], None] | None = None,
    prefix: str = "launch",
) -> Target:
    """A :class:`sandrail.testing.Target` of ``backend``, any backend whose
    sandboxes live on ``server`` (the E2B interpreter, or one of your own
    over the server's API): launches counted by marks (:class:`LaunchTruth`,
    under a fresh ``prefix``), and the world controls ``kill_sandbox`` (by
    default the control plane kills it through the SDK; give your own to
    kill it as your backend's provider would) and ``wipe_ledger`` (a root
    command deletes the claims and their log). Closing the target closes
    the backend (its ``close``, if it has one) and kills every sandbox its
    world used. ``real_processes`` is true."""
    truth = LaunchTruth(server, f"{prefix}-{secrets.token_hex(6)}")
    marked = truth.backend(backend, settle=truth.settle)

    def killed_by_the_server(sandbox_id: str) -> None:
        import e2b

        if server.alive:
            e2b.Sandbox.kill(sandbox_id, **_options(server))

    def wipe_ledger(sandbox_id: str) -> None:
        run_as_root(server, sandbox_id, _WIPE)

    def close() -> None:
        closing = getattr(backend, "close", None)
        if callable(closing):
            closing()
        # Off the caller's event loop, if it has one: the sync SDK blocks.
        done = threading.Thread(target=kill_sandboxes, args=(server, set(marked.sandboxes)))
        done.start()
        done.join(60)

    return Target(
        backend=marked,
        truth=truth,
        kill_sandbox=kill_sandbox or killed_by_the_server,
        wipe_ledger=wipe_ledger,
        close=close,
        real_processes=True,
    )


def kill_sandboxes(server: LocalE2B, sandboxes: set[str]) -> None:
    """Kill each of ``sandboxes`` on ``server`` (one already gone, or a
    server no longer alive, is skipped): what a test's world does when it
    closes, so the next world's sessions get fresh sandboxes."""
    import e2b

    if not server.alive:
        return
    for sandbox_id in sandboxes:
        try:
            e2b.Sandbox.kill(sandbox_id, **_options(server))
        except Exception:  # already gone
            continue
