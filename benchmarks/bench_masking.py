"""Masking a page of output for many secret values: the pure automaton against
the native anchored one (the ``native`` extra), each against a plain pass.

Two shapes of value set. *Shared prefix*: the schema's largest env, values of
32,000 characters sharing a 31,999-character prefix (values searched one by
one took ~7.9 s a page), in output of that prefix.
*Distinct*: 32 random values of 32,000 characters that share nothing, in
random text of their letters (no byte is skipped at the root: every byte is a
step of the pure automaton). Each row masks one widened page (what a 4-byte
page of such output reads: about four times the longest value; both
``intervals`` and ``pending_prefix``) and reports seconds per page; the
baseline is a plain Python pass over the same bytes in the same run, and the
ratio is baseline / row (1.0: as cheap as the plainest pass there is; the
goal is ≥ 0.5, a page at most twice a plain pass). The build rows are the
one-time cost of the automaton of a value set (shared by every read after it);
their ratio is the pure build / the native build. The last rows are output
made to defeat the anchors (values of one byte, in a run of it): the native
search gives the page up past its budget to the pure automaton. Variants are interleaved,
repeated, and the best of each kept, so a busy machine slows all alike.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from typing import Any

from benchmarks._common import row
from sandrail.core import Redactions
from sandrail.core import _anchored as anchored
from sandrail.core import _masking as masking

GOAL = (
    "P9: build for 32 distinct random values ≤ 0.1 s; a page of text ≤ 2× a plain pass "
    "(ratio ≥ 0.5); a page's cost independent of the number of values"
)

_PREFIX = "a" * 31_999
_LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"


def _plain_pass(data: bytes) -> int:
    seen = 0
    for byte in data:
        seen ^= byte
    return seen


def _built(values: list[str], native: bool) -> tuple[Redactions, float]:
    """A fresh ``Redactions`` of ``values`` with its automaton built, and the
    seconds that took (the pure automaton alone when not ``native``)."""
    masking._PREPARED.clear()
    began = time.perf_counter()
    redactions = Redactions(values)
    if native:
        assert redactions._prepared.native() is not None
    else:
        redactions._prepared.anchored = None  # as without the extra
        redactions._search()
    return redactions, time.perf_counter() - began


def _page(redactions: Redactions, data: bytes) -> None:
    redactions.intervals(data)
    redactions.pending_prefix(data, 0)


def _timed(work: Callable[[], Any]) -> float:
    began = time.perf_counter()
    work()
    return time.perf_counter() - began


def _shape(
    label: str, values: list[str], page: bytes, repeats: int, native: bool
) -> list[dict[str, Any]]:
    engines = ("pure", "native") if native else ("pure",)
    built: dict[str, float] = dict.fromkeys(engines, float("inf"))
    spent: dict[str, float] = dict.fromkeys(engines, float("inf"))
    plain = float("inf")
    for _ in range(repeats):
        plain = min(plain, _timed(lambda: _plain_pass(page)))
        for engine in engines:
            redactions, seconds = _built(values, engine == "native")
            built[engine] = min(built[engine], seconds)
            spent[engine] = min(spent[engine], _timed(functools.partial(_page, redactions, page)))
    rows = [row("masking", f"{label}: plain pass over the page", "s/page", plain, "s")]
    for engine in engines:
        ratio = None if engine == "pure" else built["pure"] / built[engine]
        rows.append(row("masking", f"{label}: build, {engine}", "s/set", built[engine], "s", ratio))
    for engine in engines:
        rows.append(
            row(
                "masking",
                f"{label}: mask a page, {engine}",
                "s/page",
                spent[engine],
                "s",
                plain / spent[engine],
            )
        )
    return rows


def run(quick: bool) -> list[dict[str, Any]]:
    repeats = 2 if quick else 5
    native = anchored.native_available()
    rows: list[dict[str, Any]] = []
    longest = len((_PREFIX + "一").encode())
    for count in (16, 256) if quick else (16, 64, 256):
        values = [_PREFIX + chr(0x4E00 + n) for n in range(count)]
        page = b"a" * (4 * longest)
        rows += _shape(f"{count} values, shared prefix", values, page, repeats, native)
    draw = random.Random(7)
    distinct = ["".join(draw.choice(_LETTERS) for _ in range(32_000)) for _ in range(32)]
    text = "".join(draw.choice(_LETTERS + " ") for _ in range(4 * 32_000)).encode()
    rows += _shape("32 distinct random values", distinct, text, repeats, native)
    # Made to defeat the anchors: values of one byte, in a run of it. The
    # native page goes over its budget and falls back to the pure automaton
    # (its page row includes building that, once per set).
    runs = ["a" * length for length in range(8, 40)]
    rows += _shape(
        "32 values of one byte, in a run (fallback)", runs, b"a" * 128_000, repeats, native
    )
    if not native:
        rows.append(row("masking", "native extra not installed: pure rows only", "-", 0, "-"))
    masking._PREPARED.clear()
    return rows
