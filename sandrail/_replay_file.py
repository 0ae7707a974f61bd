"""Replaying a whole cassette: :func:`replay_file` rebuilds the recorded
port from the header (:func:`replay_port`, with :class:`_NoArtifacts` for
its artifact store) and re-runs every recorded request through it.

It stands above the port it rebuilds, so it is the facade's
(``sandrail.replay_file``), not the interpreters': the replay modules of
:mod:`sandrail.interpreters.replay` never import the port."""

from __future__ import annotations

import os

from sandrail._port import ALLOW, ToolPort, code_tools, command_tools
from sandrail.core import ArtifactRef, FatalInterpreterError
from sandrail.interpreters.replay import (
    Cassette,
    CassetteError,
    DivergenceError,
    Replayer,
    ReplayReport,
    decode_request,
    load_cassette,
)

__all__ = ["replay_file", "replay_port"]


class _NoArtifacts:
    """Stands in for the recorded session's artifact store: the recording
    answers every WriteArtifact, so this is never written to."""

    def write(self, key: str, content: str, media_type: str) -> ArtifactRef:
        raise FatalInterpreterError("a replay must not write artifacts")


def replay_port(cassette: Cassette, replayer: Replayer) -> ToolPort:
    """A port like the recorded one, with ``replayer`` as its backend and
    callbacks that are never asked (the recording answers harness effects)."""
    settings = cassette.settings
    factory = command_tools if cassette.tools == "command" else code_tools
    try:
        return factory(
            backend=replayer,
            session_id=cassette.header["session_id"],
            owner=cassette.owner,
            authorize=lambda request: ALLOW,
            assert_authority=lambda request: True,
            max_output_bytes=settings["max_output_bytes"],
            artifacts=_NoArtifacts() if settings["artifacts_enabled"] else None,
            foreground_timeout_seconds=settings["foreground_timeout_seconds"],
            background_timeout_seconds=settings["background_timeout_seconds"],
            allow_internet_access=settings["allow_internet_access"],
        )
    except (TypeError, ValueError) as exc:
        raise CassetteError(
            f"{cassette.source}:1: the header's settings cannot build a port: {exc}"
        ) from None


def replay_file(source: str | os.PathLike[str] | Cassette) -> ReplayReport:
    """Re-run every recorded request through the core against its recording.

    Returns the report when every effect and every result matched and the
    recording was fully consumed. Raises :class:`DivergenceError` (with
    ``report`` set to the replay so far) at the first difference, and
    :class:`CassetteError` for a file that cannot be read.
    """
    cassette = source if isinstance(source, Cassette) else load_cassette(source)
    replayer = Replayer(cassette)
    port = replay_port(cassette, replayer)
    try:
        for call in cassette.calls:
            if call.identity_redacted:
                # Refused for a secret in its identity, which the cassette
                # cut out: no core can decide it again from the cassette.
                replayer.take_refused(call)
                continue
            try:
                request = decode_request(call.request, port.definitions)
            except (KeyError, TypeError, ValueError) as exc:
                raise CassetteError(
                    f"{cassette.source}:{call.line}: cannot rebuild the request: {exc}"
                ) from None
            port.execute_sync(request)
        replayer.assert_consumed()
    except DivergenceError as error:
        error.report = replayer.report()
        raise
    return replayer.report()
