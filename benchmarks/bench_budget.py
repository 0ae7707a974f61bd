"""fit_to_budget vs the reference's halving loop: 16 MiB stdout, 1 MiB stderr, 64 KiB command.

A command result with 16 MiB of stdout, 1 MiB of stderr and a 64 KiB command
is fitted into 24,000 bytes. The baseline is what the reference port does:
up to 40 times, measure the canonical JSON, stop if it fits, else halve the
UTF-8 bytes of the largest shrinkable field (dropping a split trailing
character). Both run in the same process on the same content.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from benchmarks._common import row
from sandrail.core._budget import SHRINKABLE_FIELDS, fit_to_budget
from sandrail.core._canonical import canonical_json

GOAL = "fit_to_budget ≥ 50× faster than the halving baseline, with ≥ 99% of the budget used"

BUDGET = 24_000
_MIB = 1 << 20


def _log(size: int, lines: list[str]) -> str:
    block = "".join(lines)
    return (block * (size // len(block) + 1))[:size]


def make_content(mixed: bool) -> dict[str, Any]:
    """A realistic failing build: log-like stdout and stderr, a long command line."""
    stdout_lines = [
        f'2024-05-01T12:00:{i % 60:02d}Z INFO [worker-{i % 8}] compiling "src/m_{i}.py" ... ok\n'
        for i in range(97)
    ]
    if mixed:  # two lines in 97 hold non-ASCII text, so the whole str is non-ASCII
        stdout_lines[::50] = ["2024-05-01T12:00:00Z INFO  ✓ tests passed — 0.31 s (résumé)\n"] * 2
    stderr_lines = [
        f'warning: unused variable `x{i}` at src/module_{i}.py:{i * 7}:{i % 80}\n\tnote: \\ "x"\n'
        for i in range(41)
    ]
    return {
        "ok": False,
        "status": "failed",
        "exit_code": 2,
        "task_id": "3f" * 32,
        "sandbox_id": "i8x2kq0c7n4m1z5b9w3r",
        "session_id": "session-7d1c2a44-3c51-4f0e-9d7b-6b1c5e0f2a91",
        "operation_key": "build-and-test-2024-05-01T12:00:00Z-attempt-3",
        "call_id": "call_01HX3Q4R9W8Z2N6V5T1Y7K0M3P",
        "agent_id": "agent-builder-42",
        "stdout": _log(16 * _MIB, stdout_lines),
        "stderr": _log(_MIB, stderr_lines),
        "command": ("make -C build -j8 CFLAGS='-O2 -g' test " * 2_000)[: 64 * 1024],
    }


def halving_baseline(content: Mapping[str, Any], budget: int) -> dict[str, Any] | None:
    """The reference: halve the largest field up to 40 times; ``None`` if it still won't fit."""
    fitted = dict(content)
    for _ in range(40):
        if len(canonical_json(fitted)) <= budget:
            return fitted
        keys = [key for key in SHRINKABLE_FIELDS if isinstance(fitted.get(key), str)]
        largest = max(keys, key=lambda key: len(fitted[key].encode("utf-8")))
        data = fitted[largest].encode("utf-8")
        fitted[largest] = data[: len(data) // 2].decode("utf-8", "ignore")
    return fitted if len(canonical_json(fitted)) <= budget else None


def _time(fit: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(best, median) seconds over ``repeats`` calls."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fit()
        samples.append(time.perf_counter() - start)
    return min(samples), statistics.median(samples)


def _size(content: Mapping[str, Any] | None) -> int:
    return 0 if content is None else len(canonical_json(content))


def run(quick: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for mixed in (False, True):
        content = make_content(mixed)
        benchmark = "fit_to_budget " + ("utf8-mix" if mixed else "ascii")
        theirs = halving_baseline(content, BUDGET)
        ours = fit_to_budget(content, BUDGET)
        if _size(ours) > BUDGET:
            raise AssertionError("fit_to_budget exceeded the budget")
        base_best, base_median = _time(
            partial(halving_baseline, content, BUDGET), 3 if quick else 9
        )
        best, median = _time(partial(fit_to_budget, content, BUDGET), 30 if quick else 300)
        base_use, use = _size(theirs) / BUDGET, _size(ours) / BUDGET
        baseline, candidate = "halving (ref)", "water-fill"
        rows += [
            row(benchmark, baseline, "time best", base_best * 1e3, "ms", None),
            row(benchmark, baseline, "time median", base_median * 1e3, "ms", None),
            row(benchmark, baseline, "utilisation", base_use * 100, "%", None),
            row(benchmark, candidate, "time best", best * 1e3, "ms", base_best / best),
            row(benchmark, candidate, "time median", median * 1e3, "ms", base_median / median),
            row(benchmark, candidate, "utilisation", use * 100, "%", use / base_use),
        ]
        if mixed:
            # What the port does: the reader knows each stream's byte length
            # from its cursors and passes it, so no pass over the text counts it.
            lengths = {key: len(content[key].encode("utf-8")) for key in ("stdout", "stderr")}
            known = partial(fit_to_budget, content, BUDGET, utf8_lengths=lengths)
            if known() != ours:
                raise AssertionError("known lengths changed the result")
            best, median = _time(known, 30 if quick else 300)
            candidate = "water-fill, lengths known"
            rows += [
                row(benchmark, candidate, "time best", best * 1e3, "ms", base_best / best),
                row(benchmark, candidate, "time median", median * 1e3, "ms", base_median / median),
            ]
    return rows
