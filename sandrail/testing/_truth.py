"""Ground truth: what really happened in a backend's world, for the judge.

A result can only be judged against facts the port never saw: whether a
command really launched (C2, C5, C7), whether its processes are really gone
(C18). A world that can answer these implements :class:`GroundTruth`; the
simulator does, and a backend author implements it for theirs (from a
server's own records, a container runtime's event log, ...).

A :class:`Target` bundles a backend with its truth and the world controls
the kit may use (kill a sandbox, wipe its ledger, let time pass); a factory
of targets is what the conformance kit takes (one fresh world per scenario
or plan).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, overload, runtime_checkable

import attrs

if TYPE_CHECKING:
    from sandrail.interpreters.launcher import Transport

__all__ = ["GroundTruth", "Strike", "Target", "TargetFactory", "takes_strike"]


@runtime_checkable
class GroundTruth(Protocol):
    """What really happened in a backend's world.

    - ``launches``: task id -> how many times a command really started under
      it, ever, in any sandbox of this world (a retry that finds the claim,
      or a start refused as a conflict or a stale fence, is no launch). The
      judge compares it before and after each sandbox effect to attribute
      launches to calls, so it must be up to date as soon as a ``Start``
      returns (or fails).
    - ``live_processes(task_id)``: processes of the task still alive now,
      its leader and everything in its process group (C18: a stop ends them
      all).

    Optional, used when present (the simulator has them):

    - ``applied``: a sequence of every sandbox effect the world really acted
      on, in order (appended as it acts); lets the judge see a request that
      reached the sandbox although the port got a failure for it (C6: an
      ``error`` after it is a lie) and a ``Start`` whose answer was lost (C10
      fence marks). Without it those checks see only what was answered,
      which can miss a violation but never reports a false one.
    """

    @property
    def launches(self) -> Mapping[str, int]:
        """How many times each task id really launched."""

    def live_processes(self, task_id: str) -> int:
        """How many processes of the task still live."""


@attrs.frozen(kw_only=True)
class Target:
    """A backend under test and the world it acts on.

    - ``backend``: the interpreter of sandbox effects (a callable from effect
      to outcome; ``asynchronous = True`` if it returns awaitables).
    - ``truth``: its :class:`GroundTruth`.
    - ``kill_sandbox(sandbox_id)``, ``wipe_ledger(sandbox_id)``: optional
      world controls that make the ``SANDBOX_DIES`` and ``LEDGER_WIPED``
      faults possible on this backend (kill the sandbox, as its provider
      would; delete its task claims, as a command could). Without them those
      fault kinds are skipped and the report says so.
    - ``advance(seconds)``: optional; lets time pass in a world with a
      virtual clock (a real world simply runs on).
    - ``close()``: release the world (stop servers, delete sandboxes); called
      once the kit is done with it, whatever happened.
    - ``real_processes``: whether commands really run (real bash): the
      scenarios then also check outputs only a real shell prints.
    """

    backend: Callable[[Any], Any]
    truth: GroundTruth
    kill_sandbox: Callable[[str], None] | None = None
    wipe_ledger: Callable[[str], None] | None = None
    advance: Callable[[float], None] | None = None
    close: Callable[[], None] = lambda: None
    real_processes: bool = False


class Strike(Protocol):
    """Given an interpreter, the same interpreter with the kit's faults struck
    on the way (the kit's "network"); given a launcher
    :class:`~sandrail.interpreters.launcher.Transport`, the same transport
    with them struck on the launcher's decisive calls (a
    :class:`~sandrail.testing.FaultyTransport`). A target wraps one upstream."""

    @overload
    def __call__(self, upstream: Transport, /) -> Transport: ...
    @overload
    def __call__(self, upstream: Callable[[Any], Any], /) -> Callable[[Any], Any]: ...


TargetFactory = Callable[[], Target] | Callable[[Strike], Target]
"""Makes a fresh :class:`Target` (a new world) each time it is called.

A factory without parameters gets the kit's faults struck in front of its
whole backend. A factory that takes one parameter, ``strike``, decides where
they strike: it wraps the interpreter its backend calls upstream (the world,
a sandbox provider's API) with ``strike(upstream)``, so that its own failure
handling meets them, as a proxy in front of E2B meets network faults."""


def takes_strike(factory: Callable[..., Any]) -> bool:
    """Whether a target factory takes the ``strike`` parameter: a required
    positional parameter, or one named ``strike`` even with a default (a
    ``make_target(strike=None)`` is given the kit's faults where its backend
    meets its world, not only in front of the whole backend)."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        and (p.default is p.empty or p.name == "strike")
        for p in parameters
    )
