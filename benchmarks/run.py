"""Run sandrail's benchmarks and print one table.

Usage, from the repository root::

    python -m benchmarks.run [--quick] [--only NAME] [--json]

Every ``benchmarks/bench_*.py`` module exposes ``run(quick: bool) -> list[dict]``.
Each row has the keys of :data:`COLUMNS`; ``ratio_vs_baseline`` says how many
times *better* than the baseline measured in the same run a row is (> 1 is
better; ``None`` on the baseline's own rows). The first line of each
module's docstring, and its ``GOAL`` sentence if any, are printed under the
table. Benchmarks report; they never assert on wall-clock time.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console
from rich.table import Table

COLUMNS = ("benchmark", "variant", "metric", "value", "unit", "ratio_vs_baseline")

_HERE = Path(__file__).resolve().parent


def discover(only: str | None = None) -> list[ModuleType]:
    """Import every ``bench_*`` module (or those whose name contains ``only``)."""
    if str(_HERE.parent) not in sys.path:  # run as `python benchmarks/run.py`
        sys.path.insert(0, str(_HERE.parent))
    names = sorted(path.stem for path in _HERE.glob("bench_*.py"))
    if only is not None:
        names = [name for name in names if only in name]
    return [importlib.import_module(f"{_HERE.name}.{name}") for name in names]


def _format(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def render(rows: Sequence[dict[str, Any]], notes: Sequence[str], console: Console) -> None:
    table = Table(title="sandrail benchmarks")
    for column in COLUMNS:
        numeric = column in ("value", "ratio_vs_baseline")
        table.add_column(column, justify="right" if numeric else "left")
    for row in rows:
        ratio = row.get("ratio_vs_baseline")
        cells = [_format(row.get(column)) for column in COLUMNS]
        if row.get("unit") == "%":
            cells[COLUMNS.index("value")] = f"{row['value']:.2f}"
        if ratio is not None:
            cells[-1] = f"{ratio:,.1f}×"
        table.add_row(*cells)
    console.print(table)
    for note in notes:
        console.print(note)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    parser.add_argument("--only", metavar="NAME", help="run only modules whose name contains NAME")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead")
    args = parser.parse_args(argv)

    modules = discover(args.only)
    if not modules:
        parser.error(f"no benchmark module matches {args.only!r}")
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for module in modules:
        rows.extend(module.run(args.quick))
        name = module.__name__.rpartition(".")[2]
        notes.append(f"{name}: {(module.__doc__ or '').strip().splitlines()[0]}")
        if isinstance(goal := getattr(module, "GOAL", None), str):
            notes.append(f"{name} goal: {goal}")
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        # Wide enough for the table when the output is not a terminal.
        render(rows, notes, Console() if sys.stdout.isatty() else Console(width=120))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
