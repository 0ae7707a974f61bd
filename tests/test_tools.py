"""One record per tool: the table is the one place that says what a tool is,
every reader of it fails loudly on a name it has no record of, and the
families and tool sets are what the records say."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import attrs
import pytest

import sandrail
from sandrail._options import given_options, port_settings
from sandrail.core import (
    CODE_TOOL_NAMES,
    COMMAND_TOOL_NAMES,
    LAUNCH_TOOLS,
    TOOL_NAMES,
    TOOLS,
    AgentOwner,
    PortSettings,
    Start,
    ToolKind,
    ToolRecord,
    ToolSet,
    UnknownToolError,
    admission_size,
    canonical_arguments,
    check_arguments,
    code_tool_definitions,
    command_tool_definitions,
    crash_result,
    launch_digest,
    launch_timeout,
    minimum_output_bytes,
    recorded_digest,
    same_call,
    tool_program,
    tool_record,
    tool_records,
)
from sandrail.core import _tools as tools
from sandrail.core._definitions import run_command_definition
from sandrail.core._snapshot import _Snapshot
from sandrail.interpreters._drivers import drive
from sandrail.interpreters.simulator import Simulator
from sandrail.testing import World, native_identity
from sandrail.testing._calls import tool_kind
from tests.embed_rig import toolset as a_toolset

OWNER = AgentOwner(agent_id="agent-1")


def _settings(*definitions: sandrail.ToolDefinition) -> PortSettings:
    return PortSettings(
        session_id="s",
        owner=OWNER,
        definitions=definitions or command_tool_definitions(),
        contract="test",
    )


def _copy_file() -> sandrail.ToolDefinition:
    """A definition of a tool the core has no record of (same schema as
    run_command, another name)."""
    return attrs.evolve(run_command_definition(300), name="copy_file")


def _snap(tool: str) -> _Snapshot:
    return _Snapshot(
        tool=tool,
        call_id="c",
        operation_key="k",
        session_id="s",
        identity=sandrail.AgentIdentity(agent_id="agent-1"),
        arguments={},
        digest="",
        governed=False,
    )


def test_every_name_and_family_is_derived_from_the_records() -> None:
    assert tuple(TOOLS) == TOOL_NAMES == COMMAND_TOOL_NAMES + CODE_TOOL_NAMES
    assert tuple(d.name for d in command_tool_definitions()) == COMMAND_TOOL_NAMES
    assert tuple(d.name for d in command_tool_definitions()) == tuple(
        name for name, record in TOOLS.items() if record.tool_set is ToolSet.COMMAND
    )
    assert code_tool_definitions()[0].name == "run_code"
    assert code_tool_definitions(agent_owner=True)[0].name == "sandbox_run_code"
    assert {name for name, r in TOOLS.items() if r.kind is ToolKind.LAUNCHES} == LAUNCH_TOOLS
    for name, record in TOOLS.items():
        assert record.name == name
        assert record.define(300).name == name
        # C3: a launch, and only a launch, has a deadline; what sets it is
        # left out by default in its digest (both checked by the record).
        launches = record.kind is ToolKind.LAUNCHES
        assert (record.deadline is not None) is launches
        assert bool(record.deadline_arguments) is launches
        assert record.deadline_arguments <= record.digest_defaults.keys()


def test_the_tools_are_exactly_these() -> None:
    """The one test that names every tool, on purpose: adding a tool is its
    record in the table and its line here; every other test derives the
    tools from the records."""
    launches, owned, inspects = ToolKind.LAUNCHES, ToolKind.OWNED_TASK, ToolKind.INSPECTS
    command, native, agent = ToolSet.COMMAND, ToolSet.NATIVE_CODE, ToolSet.AGENT_CODE
    execute, cancel, read = ("sandbox:execute",), ("sandbox:cancel",), "safe-read/v1"

    def facts(record: ToolRecord) -> tuple[object, ...]:
        d = record.define(300)  # the definition's metadata at the default foreground timeout
        metadata = (d.read_only, d.permissions, d.recovery_policy, d.background_command_policy)
        return (record.kind, record.tool_set, record.takes_env, *metadata, d.timeout_ms)

    # name: kind, tool set, takes env, read only, permissions, recovery policy,
    # background command policy, timeout in ms
    assert {name: facts(record) for name, record in TOOLS.items()} == {
        "sandbox_status": (inspects, command, False, True, (), read, None, 10_000),
        "run_command": (
            *(launches, command, True, False, execute, None),
            *("owned-command-launch/v1", 320_000),
        ),
        "read_command_output": (owned, command, False, True, (), read, None, 610_000),
        "stop_command": (owned, command, False, False, cancel, None, None, 10_000),
        "run_code": (launches, native, True, False, execute, None, None, 320_000),
        "sandbox_run_code": (launches, agent, True, False, execute, None, None, 320_000),
    }
    assert tuple(TOOLS) == (
        "sandbox_status",
        "run_command",
        "read_command_output",
        "stop_command",
        "run_code",
        "sandbox_run_code",
    )


def test_a_record_states_every_fact_and_checks_them() -> None:
    """No field has a default, and facts that contradict each other are
    refused when the record is made (a launch without a deadline, rules
    without the refusal that answers them, a definition of another tool)."""
    assert all(field.default is attrs.NOTHING for field in attrs.fields(type(TOOLS["run_command"])))
    run = TOOLS["run_command"]
    with pytest.raises(ValueError, match="only a launch, has a deadline"):
        attrs.evolve(run, deadline=None)
    with pytest.raises(ValueError, match="without the refusal"):
        attrs.evolve(run, refusal=None)
    with pytest.raises(ValueError, match="names another tool"):
        attrs.evolve(run, name="copy_file")


def test_c3_a_records_deadline_arguments_are_its_own_and_checked() -> None:
    """What settles a repeat (a deadline spelled as its default) is the
    record's: each launch names the arguments its deadline may read, among
    its own arguments, each left out by default in its digest, and its
    deadline reads one of them whatever the call; a record that says
    otherwise is refused when it is made."""
    settings = _settings()
    for name, record in TOOLS.items():
        if record.deadline is None:
            assert record.deadline_arguments == frozenset(), name
            continue
        properties = record.define(300).parameters["properties"]
        assert record.deadline_arguments <= properties.keys(), name
        for background in ({}, {"background": False}, {"background": True}):
            assert record.deadline(background, settings)[0] in record.deadline_arguments, name
    run = TOOLS["run_command"]
    assert run.deadline_arguments == {"timeout", "background_timeout"}
    with pytest.raises(ValueError, match="not its arguments"):
        attrs.evolve(run, deadline_arguments=frozenset())
    with pytest.raises(ValueError, match="not its arguments"):
        attrs.evolve(run, deadline_arguments=frozenset({"timeout", "wait_seconds"}))
    with pytest.raises(ValueError, match="digest default is not null"):
        attrs.evolve(run, deadline_arguments=frozenset({"timeout", "cwd", "background"}))
    with pytest.raises(ValueError, match="without a deadline"):
        attrs.evolve(TOOLS["stop_command"], deadline_arguments=frozenset({"task_id"}))


def test_c5_each_records_example_arguments_are_a_valid_call_of_it() -> None:
    """Every record gives a minimal valid call: its schema finds no problem
    with it and its own refusal lets it through, so a tool added without a
    valid example fails here (and without one at all, when its record is
    made)."""
    for name, record in TOOLS.items():
        definition = record.define(300)
        example = record.example_arguments
        assert check_arguments(definition, dict(example)) == (), name
        snap = attrs.evolve(_snap(name), arguments=dict(example))
        settings = _settings(definition)
        assert record.refusal is None or record.refusal(snap, settings) is None, name
    with pytest.raises(TypeError, match="example_arguments"):
        type(TOOLS["run_command"])(  # type: ignore[call-arg]
            **{
                field.name: getattr(TOOLS["run_command"], field.name)
                for field in attrs.fields(type(TOOLS["run_command"]))
                if field.init and field.name != "example_arguments"
            }
        )


def test_c3_launch_digest_fills_each_tools_own_defaults() -> None:
    assert launch_digest("run_command", {"command": "x"}) == launch_digest(
        "run_command", {"command": "x", "background": False, "env": {}}
    )
    assert launch_digest("run_code", {"code": "1"}) == launch_digest(
        "run_code", {"code": "1", "language": "py"}
    )
    assert launch_digest("read_command_output", {"task_id": "a"}) != launch_digest(
        "stop_command", {"task_id": "a"}
    )


@pytest.mark.parametrize("name", ["copy_file", "", "RUN_COMMAND", None, ["run_command"]])
def test_an_unknown_tool_fails_loudly_at_every_reader_of_the_table(name: Any) -> None:
    """Never a default: each place that asks what a tool is raises
    UnknownToolError (a LookupError) naming the known tools."""
    settings = _settings()
    readers: list[Callable[[], object]] = [
        lambda: tool_record(name),
        lambda: tool_records([attrs.evolve(run_command_definition(300), name="copy_file")]),
        lambda: launch_digest(name, {}),
        lambda: recorded_digest(name, {}),
        lambda: launch_timeout(name, {}, settings),
        lambda: same_call(name, {}, settings),
        lambda: minimum_output_bytes(settings, name),
        lambda: admission_size(_snap(name), settings),
    ]
    for reader in readers:
        with pytest.raises(
            UnknownToolError, match=r"sandrail has no tool record for .*run_command"
        ):
            reader()
    assert issubclass(UnknownToolError, LookupError)
    assert tool_kind(name) is None  # the testing kit: "refused as tool_unbound"


def test_an_unknown_tool_fails_loudly_in_validation_profiles_dispatch_and_ports() -> None:
    definition = _copy_file()
    with pytest.raises(UnknownToolError):
        check_arguments(definition, {"command": "x"})
    with pytest.raises(UnknownToolError):
        canonical_arguments(definition, "openai-strict", {"command": "x"})
    # A port's settings holding it: the program refuses to guess what it does.
    settings = _settings(definition)
    request = sandrail.ToolRequest(
        call=sandrail.ToolCall(name="copy_file", call_id="c", arguments={"command": "x"}),
        operation_key="k",
        session_id="s",
        definition=definition,
        identity=sandrail.AgentIdentity(agent_id="agent-1"),
    )
    with pytest.raises(UnknownToolError):
        drive(tool_program(request, settings), Simulator())
    with pytest.raises(UnknownToolError):
        crash_result(_snap("copy_file"), settings, dispatched=True, sandbox_id=None, task=None)
    # A port offering it is refused when it is made, not at its first call.
    options = given_options(
        {
            "backend": Simulator(),
            "session_id": "s",
            "owner": OWNER,
            "authorize": lambda request: sandrail.ALLOW,
            "assert_authority": lambda request: True,
        },
        "command_tools",
    )
    with pytest.raises(UnknownToolError):
        port_settings(options, "test", lambda limit, sandbox: (definition,))


def test_a_tool_the_port_does_not_offer_is_refused_and_the_judge_holds_it_to_that() -> None:
    """The testing kit's world and judge ask the table too: a call of a name
    with no record must have been refused as tool_unbound (it is), and an
    answer of any other kind is more than the kit can judge."""
    world = World.simulated()
    port = world.command_tools()
    request = world.request(port, "sandbox_status", {}, key="k1")
    result = port.execute_sync(
        attrs.evolve(request, call=attrs.evolve(request.call, name="copy_file"))
    )
    assert result.content["error_type"] == "e2b_command_tool_unbound"
    world.assert_contract()
    (record,) = world.calls
    assert record.launches is False
    record.result = attrs.evolve(result, content={**result.content, "error_type": "x"})
    with pytest.raises(UnknownToolError):
        record.launches  # noqa: B018


@contextlib.contextmanager
def _program_of(name: str, program: Any) -> Iterator[None]:
    record = attrs.evolve(TOOLS[name], program=program)
    with mock.patch.dict(tools._RECORDS, {name: record}):
        yield


def test_dispatch_runs_the_records_program_and_nothing_else() -> None:
    """Swapping a record's program swaps what the call runs: the dispatcher
    has no program of its own for any tool."""
    ran: list[str] = []

    def program(call: Any) -> Any:
        ran.append(call.snap.tool)
        result = sandrail.ToolResult(status="ok", content={"status": "ok", "ok": True})
        return (yield from call.finish(result))

    world = World.simulated()
    port = world.command_tools()
    with _program_of("sandbox_status", program):
        result = world.call(port, "sandbox_status", {}, key="k1")
    assert ran == ["sandbox_status"]
    assert result.content == {"status": "ok", "ok": True}


def test_launch_timeout_is_the_records_deadline_and_only_a_launch_has_one() -> None:
    settings = _settings()
    assert launch_timeout("run_command", {"command": "x"}, settings) == ("timeout", 300)
    background = {"command": "x", "background": True, "background_timeout": 90}
    assert launch_timeout("run_command", background, settings) == ("background_timeout", 90)
    assert launch_timeout("run_code", {"code": "1", "timeout": 900}, settings) == ("timeout", 300)
    with pytest.raises(ValueError, match="read_command_output launches nothing"):
        launch_timeout("read_command_output", {"task_id": "a" * 64}, settings)


_SHELL_MARK = "$(touch /tmp/sandrail-injected);`id`|x&y>z -rf"
"""Text a shell would read as more than one plain word, if it entered one."""


class _StartsSeen(Simulator):
    """The simulator, keeping the command of every ``Start`` it answers."""

    def __init__(self) -> None:
        super().__init__()
        self.commands: list[str] = []

    def __call__(self, effect: Any) -> Any:
        if isinstance(effect, Start):
            self.commands.append(effect.command)
        return super().__call__(effect)


def _types(spec: dict[str, Any]) -> list[Any]:
    kind = spec.get("type")
    return kind if isinstance(kind, list) else [kind]


def _free_strings(schema: dict[str, Any]) -> list[str]:
    """The string arguments of ``schema`` that take any text (no pattern,
    no enum): the model's free text."""
    return [
        name
        for name, spec in schema["properties"].items()
        if "string" in _types(spec)
        and "pattern" not in spec
        and "enum" not in spec
        and "const" not in spec
    ]


def test_c16_a_launchs_free_text_never_enters_its_shell_text_but_as_the_command_itself() -> None:
    """Each launching tool, called with shell syntax in every argument that
    takes free text, starts a command that holds none of it, unless that
    argument is the command itself (a shell-command tool): the model's
    free text travels as a staged file, and a value that enters shell text
    is one its schema pinned (``docs/development.md``, "Grow it")."""
    launching = {name for name, record in TOOLS.items() if record.kind is ToolKind.LAUNCHES}
    seen: set[str] = set()
    scope = {"tenant": "t1"}
    native = native_identity(scope=scope)
    owners: tuple[tuple[Any, dict[str, Any]], ...] = (
        (OWNER, {}),
        (sandrail.NativeOwner(scope=scope), {"identity": native}),
    )
    for owner, identity in owners:
        sim = _StartsSeen()
        toolset = a_toolset(sim, owner=owner, **identity)
        for name in sorted(launching & set(toolset.names)):
            record = TOOLS[name]
            definition = record.define(300)
            arguments = dict(record.example_arguments)
            for argument in _free_strings(definition.parameters):
                arguments[argument] = f"{argument}:{_SHELL_MARK}"
            assert check_arguments(definition, arguments) == (), name
            del sim.commands[:]
            toolset.call_sync(name, arguments, call_id=f"c-{name}", operation_key=f"k-{name}")
            assert sim.commands, f"{name} started nothing"
            for command in sim.commands:
                if command in arguments.values():
                    continue  # the argument is the command: running it is the tool
                assert _SHELL_MARK not in command, f"{name}'s free text entered: {command}"
            seen.add(name)
    assert seen == launching
