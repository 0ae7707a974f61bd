"""What a :class:`~sandrail.Toolset` reads from the backend it is given: the
label its results name, and a :class:`~sandrail.interpreters.replay.Recorder`
it may attach (one port a Recorder, so one tool group)."""

from __future__ import annotations

from typing import Any


def label_of(backend: object) -> str | None:
    """The backend's ``backend_label`` when it states one as text."""
    try:
        label = getattr(backend, "backend_label", None)
    except Exception:
        return None
    return str.__str__(label) if isinstance(label, str) else None


def attachable_recorder(backend: object, groups: tuple[str, ...]) -> Any:
    """``backend`` when it is a :class:`~sandrail.interpreters.replay.Recorder`
    this toolset can attach (one tool group, not yet attached), else ``None``
    for any other backend; ``ValueError`` naming what to do otherwise."""
    from sandrail.interpreters.replay import Recorder

    if not isinstance(backend, Recorder):
        return None
    if len(set(groups)) != 1:
        raise ValueError(
            'a Recorder records one port, and tools=("command", "code") builds two: give '
            'this toolset tools=("command",) or tools=("code",) (one Recorder per toolset)'
        )
    if backend.attached:
        raise ValueError(
            "this Recorder already records a port: give the toolset a new Recorder, "
            "which the toolset attaches itself"
        )
    return backend
