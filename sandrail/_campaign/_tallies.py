"""The counts both campaigns keep per fault kind, and their JSON tables.

The simulator's campaign (:class:`~sandrail._campaign._report.CampaignReport`)
keys them by :class:`~sandrail.interpreters.simulator.FaultKind` value, the
wire campaign (:class:`~sandrail._campaign._wire.WireReport`) by
:class:`~sandrail._campaign._wire.WireKind` value. Both reports are
:class:`Tallies`; its methods take the set of kinds a report speaks of, so
both count, add up and write the same tables.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from sandrail.testing._execute import Retry

__all__ = ["DECISIVE_GOAL", "STATUSES", "Tallies"]

STATUSES = ("ok", "error", "uncertain")
DECISIVE_GOAL = 0.99
"""The share of retries after a transient fault that must say ``ok`` or ``error``."""

_NONE_UNREACHABLE: Mapping[tuple[str, str], str] = MappingProxyType({})


@attrs.define(kw_only=True)
class Tallies:
    """What a campaign's report counts: calls, violations, and tables keyed
    by fault kind (or, for :attr:`retry_steps`, by workload step)."""

    calls: int = 0
    violations: Counter[str] = attrs.Factory(Counter)
    """Contract line -> violations."""
    coverage: dict[str, Counter[str]] = attrs.Factory(dict)
    """Fault kind -> status of the call it struck -> count."""
    reconciled: dict[str, Counter[str]] = attrs.Factory(dict)
    """Fault kind -> status of the retry after a struck call came back uncertain."""
    retry_steps: dict[str, Counter[str]] = attrs.Factory(dict)
    """``workload · step`` struck by a transient fault -> retry status -> count."""
    retry_reasons: dict[str, Counter[str]] = attrs.Factory(dict)
    """Fault kind -> error_type of the retries that stayed uncertain -> count."""

    def count_decisive(self, kinds: Iterable[str]) -> tuple[int, int]:
        """(decisive retries, all retries) after faults of ``kinds`` (their
        values): a retry is decisive when it says ``ok`` or ``error``."""
        counts: Counter[str] = Counter()
        for kind in kinds:
            counts.update(self.reconciled.get(kind, Counter()))
        total = sum(counts[status] for status in STATUSES)
        return counts["ok"] + counts["error"], total

    def decisive_share_of(self, kinds: Iterable[str]) -> float:
        """The share of retries after faults of ``kinds`` that were decisive
        (1.0 when none was retried)."""
        good, total = self.count_decisive(kinds)
        return 1.0 if total == 0 else good / total

    def count_retry(self, retry: Retry, transient: Container[str]) -> None:
        """Count the reconciling ``retry`` of a struck call: by the kind that
        struck, by step when that kind is one of ``transient``, and by reason
        when it stayed uncertain."""
        self.reconciled.setdefault(retry.kind, Counter())[retry.status] += 1
        if retry.kind in transient:
            self.retry_steps.setdefault(retry.step, Counter())[retry.status] += 1
        if retry.status == "uncertain":
            reasons = self.retry_reasons.setdefault(retry.kind, Counter())
            reasons[retry.error_type or "?"] += 1

    def absorb_tallies(self, other: Tallies) -> None:
        """Add ``other``'s calls, violations and tables to these."""
        self.calls += other.calls
        self.violations.update(other.violations)
        for mine, theirs in (
            (self.coverage, other.coverage),
            (self.reconciled, other.reconciled),
            (self.retry_steps, other.retry_steps),
            (self.retry_reasons, other.retry_reasons),
        ):
            for key, counts in theirs.items():
                mine.setdefault(key, Counter()).update(counts)

    def tallies_json(
        self,
        kinds: Iterable[str],
        transient: Iterable[str],
        *,
        unreachable: Mapping[tuple[str, str], str] = _NONE_UNREACHABLE,
    ) -> dict[str, Any]:
        """The tables as JSON, in this order:

        - ``coverage`` and ``reconciled``: kind -> status -> count, for every
          kind of ``kinds`` (values, in their order) and every status of
          :data:`STATUSES`, zeros written out; a zero coverage cell named in
          ``unreachable`` ((kind, status) -> why) says ``"unreachable: " + why``;
        - ``decisive``: the retries after the ``transient`` kinds, how many
          were decisive, their share (rounded to 6 places) and
          :data:`DECISIVE_GOAL`;
        - ``retry_steps``: step -> status -> count, steps sorted;
        - ``uncertain_retries``: kind -> error_type -> count, kinds sorted.
        """
        kinds = tuple(kinds)
        transient = tuple(transient)
        good, total = self.count_decisive(transient)

        def cell(kind: str, status: str) -> int | str:
            count = self.coverage.get(kind, Counter()).get(status, 0)
            if not count and (kind, status) in unreachable:
                return "unreachable: " + unreachable[(kind, status)]
            return count

        return {
            "coverage": {
                kind: {status: cell(kind, status) for status in STATUSES} for kind in kinds
            },
            "reconciled": {
                kind: {
                    status: self.reconciled.get(kind, Counter()).get(status, 0)
                    for status in STATUSES
                }
                for kind in kinds
            },
            "decisive": {
                "transient_kinds": list(transient),
                "decisive": good,
                "retries": total,
                "share": round(self.decisive_share_of(transient), 6),
                "goal": DECISIVE_GOAL,
            },
            "retry_steps": {
                step: {status: counts.get(status, 0) for status in STATUSES}
                for step, counts in sorted(self.retry_steps.items())
            },
            "uncertain_retries": {
                kind: dict(reasons) for kind, reasons in sorted(self.retry_reasons.items())
            },
        }
