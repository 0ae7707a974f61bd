"""Recording and replay (``docs/howto/record-and-replay.md``): cassettes of effects, exact replay,
loud divergence.

Record a session by putting a :class:`Recorder` around any interpreter and
attaching it to the port built on it::

    recorder = Recorder(Simulator(), "session.jsonl", secrets=["hunter2-token"])
    port = recorder.attach(sandrail.command_tools(backend=recorder, ...))
    port.execute_sync(request)
    recorder.close()

Replay it with :func:`sandrail.replay_file` (or ``sandrail replay session.jsonl``): the
port is rebuilt from the header with a :class:`Replayer` as its backend, every
recorded request runs again through the real core, each effect the core asks
for must equal the recorded one, and each result must equal the recorded
result. The first difference raises :class:`DivergenceError`, which names the
step, the call, the effect expected, the one got and the field that differs.
A :class:`Replayer` also works as the backend of a port a test builds itself.

The line format is described in :mod:`sandrail.interpreters._cassette`.

Strategy: the recorder is a layer of each call's program (``open_layer``):
it sees every effect the program yields, harness effects included, and each
answer as the program gets it (reads already masked by the port's own
layer below it), and writes each down before passing it on. The replayer is
handed every effect of a call (``open_call``) and answers everything from
the recording, so a replay needs no harness, no sandbox and no clock.

The parts live in private modules, one concern each: the cassette's line
format in ``_cassette`` (its JSON forms in ``_cassette_codec``, its redaction
in ``_cassette_redaction``), recording in ``_recorder``, replaying effects and
the transcript it writes in ``_replayer``, what a replay ran (the
transcript's entries and the report) in ``_transcript``, and the divergence
error with rendering and comparing in ``_divergence``. Imports run one way:
``replay`` ← ``_replayer`` ← ``_divergence`` ← ``_transcript``. Replaying a
whole file rebuilds a port, which stands above the interpreters, so
:func:`sandrail.replay_file` lives with the port, not here.
This module is the one to import from.
"""

from __future__ import annotations

from ._cassette import (
    MARKER,
    MAX_CASSETTE_BYTES,
    VERSION,
    Cassette,
    CassetteError,
    decode_effect,
    decode_failure,
    decode_outcome,
    decode_request,
    encode_effect,
    encode_failure,
    encode_outcome,
    load_cassette,
    parse_cassette,
)
from ._divergence import DivergenceError, render
from ._recorder import (
    Recorder,
    RecorderBusyError,
    RecorderClosedError,
    RecorderMisplacedError,
    RecorderNotAttachedError,
    RecorderWriteError,
)
from ._replayer import Replayer
from ._transcript import CallEntry, Entry, ReplayReport, ResultEntry, StepEntry

__all__ = [
    "MARKER",
    "MAX_CASSETTE_BYTES",
    "VERSION",
    "CallEntry",
    "Cassette",
    "CassetteError",
    "DivergenceError",
    "Entry",
    "Recorder",
    "RecorderBusyError",
    "RecorderClosedError",
    "RecorderMisplacedError",
    "RecorderNotAttachedError",
    "RecorderWriteError",
    "ReplayReport",
    "Replayer",
    "ResultEntry",
    "StepEntry",
    "decode_effect",
    "decode_failure",
    "decode_outcome",
    "decode_request",
    "encode_effect",
    "encode_failure",
    "encode_outcome",
    "load_cassette",
    "parse_cassette",
    "render",
]


def __getattr__(name: str) -> object:
    """``replay_file`` and ``replay_port`` moved above the port they build:
    say where, rather than a bare ``AttributeError``."""
    if name in ("replay_file", "replay_port"):
        raise AttributeError(
            f"{name} moved to sandrail.{name} (it rebuilds a port, which stands above "
            "the interpreters)"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
