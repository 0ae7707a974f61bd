"""sandrail.testing: the contract as a kit for harness and backend authors
(``docs/howto/test-your-harness.md``).

For a harness author: a :class:`World` (the fault-injecting simulator, the
ports on it, a record of every call) and a judge that says which contract
line a run broke::

    from sandrail.testing import Fault, FaultKind, World

    def test_my_loop_survives_a_lost_start_answer() -> None:
        with World.simulated([Fault(effect="Start", kind=FaultKind.RESPONSE_LOST)]) as world:
            tools = world.toolset()                  # or world.command_tools(): ports
            result = my_agent_loop(tools)            # retries `uncertain` with the same key
            assert result.content["exit_code"] == 0
            assert world.launched_commands()["echo hi"] == 1   # whatever keys it used
            world.assert_contract()                  # every call, against ground truth

For a backend author: a :class:`Target` (the backend, its
:class:`GroundTruth`, the world controls it has; :class:`MarkedLaunches` counts
launches by marks the commands send, for a world that keeps no record of
them) and the conformance kit,
:class:`~sandrail.testing.conformance.BackendConformance` (a pytest base
class) or :func:`~sandrail.testing.conformance.check_backend`.

Hypothesis strategies live in :mod:`sandrail.testing.strategies` (they need
hypothesis: ``pip install 'sandrail[testing]'``); they are also reachable as
attributes of this package. Everything else here works without hypothesis.
"""

from __future__ import annotations

import importlib
from typing import Any

from sandrail.interpreters.simulator import (
    Chunk,
    Fault,
    FaultKind,
    FaultPlan,
    Script,
    SimulatedHarness,
    Simulator,
)

from ._calls import AGENT, SCOPE, SESSION, CallRecord, WatchedPort, native_identity
from ._commands import SCRIPTS, SECRET
from ._execute import run_schedule
from ._faults import TRANSIENT_KINDS, FaultyBackend
from ._judge import (
    CHECKS,
    CONTRACT_LINES,
    HARNESS_LINE,
    ContractViolationError,
    Violation,
    judge,
)
from ._marks import MarkedBackend, MarkedLaunches
from ._transport_faults import FaultyTransport, TransportCall
from ._transport_probe import ProbedTransport, check_transport, failure_table_problems
from ._truth import GroundTruth, Strike, Target, TargetFactory
from ._world import World
from ._world_ports import WatchedToolset
from .conformance import (
    BackendConformance,
    ConformanceReport,
    PlanFailure,
    check_backend,
    run_scenario,
    simulator_target,
)

__all__ = [
    "AGENT",
    "CHECKS",
    "CONTRACT_LINES",
    "HARNESS_LINE",
    "SCOPE",
    "SCRIPTS",
    "SECRET",
    "SESSION",
    "TRANSIENT_KINDS",
    "BackendConformance",
    "CallRecord",
    "Chunk",
    "ConformanceReport",
    "ContractViolationError",
    "Fault",
    "FaultKind",
    "FaultPlan",
    "FaultyBackend",
    "FaultyTransport",
    "GroundTruth",
    "MarkedBackend",
    "MarkedLaunches",
    "PlanFailure",
    "ProbedTransport",
    "Script",
    "SimulatedHarness",
    "Simulator",
    "Strike",
    "Target",
    "TargetFactory",
    "TransportCall",
    "Violation",
    "WatchedPort",
    "WatchedToolset",
    "World",
    "check_backend",
    "check_transport",
    "failure_table_problems",
    "judge",
    "native_identity",
    "run_scenario",
    "run_schedule",
    "simulator_target",
]


def __getattr__(name: str) -> Any:
    """Strategies by name (``sandrail.testing.fault_plans``), imported on
    first use so that the rest of the kit works without hypothesis."""
    if name.startswith("_") or name == "strategies":
        raise AttributeError(f"module 'sandrail.testing' has no attribute {name!r}")
    strategies = importlib.import_module("sandrail.testing.strategies")
    try:
        return getattr(strategies, name)
    except AttributeError:
        raise AttributeError(f"module 'sandrail.testing' has no attribute {name!r}") from None
