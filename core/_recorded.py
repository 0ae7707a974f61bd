"""What an ownership record keeps of a launch, and what a retry's arguments
say against it (C2, C3, C17).

The record keeps the digest of the call **as its result shows it**: every
env value, and every occurrence of a value the session masks, is the
redaction marker there (:func:`~sandrail.core._rules.redacted_digest`), so
nothing it holds is a function of a secret. But which values a session
masks changes over its life: a value a later call passes in ``env``, or one
a restarted harness hands back with ``redact=``, is masked from then on. The
same call then *shows* differently than when its first start was recorded,
and its digest differs, though its arguments do not.

Strategy: a retry's arguments are held against the recorded digest in
three answers (:data:`RecordMatch`):

- ``same``: the digest of the retry as shown under the masks of now, or
  under any subset of the masked values its text holds (the first start was
  recorded before the session masked some of them), is the recorded one.
  The retry is the recorded call, or differs from it only inside a masked
  value; the sandbox's claim, which keeps the full digest keyed where it
  rests, tells that apart (C3).
- ``changed``: no such digest is the recorded one, and the recorded call's
  text showed no value the session masked beyond its own env values
  (:data:`MASKED_SUFFIX` absent). Masking cannot explain the difference
  then: the recorded digest is of the call with only its env values masked,
  and so is one of the digests tried. A visible change: a conflict decided
  from the record alone, with no secret-derived byte (C3).
- ``unknown``: the recorded call's text showed a value the session masked
  (:data:`MASKED_SUFFIX`), and none of the masks of now explains the
  difference. The first life may have masked a value this one does not (a
  value not handed back): the record cannot tell a changed call from the
  same one. The start is sent so that the sandbox's ledger decides: it
  deduplicates the same call, refuses another as a conflict, and launches
  nothing when it holds no claim (``claim_lost``: ``uncertain``). Never an
  answer that the call is another one with nothing run.

The suffix is a function of what the result shows (whether its text holds
a marker that its own env values do not explain), never of a value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import combinations
from typing import Any, Final, Literal

from ._masking import redaction_secrets
from ._rules import redacted_digest, shown_arguments
from ._shown import strings

__all__ = [
    "MASKED_SUFFIX",
    "MAX_SUBSET_VALUES",
    "RecordMatch",
    "own_env_values",
    "record_digest",
    "record_match",
]

MASKED_SUFFIX: Final = "+masked"
"""Ends the recorded digest of a call whose text, as its result shows it,
masks a value the session masks beyond the call's own env values (see the
module doc)."""

MAX_SUBSET_VALUES: Final = 6
"""The most masked values a retry's text may hold for every subset of them
to be tried against the recorded digest (2**6 digests); with more, only the
masks of now and none are tried."""

RecordMatch = Literal["same", "changed", "unknown"]


def own_env_values(arguments: Mapping[str, Any]) -> frozenset[str]:
    """The env values of ``arguments`` every digest masks (a mapping's, or a
    strict profile's ``{name, value}`` entries')."""
    env = arguments.get("env")
    if isinstance(env, list):
        env = {
            str(index): entry.get("value")
            for index, entry in enumerate(env)
            if isinstance(entry, Mapping)
        }
    return redaction_secrets(env)


def record_digest(
    tool: str,
    defaults: Mapping[str, Any],
    arguments: Mapping[str, Any],
    secrets: Iterable[str] = (),
) -> str:
    """The launch digest an ownership record keeps for a call of ``tool``
    whose session masks ``secrets``: the digest of the call as its result
    shows it (:func:`~sandrail.core._rules.redacted_digest`), followed by
    :data:`MASKED_SUFFIX` when its text shows a masked value that is none of
    its own env values. Raises ``CanonicalJSONError`` for arguments with no
    canonical form."""
    masked = frozenset(secrets)
    digest = redacted_digest(tool, defaults, arguments, masked)
    if masked - own_env_values(arguments) and shown_arguments(arguments, masked) != (
        shown_arguments(arguments)
    ):
        return digest + MASKED_SUFFIX
    return digest


def record_match(
    recorded: str | None,
    tool: str,
    defaults: Mapping[str, Any],
    arguments: Mapping[str, Any],
    secrets: Iterable[str] = (),
) -> RecordMatch:
    """What ``arguments`` (a call of ``tool`` whose session masks
    ``secrets`` now) are against the ``recorded`` digest of the first start
    of their key (see the module doc). A row without a digest matches
    (``same``). Raises ``CanonicalJSONError`` for arguments with no
    canonical form."""
    if recorded is None:
        return "same"
    masked = frozenset(secrets)
    if record_digest(tool, defaults, arguments, masked) == recorded:
        return "same"
    own = own_env_values(arguments)
    texts = [text for text in strings(dict(arguments)) if text not in own]
    shown = sorted(value for value in masked - own if any(value in text for text in texts))
    sizes = range(len(shown)) if len(shown) <= MAX_SUBSET_VALUES else range(1)
    for size in sizes:
        for subset in combinations(shown, size):
            if record_digest(tool, defaults, arguments, subset) == recorded:
                return "same"
    return "unknown" if recorded.endswith(MASKED_SUFFIX) else "changed"
