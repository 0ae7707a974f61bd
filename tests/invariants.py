"""What must hold after every call, judged against the simulator's ground truth.

Shared by the stateful test and the fuzz test; each check names its contract
line. A check returns nothing and raises AssertionError with a message that
says which line broke.
"""

from __future__ import annotations

from collections.abc import Mapping

from sandrail import ToolRequest, ToolResult
from sandrail.core import NativeIdentity, canonical_json
from sandrail.interpreters.simulator import Simulator

LAUNCH_TOOLS = frozenset({"run_command", "run_code", "sandbox_run_code"})


def check_at_most_one_launch(sim: Simulator) -> None:
    """C2: no task id ever launched twice."""
    twice = {task: n for task, n in sim.launches.items() if n > 1}
    assert not twice, f"C2 violated: tasks launched more than once: {twice}"


def check_budget(result: ToolResult, request: ToolRequest, max_output_bytes: int) -> None:
    """C12: within budget unless the runtime governs results."""
    if request.result_governance is None:
        size = len(canonical_json(result.content))
        assert size <= max_output_bytes, f"C12 violated: {size} > {max_output_bytes} bytes"


def expected_locator(request: ToolRequest) -> dict[str, object]:
    identity = request.identity
    assert identity is not None
    locator = identity.locator()
    locator.update(
        session_id=request.session_id,
        operation_key=request.operation_key,
        call_id=request.call.call_id,
    )
    return locator


def check_identity(result: ToolResult, request: ToolRequest) -> None:
    """C6, C13: uncertain results carry the full locator, byte-identical;
    ok results carry it too, byte-identical."""
    if result.status not in ("ok", "uncertain") or "operation_key" not in result.content:
        assert result.status != "uncertain" or "operation_key" in result.content, (
            f"C6 violated: uncertain without a locator: {dict(result.content)}"
        )
        return
    for key, value in expected_locator(request).items():
        assert key in result.content, f"C6/C13 violated: {key} missing from the locator"
        assert canonical_json(result.content[key]) == canonical_json(value), (
            f"C13 violated: {key} changed"
        )
    if result.status == "uncertain":
        assert "executed" not in result.content, "C6 violated: uncertain says executed"


def check_error_launched_nothing(
    result: ToolResult, task: str | None, before: Mapping[str, int], sim: Simulator
) -> None:
    """C5: an error launched nothing, even once held requests arrive. Call it
    after ``sim.deliver_held()``."""
    if result.status != "error":
        return
    assert result.content.get("executed") is False, "C5 violated: error without executed:false"
    if task is not None:
        assert sim.launches.get(task, 0) == before.get(task, 0), (
            f"C5 violated: error result but task {task[:12]}… launched"
        )


def check_ok_launch(result: ToolResult, request: ToolRequest, task: str, sim: Simulator) -> None:
    """C7: ok for a launch means exactly one launch happened."""
    if result.status == "ok" and request.call.name in LAUNCH_TOOLS:
        assert sim.launches.get(task, 0) == 1, (
            f"C7 violated: ok but {sim.launches.get(task, 0)} launches"
        )


def fence_of(request: ToolRequest) -> int | None:
    identity = request.identity
    return identity.execution_fence if isinstance(identity, NativeIdentity) else None
