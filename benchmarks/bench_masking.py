"""Masking a page at the schema's largest env: 256 values of 32,000 characters
that share a 31,999-character prefix, in output of the runs they share.

Outside attack 4 timed a read_command_output page at ~7.9 s with such an env
(values searched one by one: a per-value scan of every page, and a per-value
prefix function rebuilt for every read). Masking now walks one automaton over
all values. Each row masks one widened page (what a 4-byte page of such
output reads: about four times the longest value) and reports seconds per
page; the baseline is a plain Python pass over the same bytes in the same
run, so the ratio is the automaton's cost per byte against the cheapest pass
there is (1.0 would be free). Rows with 16, 64 and 256 values show that the
cost does not grow with their number. The build row is the one-time cost of
an automaton per set of values (shared by every read after it). The last rows
are the shape the automaton does least well: values sharing nothing, in text
made of their letters, where every byte is a step in Python.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from benchmarks._common import row
from sandrail.core import Redactions
from sandrail.core import _masking as masking

GOAL = "masking: a page's cost independent of the number of values (outside attack 4)"

_PREFIX = "a" * 31_999


def _values(count: int) -> list[str]:
    return [_PREFIX + chr(0x4E00 + n) for n in range(count)]


def _best(work: Callable[[], Any], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - began)
    return best


def _plain_pass(data: bytes) -> int:
    seen = 0
    for byte in data:
        seen ^= byte
    return seen


def _mask_page(redactions: Redactions, data: bytes) -> None:
    redactions.intervals(data)
    redactions.pending_prefix(data, 0)


def run(quick: bool) -> list[dict[str, Any]]:
    repeats = 2 if quick else 5
    counts = (16, 256) if quick else (16, 64, 256)
    page = b"a" * (4 * len(_values(1)[0].encode()))
    baseline = _best(lambda: _plain_pass(page), repeats)
    rows = [row("masking", "plain pass over the page", "s/page", baseline, "s")]
    for count in counts:
        values = _values(count)
        masking._PREPARED.clear()
        began = time.perf_counter()
        redactions = Redactions(values)
        redactions._search()
        built = time.perf_counter() - began
        rows.append(row("masking", f"{count} values: build once", "s/set", built, "s"))
        spent = _best(lambda redactions=redactions: _mask_page(redactions, page), repeats)
        rows.append(
            row("masking", f"{count} values: mask a page", "s/page", spent, "s", baseline / spent)
        )
    # The other shape: values that share nothing, in text made of their
    # letters (every byte starts a value, so no byte is skipped at the root).
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    draw = random.Random(7)
    distinct = [
        "".join(draw.choice(letters) for _ in range(32_000)) for _ in range(4 if quick else 32)
    ]
    text = "".join(draw.choice(letters + " ") for _ in range(len(page))).encode()
    masking._PREPARED.clear()
    began = time.perf_counter()
    redactions = Redactions(distinct)
    redactions._search()
    built = time.perf_counter() - began
    label = f"{len(distinct)} distinct random values"
    text_baseline = _best(lambda: _plain_pass(text), repeats)
    rows.append(row("masking", f"{label}: build once", "s/set", built, "s"))
    spent = _best(lambda: _mask_page(redactions, text), repeats)
    rows.append(
        row("masking", f"{label}: mask a page of text", "s/page", spent, "s", text_baseline / spent)
    )
    return rows
