"""Ground truth by marks: how many times a command really launched, told by
the command itself, for a backend whose world keeps no record of launches.

Strategy: in front of the backend under test, every ``Start`` gets a mark as
the first thing its command runs: shell text the backend author provides
(``mark(text)``) that records ``text`` somewhere the sandbox cannot take it
back (a line to a listener outside the sandbox, a server's own log). A launch
is then a command that really began, counted by the world, whatever the
backend or its launcher claims; a retry that finds its claim runs nothing and
sends no mark. Each target gets a fresh prefix, so the task ids that repeat
across worlds never mix.

Marks may arrive a moment after a start's answer, and the judge reads
``launches`` as soon as a ``Start`` returns: ``settle`` (optional) waits,
bounded, until the world has seen what the start did (the local-e2b target
waits for the launcher's ``start`` processes to end and their marks to come).
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from sandrail.core import Effect, SandboxReady, SandboxState, Start
from sandrail.interpreters._drivers import is_asynchronous

__all__ = ["MarkedBackend", "MarkedLaunches"]

_PREFIX = re.compile(r"[A-Za-z0-9_-]{1,64}")

Settle = Callable[[str], Callable[[], None]]
"""``settle(task_id)`` runs just before a ``Start`` of ``task_id`` and returns
what runs once it returned or failed (it may block; the kit runs it off the
event loop of an asynchronous backend)."""


class MarkedLaunches:
    """A :class:`~sandrail.testing.GroundTruth` whose launches are counted by
    marks each ``Start``'s command sends (see :meth:`backend`).

    - ``mark(text)``: shell text that records the mark ``text`` (letters,
      digits, ``_``, ``-``, ``.``) where no command can take it back, then
      lets the command go on;
    - ``marks()``: every mark recorded so far, in any order (marks of other
      targets are ignored by their prefix);
    - ``live_processes(task_id)``: how many processes of the task still live
      (C18), looked up in the backend's world; :attr:`sandbox_of` says which
      sandbox the task's last ``Start`` went to;
    - ``prefix``: this world's mark prefix (``A-Za-z0-9_-``, at most 64),
      random by default.
    """

    def __init__(
        self,
        *,
        mark: Callable[[str], str],
        marks: Callable[[], Iterable[str]],
        live_processes: Callable[[str], int],
        prefix: str | None = None,
    ) -> None:
        if prefix is None:
            prefix = f"launch-{secrets.token_hex(6)}"
        if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
            raise ValueError("a mark prefix is 1 to 64 of A-Za-z0-9_-")
        self.prefix = prefix
        self._mark = mark
        self._marks = marks
        self._live = live_processes
        self.sandbox_of: dict[str, str] = {}
        """Task id -> the sandbox its last ``Start`` went to."""

    def mark_of(self, task_id: str) -> str:
        """The mark a launch of ``task_id`` in this world sends."""
        return f"{self.prefix}.{task_id}"

    def counts(self, marks: Iterable[str] | None = None) -> Counter[str]:
        """Task id -> its marks among ``marks`` (default: ``marks()``)."""
        found: Counter[str] = Counter()
        head = self.prefix + "."
        for text in self._marks() if marks is None else marks:
            if text.startswith(head):
                found[text[len(head) :]] += 1
        return found

    @property
    def launches(self) -> Mapping[str, int]:
        """How many times each task id really launched (its marks)."""
        return self.counts()

    def live_processes(self, task_id: str) -> int:
        """How many processes of the task still live."""
        return self._live(task_id)

    def marked(self, effect: Start) -> Start:
        """``effect`` with its command sending the task's mark first."""
        self.sandbox_of[effect.task_id] = effect.sandbox_id
        return attrs.evolve(
            effect, command=f"{self._mark(self.mark_of(effect.task_id))}; {effect.command}"
        )

    def backend(
        self, inner: Callable[[Any], Any], *, settle: Settle | None = None
    ) -> MarkedBackend:
        """``inner`` with every ``Start`` marked (a :class:`MarkedBackend`)."""
        return MarkedBackend(inner, self, settle=settle)


class MarkedBackend:
    """A backend in front of ``inner`` that marks every ``Start`` (see
    :class:`MarkedLaunches`) and passes everything else through; as
    asynchronous as ``inner``. :attr:`sandboxes` collects every sandbox its
    answers named (for a target's ``close`` to delete)."""

    def __init__(
        self,
        inner: Callable[[Any], Any],
        truth: MarkedLaunches,
        *,
        settle: Settle | None = None,
    ) -> None:
        self.inner = inner
        self.truth = truth
        self.settle = settle
        self.asynchronous = is_asynchronous(inner)
        self.sandboxes: set[str] = set()

    def __call__(self, effect: Effect) -> Any:
        if self.asynchronous:
            return self._async(effect)
        if not isinstance(effect, Start):
            return self._seen(self.inner(effect))
        after = self.settle(effect.task_id) if self.settle else None
        try:
            return self.inner(self.truth.marked(effect))
        finally:
            if after is not None:
                after()

    async def _async(self, effect: Effect) -> Any:
        if not isinstance(effect, Start):
            return self._seen(await self.inner(effect))
        settle = self.settle
        after = await asyncio.to_thread(settle, effect.task_id) if settle else None
        try:
            return await self.inner(self.truth.marked(effect))
        finally:
            if after is not None:
                await asyncio.to_thread(after)

    def _seen(self, outcome: Any) -> Any:
        if isinstance(outcome, SandboxReady | SandboxState) and outcome.sandbox_id:
            self.sandboxes.add(outcome.sandbox_id)
        return outcome
