"""What a cassette leaves out: the redaction of one call's secrets (C17).

Strategy for redaction (C17): a cassette must hold no environment value and
no secret the caller named, yet replay must still match value by value. So
the same :class:`CallRedaction` is applied to what is written and, at replay,
to what the live core asks: environment values become the marker where they
are passed (request arguments, ``Start.env``); secrets (named ones, and env
values of :data:`MIN_SCRUBBED_LENGTH` characters or more) are cut out of every
other string (output that echoes them, artifacts). An env *name* that holds
a secret is written as a name of its own, ``REDACTED_NAME_1`` and on in the
order the env lists them (a name a command can still be given, so the
redacted request replays). Digests the core computes over secret-bearing
arguments are swapped for the digests of the redacted request: a replay of
the redacted request computes exactly those, and a digest of a weak secret
is itself a leak. So no byte written is a function of a secret, wherever in
the request it stood.

Its own module because the recorder and the replayer both apply it, each
to the JSON data of :mod:`._cassette_codec`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from sandrail.core import (
    CanonicalJSONError,
    Redactions,
    ToolRequest,
    launch_digest,
    mask_text,
    recorded_digest,
    request_digest,
)

from ._cassette_codec import _SCALARS, MARKER, MIN_SCRUBBED_LENGTH

__all__ = ["NAME_PREFIX", "CallRedaction"]


@attrs.frozen
class CallRedaction:
    """What to cut out of everything one call writes (see the module doc)."""

    secrets: tuple[str, ...]
    """Substrings replaced by :data:`MARKER`, longest first."""
    digests: Mapping[str, str]
    """Digests of the real request mapped to those of the redacted one."""
    request: ToolRequest
    """The request with its secrets redacted: what a replay runs."""
    names: Mapping[str, str] = attrs.field(factory=dict)
    """Env names that hold a secret, mapped to the names written instead."""
    _masks: Redactions = attrs.field(init=False, eq=False, repr=False)
    """:attr:`secrets`, and their forms escaped in JSON text, as the core
    masks them: one marker for every run of text that overlapping or
    touching secrets cover, so no piece of one survives another's cut."""

    @_masks.default
    def _both_forms(self) -> Redactions:
        escaped = (json.dumps(secret, ensure_ascii=False)[1:-1] for secret in self.secrets)
        return Redactions((*self.secrets, *escaped))

    @classmethod
    def of(
        cls, request: ToolRequest, named: Iterable[str], masked: frozenset[str] = frozenset()
    ) -> CallRedaction:
        """The redaction of ``request``: ``named`` values and env values cut
        out, and ``masked`` (the values the port masks, which its core's
        digests are computed without) too."""
        found = {secret for secret in named if secret} | set(masked)
        arguments = getattr(request.call, "arguments", None)
        env = arguments.get("env") if isinstance(arguments, Mapping) else None
        if isinstance(env, Mapping):
            found.update(
                value
                for value in env.values()
                if isinstance(value, str) and len(value) >= MIN_SCRUBBED_LENGTH
            )
        found.discard(MARKER)
        names = _env_names(env, found) if isinstance(env, Mapping) else {}
        bare = cls(tuple(sorted(found, key=lambda s: (-len(s), s))), {}, request, names)
        if not isinstance(arguments, Mapping) or (not found and not isinstance(env, Mapping)):
            return bare
        clean_arguments = bare.scrub(dict(arguments), env_slot=False)
        if isinstance(env, Mapping):
            clean_arguments["env"] = _redact_env(env, names)
        redacted = attrs.evolve(request, call=attrs.evolve(request.call, arguments=clean_arguments))
        digests: dict[str, str] = {}
        try:
            digests[request_digest(request)] = request_digest(redacted)
            tool = request.call.name
            digests[launch_digest(tool, arguments)] = launch_digest(tool, clean_arguments)
            # The ownership record's digest has no env value, but may hold a
            # named secret of the command.
            digests[recorded_digest(tool, arguments, masked)] = recorded_digest(
                tool, clean_arguments
            )
        except (CanonicalJSONError, AttributeError, TypeError, ValueError):
            pass  # no JSON form: the core refuses the request before any digest matters
        digests = {k: v for k, v in digests.items() if k != v}
        return cls(bare.secrets, digests, redacted, names)

    @property
    def bare(self) -> bool:
        """Nothing to redact: no secret to cut, no digest to swap."""
        return not self.secrets and not self.digests

    def scrub(self, data: Any, *, env_slot: bool) -> Any:
        """``data`` (JSON data) with digests swapped and secrets cut out;
        with ``env_slot``, ``data`` is an effect whose ``env`` values all go.
        Tuples become lists."""
        if env_slot and isinstance(data, dict) and isinstance(data.get("env"), dict):
            data = {**data, "env": _redact_env(data["env"], self.names)}
        if not self.secrets and not self.digests and _plain_json(data):
            return data  # nothing to swap or cut: the data as it is
        return self._scrub(data)

    def _scrub(self, data: Any) -> Any:
        if isinstance(data, str):
            data = self.digests.get(data, data)
            # Inside JSON text (an artifact's content) a secret is escaped:
            # both forms are cut, and secrets that overlap are cut as one.
            return mask_text(data, self._masks)
        if isinstance(data, dict):
            return {self._scrub(key): self._scrub(value) for key, value in data.items()}
        if isinstance(data, list | tuple):
            return [self._scrub(item) for item in data]
        return data


def _plain_json(data: Any) -> bool:
    """Whether ``data`` holds only dicts, lists and scalars (no tuples)."""
    kind = type(data)
    if kind is dict:
        return all(_plain_json(value) for value in data.values())
    if kind is list:
        return all(_plain_json(item) for item in data)
    return kind in _SCALARS


def _redact_env(env: Mapping[Any, Any], names: Mapping[str, str]) -> dict[Any, Any]:
    """``env`` as written: every value the marker, a name that holds a
    secret replaced (``names``), in the order of the names written (the
    order of the real ones would tell where a secret sorts)."""
    written = [names.get(name, name) for name in env]
    return dict.fromkeys(
        sorted(written, key=lambda name: (not isinstance(name, str), str(name))), MARKER
    )


NAME_PREFIX: Final = "REDACTED_NAME_"
"""What an env name that holds a secret is written as, numbered from 1."""


def _env_names(env: Mapping[Any, Any], secrets: Iterable[str]) -> dict[str, str]:
    """The names of ``env`` that hold one of ``secrets``, each mapped to a
    name of its own (:data:`NAME_PREFIX` and a number, in the order ``env``
    lists them, skipping a name ``env`` already has): a function of where
    secrets stand, never of what they are."""
    values = tuple(secrets)
    holding = [
        name for name in env if isinstance(name, str) and any(value in name for value in values)
    ]
    if not holding:
        return {}
    taken = set(env) - set(holding)
    names: dict[str, str] = {}
    number = 0
    for name in holding:
        number += 1
        while f"{NAME_PREFIX}{number}" in taken:
            number += 1
        names[name] = f"{NAME_PREFIX}{number}"
    return names
