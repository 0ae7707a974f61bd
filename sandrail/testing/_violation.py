"""One broken contract line, as the judge and every check report it.

A leaf of the testing kit: the judge (``_judge``) and the checks kept beside
the things they check (``_record_faults``) both yield it, so neither imports
the other for it.
"""

from __future__ import annotations

import attrs

__all__ = ["Violation"]


@attrs.frozen
class Violation:
    """One broken contract line: which, at which call (its number in the
    world, ``None`` for the world as a whole), and what was seen."""

    line: str
    call: int | None
    message: str

    def __str__(self) -> str:
        where = "the world" if self.call is None else f"call {self.call}"
        return f"{self.line} ({where}): {self.message}"
