"""The artifacts one call writes: whole, or piece by piece (C15).

The core asks for an artifact either whole (:class:`~sandrail.core.WriteArtifact`)
or as a stream (:class:`~sandrail.core.OpenArtifact`, then
:class:`~sandrail.core.AppendArtifact` pieces, then one
:class:`~sandrail.core.CloseArtifact`). A store with ``open(key, media_type)``
gets the stream as it comes, so a call never holds a big output whole; a store
with only ``write`` gets the pieces joined at the end (the memory a whole
output takes, once). Whatever a call leaves open when it ends (it was
cancelled, it crashed) is aborted, so a store never keeps half an artifact.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import Final, Protocol

from sandrail.core import (
    AppendArtifact,
    ArtifactRef,
    CloseArtifact,
    Delivery,
    EffectFailure,
    OpenArtifact,
    Redactions,
    WriteArtifact,
    mask_text,
    usable_artifact,
)

__all__ = ["ArtifactStore", "ArtifactWriter", "CallArtifacts", "StreamingArtifactStore"]


_WRITER_METHODS: Final = ("write", "commit", "abort")


class ArtifactWriter(Protocol):
    """One artifact being written piece by piece (C15)."""

    def write(self, text: str) -> None:
        """Add ``text`` to the end of the artifact."""
        ...

    def commit(self) -> ArtifactRef:
        """Keep what was written and return a short reference to it."""
        ...

    def abort(self) -> None:
        """Discard what was written. Never raises for a writer already ended."""
        ...


class ArtifactStore(Protocol):
    """Where full results go when a budget cuts them (C15).

    A store may also have ``open(key, media_type) -> ArtifactWriter``
    (:class:`StreamingArtifactStore`): then big outputs reach it piece by
    piece instead of whole.
    """

    def write(self, key: str, content: str, media_type: str) -> ArtifactRef:
        """Store ``content`` and return a short reference to it."""
        ...


class StreamingArtifactStore(ArtifactStore, Protocol):
    """An :class:`ArtifactStore` that takes an artifact piece by piece."""

    def open(self, key: str, media_type: str) -> ArtifactWriter:
        """Begin an artifact; its text is what the writer is given, in order."""
        ...


class _Joined:
    """A writer for a store without ``open``: the pieces, joined at commit."""

    def __init__(self, store: ArtifactStore, key: str, media_type: str) -> None:
        self._store = store
        self._key = key
        self._media_type = media_type
        self._pieces: list[str] = []

    def write(self, text: str) -> None:
        self._pieces.append(text)

    def commit(self) -> ArtifactRef:
        content = "".join(self._pieces)
        self._pieces = []
        return self._store.write(self._key, content, self._media_type)

    def abort(self) -> None:
        self._pieces = []


def _failure(detail: str) -> EffectFailure:
    return EffectFailure(Delivery.NOT_SENT, detail)


class CallArtifacts:
    """The artifact effects of one call, answered from the harness's store.

    Errors are :class:`~sandrail.core.EffectFailure` (the core then goes on
    without an artifact); a store that raises is converted by the port.
    """

    def __init__(
        self, store: ArtifactStore | None, masked: Callable[[], Redactions] | None = None
    ) -> None:
        self._store = store
        self._masked = masked
        self._open: dict[str, ArtifactWriter] = {}

    def _need_store(self) -> ArtifactStore:
        if self._store is None:
            raise _failure("no artifact store")
        return self._store

    def write(self, effect: WriteArtifact) -> ArtifactRef:
        return self._checked(
            self._need_store().write(effect.key, effect.content, effect.media_type)
        )

    def _checked(self, ref: object) -> ArtifactRef:
        """``ref`` if a result may name it: an :class:`ArtifactRef` that shows
        no value the port masks (its URI and media type reach the model)."""
        if not isinstance(ref, ArtifactRef):
            _discard(ref)
            raise _failure("artifact store returned no ArtifactRef")
        if not usable_artifact(ref) or not isinstance(ref.media_type, str):
            raise _failure(
                "artifact store's reference cannot be named (a URI over 256 characters, "
                "a size that is not a non-negative integer, or a media type not a string)"
            )
        redactions = self._masked() if self._masked is not None else None
        if redactions and any(
            mask_text(text, redactions) != text for text in (ref.uri, ref.media_type)
        ):
            raise _failure("artifact store's reference holds a masked value; it is not shown")
        return ref

    def open(self, effect: OpenArtifact) -> None:
        store = self._need_store()
        if effect.key in self._open:
            raise _failure(f"artifact {effect.key!r} is already open")
        opener = getattr(store, "open", None)
        if callable(opener):
            writer = opener(effect.key, effect.media_type)
            if not all(callable(getattr(writer, name, None)) for name in _WRITER_METHODS):
                _discard(writer)
                raise _failure("artifact store's open() returned no writer")
        else:
            writer = _Joined(store, effect.key, effect.media_type)
        self._open[effect.key] = writer

    def append(self, effect: AppendArtifact) -> None:
        writer = self._open.get(effect.key)
        if writer is None:
            raise _failure(f"artifact {effect.key!r} is not open")
        try:
            answer: object = writer.write(effect.text)  # type: ignore[func-returns-value]
        except BaseException:
            self._abort(effect.key)
            raise
        if inspect.isawaitable(answer):
            # An asynchronous writer would take the pieces later, if ever:
            # what it committed would not be what was appended.
            _discard(answer)
            self._abort(effect.key)
            raise _failure("the artifact writer's write() is asynchronous; it must not be")

    def close(self, effect: CloseArtifact) -> ArtifactRef | None:
        if effect.key not in self._open:
            raise _failure(f"artifact {effect.key!r} is not open")
        if not effect.keep:
            self._abort(effect.key)
            return None
        writer = self._open.pop(effect.key)
        try:
            ref = writer.commit()
        except BaseException:
            _quietly_abort(writer)
            raise
        try:
            return self._checked(ref)
        except EffectFailure:
            _quietly_abort(writer)  # what it kept, if anything, no result names
            raise

    def abort_all(self) -> None:
        """Abort every artifact still open (the call is over)."""
        for key in list(self._open):
            self._abort(key)

    def _abort(self, key: str) -> None:
        writer = self._open.pop(key, None)
        if writer is not None:
            _quietly_abort(writer)


def _discard(answer: object) -> None:
    """Close ``answer`` if it is a coroutine never to be awaited (no warning,
    nothing of it runs)."""
    if inspect.iscoroutine(answer):
        answer.close()


def _quietly_abort(writer: ArtifactWriter) -> None:
    # The store's own trouble: nothing of it reaches a result.
    with contextlib.suppress(Exception):
        _discard(writer.abort())  # type: ignore[func-returns-value]
