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

import uuid
from collections.abc import Generator, Iterator
from types import MappingProxyType
from typing import Any
from unittest import mock

import attrs
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
from sandrail.interpreters.e2b import E2BBackend
from sandrail.interpreters.simulator import NOT_EMULATED, FaultPlan, Simulator
from sandrail.local_e2b import LocalE2B
from sandrail.testing._plans import launch_workload, single_fault_plans
from tests import test_definitions, test_tools
from tests.e2b_world import needs_root, server_fixture
from tests.embed_rig import toolset

server = server_fixture()

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
                "path": {
                    "type": "string",
                    "pattern": PATH_PATTERN,
                    "maxLength": 1024,
                    "description": "The file's absolute path: letters, digits and ._/- only.",
                },
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
        # A fresh mode: the staged file is the launcher's, read-only, and a
        # copy that kept its mode could never be written again.
        command=f"cp --no-preserve=mode -- {staged} {call.snap.arguments['path']}",
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


def test_its_schema_is_held_to_every_tools_rules() -> None:
    test_definitions.check_schema(write_file_definition(300))


def test_c3_a_second_write_to_the_same_path_under_another_key_replaces_the_file() -> None:
    """The copy takes a fresh mode, so the file it made can be written
    again (a copy that kept the staged file's read-only mode could not)."""
    sim = Simulator()
    tools = toolset(sim)
    results = [
        tools.call_sync(
            "write_file", {"path": "/tmp/out.txt", "content": text}, call_id=key, operation_key=key
        )
        for key, text in (("op-1", "one"), ("op-2", "two"))
    ]
    assert [result.content["exit_code"] for result in results] == [0, 0]
    sandbox_id = results[0].content["sandbox_id"]
    assert sim.files(sandbox_id)["/tmp/out.txt"].source == "two"


def _keeping_mode(call: CallState, task_id: str, timeout_seconds: int) -> Launch:
    """The plan with a plain ``cp``, which keeps the staged file's mode."""
    launch = _write(call, task_id, timeout_seconds)
    return launch._replace(command=launch.command.replace("cp --no-preserve=mode --", "cp --"))


def _writes_twice(backend: Any, record: ToolRecord) -> tuple[list[int], str]:
    """Two writes of one new path under two keys, through ``record``: their
    exit codes, and what the file holds then."""
    path = f"/tmp/twice-{uuid.uuid4().hex[:8]}.txt"
    with mock.patch.dict(_RECORDS, {record.name: record}):
        _command_definitions.cache_clear()
        tools = toolset(backend)
        codes = [
            tools.call_sync(
                "write_file",
                {"path": path, "content": text},
                call_id=f"c-{path}-{text}",
                operation_key=f"op-{path}-{text}",
            ).content["exit_code"]
            for text in ("one", "two")
        ]
        shown = tools.call_sync(
            "run_command",
            {"command": f"cat {path}"},
            call_id=f"c-{path}",
            operation_key=f"op-{path}",
        ).content["stdout"]
    return codes, shown


_KEEPING_MODE = attrs.evolve(WRITE_FILE, program=lambda call: launch_program(call, _keeping_mode))


@needs_root
@pytest.mark.parametrize(
    ("record", "codes", "holds"),
    [(WRITE_FILE, [0, 0], "two"), (_KEEPING_MODE, [0, 1], "one")],
    ids=["fresh mode", "kept mode"],
)
def test_the_simulators_copy_is_a_real_shells(
    server: LocalE2B, record: ToolRecord, codes: list[int], holds: str
) -> None:
    """Both writes on the simulator and on local-e2b's real shell, under
    the launcher: the same exit codes and the same file (a plain ``cp`` of
    the read-only staged file leaves a copy no later write can replace)."""
    simulated = _writes_twice(Simulator(), record)
    with E2BBackend(**server.sdk_options) as backend:
        real = _writes_twice(backend, record)
    assert simulated == real == (codes, holds)


_FILE_COMMANDS = [
    # A copy onto itself: GNU cp refuses it, exit 1.
    ["cp {path} {path}", "cat {path}"],
    # A comment: the shell drops it, and cat prints the file.
    ["cat {path} #a comment"],
    # One file spelled another way (a "." step, a doubled "/", relative to
    # the command's folder, /home/user).
    ["cat /home/user/./{name}"],
    ["cat //home/user/{name}"],
    ["cat {name}"],
    # Into a directory, or a directory named as a file.
    ["cp {path} /tmp", "cat /tmp/{name}"],
    ["cp {path} {path}.d/"],
    ["cat /home/user"],
    # The forms it emulates, for the same answers.
    ["cp {path} {path}.copy", "cat {path}.copy {path}"],
    ["cat -- {path} /nowhere"],
]


def _file_commands(backend: Any, commands: list[str]) -> list[tuple[int, str, bool]]:
    """``commands`` run one by one after ``write_file`` made a fresh file in
    /home/user: each one's exit code, stdout, and whether it said it was not
    emulated."""
    name = f"fid-{uuid.uuid4().hex[:8]}.txt"
    path = f"/home/user/{name}"
    tools = toolset(backend)
    written = tools.call_sync(
        "write_file", {"path": path, "content": "one\n"}, call_id=path, operation_key=path
    )
    assert written.content["exit_code"] == 0
    answers = []
    for n, command in enumerate(commands):
        content = tools.call_sync(
            "run_command",
            {"command": command.format(path=path, name=name)},
            call_id=f"{path}-{n}",
            operation_key=f"{path}-{n}",
        ).content
        answers.append((content["exit_code"], content["stdout"], content["stderr"] == NOT_EMULATED))
        if answers[-1][2]:
            break  # the simulator's files no longer follow the real ones
    return answers


@needs_root
@pytest.mark.parametrize("commands", _FILE_COMMANDS, ids=lambda commands: commands[0])
def test_the_simulators_cp_and_cat_answer_as_a_real_shell_or_say_not_emulated(
    server: LocalE2B, commands: list[str]
) -> None:
    """Each command on the simulator answers what local-e2b's real shell
    answers (its exit code and output), or says it is not emulated: never a
    wrong answer as ``ok``. The simulator's files follow the real ones only
    up to a command it did not emulate, so the comparison ends there."""
    simulated = _file_commands(Simulator(), commands)
    with E2BBackend(**server.sdk_options) as backend:
        real = _file_commands(backend, commands)
    assert not any(not_emulated for *_, not_emulated in real)
    *agreed, last = simulated
    assert agreed == real[: len(agreed)]
    assert last == real[len(agreed)] or last[2], (last, real[len(agreed)])


def test_a_derived_workload_is_made_only_for_a_launch_its_owner_is_offered() -> None:
    with pytest.raises(ValueError, match="launches nothing"):
        launch_workload(tool_record("sandbox_status"), "agent")
    with pytest.raises(ValueError, match="launches nothing"):
        launch_workload(tool_record("run_code"), "agent")  # a native owner's code tool
    (launch, *_, conflict) = launch_workload(tool_record("run_code"), "native").steps
    assert launch.port == conflict.port == "code"
    assert conflict.arguments == {**launch.arguments, "timeout": 1}
