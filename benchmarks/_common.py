"""What every benchmark module shares: the shape of a result row."""

from __future__ import annotations

from typing import Any


def row(
    benchmark: str,
    variant: str,
    metric: str,
    value: float,
    unit: str,
    ratio: float | None = None,
) -> dict[str, Any]:
    """One table row; ``ratio`` is how many times better than the baseline
    measured in the same run (``None`` on the baseline's own rows)."""
    return {
        "benchmark": benchmark,
        "variant": variant,
        "metric": metric,
        "value": value,
        "unit": unit,
        "ratio_vs_baseline": ratio,
    }
