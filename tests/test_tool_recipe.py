"""A tool added the way the development page says: one module, one row.

The first half of this file is the whole of what a new launching tool's
module in ``core/`` holds (a toy ``write_file``: the content staged as its
task's file, then copied to ``path``), written only with the building blocks
the core gives such a module. The tests put its record in the table for their
length, as the campaign's mutants swap a record, and check that the rest of
the library reads it from there and nowhere else: every ``Toolset`` offers it,
the launch spine runs it at most once per operation key, and the fault
campaign calls it (a workload derived from the record) and finds nothing
wrong under each single fault.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from types import MappingProxyType
from typing import Any
from unittest import mock

import pytest

from sandrail._campaign import run_workload, workloads
from sandrail._campaign._runner import slots_of
from sandrail._port import _command_definitions
from sandrail.core import (
    STAGING_DIRECTORY,
    ToolKind,
    ToolRecord,
    ToolSet,
    command_tool_definitions,
    tool_record,
)
from sandrail.core._call import CallState
from sandrail.core._contents import REPEAT_LAUNCH, launch_shapes
from sandrail.core._definitions import (
    CALL_SLACK_MS,
    DEFAULT_SANDBOX_DESCRIPTION,
    PERMISSION_EXECUTE,
    UNICODE_RULE,
    ToolDefinition,
    mutating_definition,
    object_schema,
    seconds_schema,
    where_it_runs,
)
from sandrail.core._effects import Effect
from sandrail.core._launch import Launch, launch_program
from sandrail.core._results import ToolResult
from sandrail.core._rules import snippet_deadline
from sandrail.core._tools import _RECORDS
from sandrail.interpreters.simulator import FaultPlan, Simulator
from sandrail.testing._plans import single_fault_plans
from tests import test_tools
from tests.embed_rig import toolset

# --- the tool's module -----------------------------------------------------

PATH_PATTERN = r"^/[A-Za-z0-9._/-]+$"
"""A path one shell word long, never an option: the only free value that
enters the command."""


def write_file_definition(
    limit: int, sandbox: str = DEFAULT_SANDBOX_DESCRIPTION, /
) -> ToolDefinition:
    return mutating_definition(
        "write_file",
        "Write a text file in this session's sandbox, replacing any file at that path. "
        "An uncertain outcome is never written a second time: call again with the same "
        "operation key to reconcile." + where_it_runs(sandbox),
        object_schema(
            {
                "path": {"type": "string", "pattern": PATH_PATTERN, "maxLength": 1024},
                "content": {"type": "string", "description": f"The text ({UNICODE_RULE})."},
                "timeout": seconds_schema(f"Seconds the write may take; null means {limit}."),
            },
            ["path", "content"],
        ),
        limit * 1000 + CALL_SLACK_MS,
        permission=PERMISSION_EXECUTE,
    )


def _write(call: CallState, task_id: str, timeout_seconds: int) -> Launch:
    staged = f"{STAGING_DIRECTORY}{task_id}.txt"
    return Launch(
        task_id=task_id,
        command=f"cp -- {staged} {call.snap.arguments['path']}",
        background=False,
        timeout_seconds=timeout_seconds,
        path=staged,
        source=call.snap.arguments["content"],
    )


def write_file_program(call: CallState) -> Generator[Effect, Any, ToolResult]:
    return launch_program(call, _write)


WRITE_FILE = ToolRecord(
    name="write_file",
    kind=ToolKind.LAUNCHES,
    tool_set=ToolSet.COMMAND,
    define=write_file_definition,
    program=write_file_program,
    result_shapes=launch_shapes(language=None),
    uncertain_instruction=REPEAT_LAUNCH,
    uncertain_points_to_read=True,
    refusal=None,
    own_code_rules=(),
    digest_defaults=MappingProxyType({"timeout": None}),
    deadline=snippet_deadline,
    deadline_arguments=frozenset({"timeout"}),
    strict_conversion=None,
    example_arguments=MappingProxyType({"path": "/tmp/out.txt", "content": "one"}),
)

# --- its row, for the tests' length ------------------------------------------


@pytest.fixture(autouse=True)
def _in_the_table() -> Iterator[None]:
    # Ports share the tool sets they make per settings (a cache): made with
    # the row in, they must not outlive it, nor those made before it.
    _command_definitions.cache_clear()
    try:
        with mock.patch.dict(_RECORDS, {WRITE_FILE.name: WRITE_FILE}):
            yield
    finally:
        _command_definitions.cache_clear()


def test_c2_a_tool_written_in_one_module_launches_once_per_operation_key() -> None:
    sim = Simulator()
    tools = toolset(sim)
    assert "write_file" in tools.names
    arguments = {"path": "/tmp/out.txt", "content": "hello; rm -rf /"}
    first = tools.call_sync("write_file", arguments, call_id="c1", operation_key="op-1")
    again = tools.call_sync("write_file", arguments, call_id="c2", operation_key="op-1")
    other = tools.call_sync(
        "write_file", {**arguments, "content": "two"}, call_id="c3", operation_key="op-1"
    )
    assert first.status == "ok", first
    assert again.content["deduplicated"] is True
    assert other.content["error_type"] == "e2b_command_operation_conflict"
    (task_id,) = sim.launches
    assert sim.launches[task_id] == 1
    sandbox_id = first.content["sandbox_id"]
    staged = f"{STAGING_DIRECTORY}{task_id}.txt"
    assert sim.files(sandbox_id)[staged].source == "hello; rm -rf /"
    assert sim.files(sandbox_id)["/tmp/out.txt"].source == "hello; rm -rf /"
    assert first.content["exit_code"] == 0
    shown = tools.call_sync(
        "run_command", {"command": "cat /tmp/out.txt"}, call_id="c4", operation_key="op-2"
    )
    assert shown.content["stdout"] == "hello; rm -rf /"


def test_c2_c3_the_campaign_derives_a_workload_for_it_and_finds_nothing_wrong() -> None:
    (derived,) = [w for w in workloads("agent") if w.name == "write_file"]
    assert [step.label for step in derived.steps] == [
        "launch",
        "retry",
        "held requests arrive",
        "conflict",
    ]
    assert run_workload(derived, FaultPlan(())).violations == ()
    plans = list(single_fault_plans({"Start": 1, "Publish": 1}))
    assert plans
    for plan in plans:
        assert run_workload(derived, plan).violations == (), plan
    assert set(slots_of(derived)) >= {"Ensure", "Publish", "Start"}


def test_its_record_is_the_one_the_core_reads() -> None:
    assert tool_record("write_file") is WRITE_FILE
    names = [d.name for d in command_tool_definitions()]
    assert names[-1] == "write_file"


def test_c16_its_free_text_never_enters_its_shell_text() -> None:
    """The check every launching tool of the table passes, run with this
    one in it: ``content`` travels as the staged file, and the path, the one
    value in the command, is pinned by the schema."""
    test_tools.test_c16_a_launchs_free_text_never_enters_its_shell_text_but_as_the_command_itself()
