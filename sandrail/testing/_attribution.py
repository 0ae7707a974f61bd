"""How a :class:`~sandrail.testing.World` charges each call with what it
caused: the record a call opens, and the effects, faults and launches charged
to it.

Strategy: the ports a :class:`~sandrail.testing.World` builds are ordinary
ports whose ``execute`` also opens a :class:`CallRecord` (in a context
variable), and whose backend is the world's *tap*: every sandbox effect
passes through it, so it can attribute each effect, each fault that fired
and each real launch (read from the ground truth before and after the
effect) to the call that caused it, even when two calls interleave on one
event loop. Requests held for late delivery arrive only through
:meth:`~sandrail.testing.World.deliver_held` (or at the next effect, if
asked), which attributes a late launch to the call whose request was held.
The judge (:mod:`._judge`) reads these records.

Its own module because it is the half of a world the judge's evidence comes
from, apart from the half a harness uses (building ports, making calls):
:class:`Attribution` is the base of :class:`~sandrail.testing.World`, which
holds the state it reads and writes.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

import sandrail
from sandrail import ToolPort, ToolRequest
from sandrail.core import (
    Effect,
    EffectFailure,
    NativeIdentity,
    PortSettings,
    SandboxEffect,
    Start,
    Started,
    StartRefused,
    ToolKind,
    launch_digest,
    plain_arguments,
    same_call,
)
from sandrail.interpreters._cancel import EitherSignal
from sandrail.interpreters.simulator import SimulatedHarness

from ._calls import _BATCH, _CURRENT, _LABEL, CallRecord, tool_kind
from ._truth import GroundTruth

__all__ = ["Attribution"]


class Attribution:
    """The records of a world's calls, and what each is charged with: the
    effects it sent, the faults that fired on them and the launches the
    ground truth counted (see the module doc). :class:`~sandrail.testing.World`
    sets the state below."""

    harness: SimulatedHarness
    truth: GroundTruth
    faults: Any
    calls: list[CallRecord]
    claims: dict[str, str]
    fence_marks: dict[str, int]
    stale_launches: list[tuple[CallRecord | None, int, int]]
    keys: dict[str, set[str]]
    _task_ids: dict[tuple[str, str], tuple[object, str]]
    _owner_of: dict[int, CallRecord | None]
    _applied: Any

    @contextlib.contextmanager
    def _watching(self, port: ToolPort, request: ToolRequest) -> Iterator[CallRecord]:
        """Open the record of a call about to run on ``port``."""
        concurrent = _BATCH.get()
        if not concurrent:
            self.harness.reset()
        record = self._open(port, request, concurrent=concurrent)
        token = _CURRENT.set(record)
        try:
            yield record
        finally:
            _CURRENT.reset(token)
            self._observe_harness(record)

    def _open(self, port: ToolPort, request: ToolRequest, *, concurrent: bool) -> CallRecord:
        settings = port.settings
        owner = settings.owner
        session_id = settings.session_id
        identity = request.identity
        fence = identity.execution_fence if isinstance(identity, NativeIdentity) else None
        watched = attrs.evolve(
            request, cancel=EitherSignal(self.harness.cancel_token, request.cancel)
        )
        tool = request.call.name
        arguments = plain_arguments(request.call.arguments) or {}
        task: str | None = None
        conflict = foreign = False
        key = request.operation_key
        kind = tool_kind(tool)  # None: the port refuses the call (the judge holds it to that)
        if kind is ToolKind.LAUNCHES and isinstance(key, str):
            task = self._task_id(session_id, owner, key)
            self.keys.setdefault(session_id, set()).add(key)
            claimed = self.claims.get(task)
            conflict = claimed is not None and claimed != launch_digest(tool, arguments)
        elif kind is ToolKind.OWNED_TASK:
            asked = arguments.get("task_id")
            task = asked if isinstance(asked, str) else None
            owned = {self._task_id(session_id, owner, k) for k in self.keys.get(session_id, ())}
            foreign = task is not None and task not in owned
        locator: dict[str, Any] = {} if identity is None else identity.locator()
        locator |= {"session_id": session_id, "operation_key": key, "call_id": request.call.call_id}
        try:
            oversized = len(sandrail.canonical_json(locator)) > settings.max_output_bytes
        except ValueError:
            oversized = False
        record = CallRecord(
            number=len(self.calls) + 1,
            label=_LABEL.get(),
            session_id=session_id,
            owner=owner,
            request=watched,
            budget=settings.max_output_bytes,
            governed=request.result_governance is not None,
            task=task,
            fence=fence,
            conflict=conflict,
            foreign=foreign,
            oversized=oversized,
            concurrent=concurrent,
            launched_before=0 if task is None else self.truth.launches.get(task, 0),
            one_call=_one_call(tool, arguments, settings) if kind is ToolKind.LAUNCHES else None,
        )
        self.calls.append(record)
        return record

    def _task_id(
        self, session_id: str, owner: sandrail.AgentOwner | sandrail.NativeOwner, key: str
    ) -> str:
        """:func:`sandrail.task_id`, worked out once per session, owner and key
        (a read asks for every key of its session)."""
        found = self._task_ids.get((session_id, key))
        if found is not None and (found[0] is owner or found[0] == owner):
            return found[1]
        task = sandrail.task_id(session_id, owner, key)
        self._task_ids[(session_id, key)] = (owner, task)
        return task

    def _observe_harness(self, record: CallRecord) -> None:
        # The request's token fires with the world's (a fault) or the harness's own.
        token = record.request.cancel
        record.aborted = self.harness.cancel_token.cancelled or bool(
            getattr(token, "cancelled", False)
        )
        record.drifted = self.harness.drifted
        record.authority_lost = not self.harness.authority_held

    def _before_late_delivery(self) -> tuple[dict[str, int], int] | None:
        """How often each held start's task had launched, and how many late
        deliveries there were, before the held requests arrive (``None``:
        nothing is held)."""
        held = list(getattr(self.faults, "held", ()))
        if not held:
            return None
        before = {
            effect.task_id: self.truth.launches.get(effect.task_id, 0)
            for effect in held
            if isinstance(effect, Start)
        }
        return before, len(self.faults.late_deliveries)

    def _attribute_late(self, before: Mapping[str, int], start: int) -> None:
        """Charge the launches the ground truth counted while held requests
        arrived to the calls that sent them: the start that answered
        ``first_launch``, else (a backend whose answer hides it) the first
        start of the task that was not refused."""
        fresh = {task: self.truth.launches.get(task, 0) - count for task, count in before.items()}
        delivered = [
            (effect, result)
            for effect, result in self.faults.late_deliveries[start:]
            if isinstance(effect, Start) and not isinstance(result, EffectFailure)
        ]
        charged: set[int] = set()
        for first_only in (True, False):
            for number, (effect, result) in enumerate(delivered):
                if (
                    number not in charged
                    and fresh.get(effect.task_id, 0) > 0
                    and isinstance(result, Started)
                    and (result.first_launch or not first_only)
                ):
                    fresh[effect.task_id] -= 1
                    charged.add(number)
        for number, (effect, _) in enumerate(delivered):
            self._applied_start(self._owner_of.get(id(effect)), effect, launched=number in charged)

    def _mark(self, effect: Effect) -> tuple[int, int, int]:
        fired = len(self.faults.faults_fired)
        applied = -1 if self._applied is None else len(self._applied)
        launches = self.truth.launches.get(effect.task_id, 0) if isinstance(effect, Start) else 0
        return fired, applied, launches

    def _settle(self, effect: Effect, answer: object, mark: tuple[int, int, int]) -> Any:
        fired, applied, launches = mark
        assert isinstance(effect, SandboxEffect)
        record = _CURRENT.get()
        self._owner_of[id(effect)] = record
        applied_now = None if self._applied is None else self._applied[applied:]
        if record is not None:
            record.effects.append((effect, answer))
            record.faults.extend(self.faults.faults_fired[fired:])
            if applied_now and isinstance(answer, EffectFailure) and effect in applied_now:
                record.reached_unanswered.append(effect)
        if isinstance(effect, Start):
            if applied_now is not None:
                reached = effect in applied_now
            else:
                reached = isinstance(answer, Started | StartRefused)
            if reached:
                launched = self.truth.launches.get(effect.task_id, 0) > launches
                self._applied_start(record, effect, launched=launched)
            elif self.truth.launches.get(effect.task_id, 0) > launches and record is not None:
                record.launched[effect.task_id] += 1  # launched, though nobody saw it reach
        if isinstance(answer, EffectFailure):
            raise answer
        return answer

    def _applied_start(self, record: CallRecord | None, effect: Start, *, launched: bool) -> None:
        # The fence the harness asked for (its request's), not the one the
        # Start carried: a core that drops the fence must still be caught.
        fence = effect.fence if record is None else record.fence
        mark = self.fence_marks.get(effect.sandbox_id)
        if launched:
            if record is not None:
                record.launched[effect.task_id] += 1
            self.claims.setdefault(effect.task_id, effect.request_digest)
            if fence is not None and mark is not None and fence < mark:
                self.stale_launches.append((record, fence, mark))
        if fence is not None and (mark is None or fence > mark):
            self.fence_marks[effect.sandbox_id] = fence


def _one_call(tool: str, arguments: Mapping[str, Any], settings: PortSettings) -> str | None:
    """The digest of a launch as one call to a port with ``settings``."""
    try:
        text = same_call(tool, arguments, settings)
    except Exception:
        return None
    return None if text is None else hashlib.sha256(text).hexdigest()
