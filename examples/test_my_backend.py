"""Test your backend: prove an interpreter keeps sandrail's contract.

A backend is any callable from a sandbox effect to its outcome (``E2BBackend``,
a Docker or Modal backend, a company proxy in front of E2B). The conformance
kit runs the conformance scenarios and a small fault campaign against it; it
needs a :class:`~sandrail.testing.Target`: the backend and its world's ground
truth (how many times each task really launched, which processes live).

Here the "third-party" backend is a proxy in front of the simulator (which
plays the world and knows its truth). Run it with
``pytest examples/test_my_backend.py`` (``pip install 'sandrail[testing]'``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sandrail.core import Delivery, Effect, EffectFailure
from sandrail.testing import (
    SCRIPTS,
    BackendConformance,
    Simulator,
    Strike,
    Target,
    check_backend,
)

# -- the backend under test (your code) ---------------------------------------------------


class MeteredProxy:
    """A proxy in front of another backend that counts what passes through."""

    def __init__(self, upstream: Any) -> None:
        self.upstream = upstream
        self.seen: Counter[str] = Counter()

    def __call__(self, effect: Effect) -> Any:
        self.seen[type(effect).__name__] += 1
        return self.upstream(effect)


class ForgivingProxy(MeteredProxy):
    """A proxy with a classic bug: it reports every upstream failure as
    "not delivered", even when the request did reach the sandbox."""

    def __call__(self, effect: Effect) -> Any:
        try:
            return super().__call__(effect)
        except EffectFailure as failure:
            raise EffectFailure(Delivery.NOT_SENT, failure.detail) from None


def target(strike: Strike, proxy: type[MeteredProxy] = MeteredProxy) -> Target:
    """A fresh world: the proxy in front of a simulator that plays the kit's
    commands, with the simulator as the ground truth and world controls.
    ``strike`` puts the kit's faults between the proxy and its upstream, as
    a network would, so the proxy's own failure handling meets them."""
    world = Simulator(scripts=SCRIPTS)
    return Target(
        backend=proxy(strike(world)),
        truth=world,
        kill_sandbox=world.kill_sandbox,
        wipe_ledger=world.wipe_ledger,
        advance=world.advance,
    )


# -- its tests ---------------------------------------------------------------------------


class TestMeteredProxy(BackendConformance):
    """Every conformance scenario and the fault campaign, as pytest tests."""

    def make_target(self, strike: Strike) -> Target:
        return target(strike)


def test_the_kit_catches_a_proxy_that_hides_delivered_requests() -> None:
    report = check_backend(lambda strike: target(strike, ForgivingProxy), scenarios=False, plans=40)
    assert not report.passed
    broken = {violation.line for failure in report.failures for violation in failure.violations}
    assert "C6" in broken  # "error, nothing ran", although the request reached the sandbox
    print(report.summary())
