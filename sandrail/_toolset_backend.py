"""What a port (and a :class:`~sandrail.Toolset`) reads from the backend it
is given, each in one place: the label its results name
(:func:`label_of`), the words its tool descriptions say the sandbox in
(:func:`sandbox_description_of`), whether the sandboxes it creates may
reach the internet (:func:`internet_access_of`), and a
:class:`~sandrail.interpreters.replay.Recorder` it may attach (one port a
Recorder, so one tool group)."""

from __future__ import annotations

from typing import Any

from sandrail.core import (
    DEFAULT_SANDBOX_DESCRIPTION,
    check_backend_label,
    check_sandbox_description,
)

_MISSING: Any = object()


def _stated(backend: object, name: str) -> Any:
    """The backend's attribute ``name``; ``_MISSING`` when it has none, or
    when reading it fails (such a backend states nothing: its port still
    works, and answers every call with a result)."""
    try:
        return getattr(backend, name, _MISSING)
    except Exception:
        return _MISSING


def label_of(backend: object) -> str | None:
    """The backend's ``backend_label``, checked
    (:func:`~sandrail.core.check_backend_label`: a label longer than the
    results are sized for is refused here, when the port is made); ``None``
    for a backend that states none (no attribute, or ``None``)."""
    label = _stated(backend, "backend_label")
    if label is _MISSING or label is None:
        return None
    return check_backend_label(label)


def sandbox_description_of(backend: object) -> str:
    """The backend's ``sandbox_description`` (where the session's commands
    run, in the words every tool description ends with), checked
    (:func:`~sandrail.core.check_sandbox_description`);
    :data:`~sandrail.core.DEFAULT_SANDBOX_DESCRIPTION` for a backend that
    states none."""
    description = _stated(backend, "sandbox_description")
    if description is _MISSING or description is None:
        return DEFAULT_SANDBOX_DESCRIPTION
    return check_sandbox_description(description)


def internet_access_of(backend: object, given: bool | None) -> bool:
    """Whether the sandboxes of a port on ``backend`` may reach the
    internet, as ``sandbox_status`` reports it: what the backend creates
    them with when it states it (its ``allow_internet_access``), else the
    port's ``allow_internet_access`` (``given``; ``None``: not given, so
    ``False``). ``ValueError`` when both are stated and disagree (the
    report would not be what the sandbox has); ``TypeError`` unless each
    is a bool."""
    if given is not None and not isinstance(given, bool):
        raise TypeError("allow_internet_access must be a bool")
    stated = _stated(backend, "allow_internet_access")
    if stated is _MISSING or stated is None:
        return bool(given)
    if not isinstance(stated, bool):
        raise TypeError(
            f"a backend's allow_internet_access must be a bool, got {type(stated).__name__}"
        )
    if given is not None and given is not stated:
        raise ValueError(
            f"allow_internet_access={given} disagrees with the backend, which creates its "
            f"sandboxes with allow_internet_access={stated}: set it on the backend (or leave "
            "it out here, and the port reports the backend's)"
        )
    return stated


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
