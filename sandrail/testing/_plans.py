"""What the fault campaign and the conformance kit run: workloads (short
call sequences per tool and owner mode), the single-fault plans over them,
and seeded random schedules.

Everything here is a plain frozen value, so a failing plan prints as code
that can be pasted into a regression test.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import attrs

from sandrail.core import TOOLS, ToolKind, ToolRecord, ToolSet
from sandrail.interpreters.simulator import FAULT_TABLE, Fault, FaultKind, FaultPlan

from ._calls import Mode, code_tool
from ._commands import BUILD, BUILD_TOKEN, SECRET, SERVE, SERVE_TOKEN

__all__ = [
    "Schedule",
    "Step",
    "Workload",
    "launch_workload",
    "random_schedule",
    "schedule_from",
    "single_fault_plans",
    "workloads",
]

Action = Literal["call", "deliver", "restart", "advance", "concurrent", "wipe"]
PortName = Literal["command", "code", "foreign"]

OVERSIZED_CALL_ID = "call-" + "x" * 1_600
"""A call id whose locator alone is over the campaign budget (C14)."""


def _frozen_mapping(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return dict(value)


@attrs.frozen(kw_only=True)
class Step:
    """One action: a call (``tool`` with ``arguments`` under ``key`` on
    ``port``), or a world event (deliver held requests, restart the harness,
    let time pass, two concurrent duplicates of a call, a command deleting
    the session sandbox's ledger of claims).

    ``task_of``: read/stop target the task of this key in session-1.
    """

    action: Action = "call"
    label: str = ""
    port: PortName = "command"
    tool: str = ""
    arguments: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping)
    key: str = ""
    task_of: str | None = None
    fence: int = 1
    call_id: str | None = None
    seconds: float = 0.0
    follow: bool = False
    """read_command_output: start at the cursors the last read of the task
    returned (paging through its output)."""


@attrs.frozen(kw_only=True)
class Workload:
    name: str
    mode: Mode
    steps: tuple[Step, ...]


@attrs.frozen(kw_only=True)
class Schedule:
    """A random multi-fault schedule: a workload, its faults, and the effect
    numbers before which held requests arrive."""

    seed: int
    mode: Mode
    steps: tuple[Step, ...]
    plan: FaultPlan
    deliver_at: frozenset[int] = frozenset()


def _run(tool: str, arguments: Mapping[str, Any], key: str, label: str, **kw: Any) -> Step:
    return Step(label=label, tool=tool, arguments=arguments, key=key, **kw)


def workloads(mode: Mode) -> tuple[Workload, ...]:
    """The workloads of one owner mode: each makes a call, retries it with
    the same key (reconciliation), lets held requests arrive, then probes the
    contract lines that need a second call. The tools have workloads written
    for them; a launching tool that has none gets :func:`launch_workload`."""
    found = _written_workloads(mode)
    called = {step.tool for workload in found for step in workload.steps}
    found.extend(
        launch_workload(record, mode)
        for record in TOOLS.values()
        if record.kind is ToolKind.LAUNCHES
        and record.name not in called
        and _offered(record, mode) is not None
    )
    return tuple(found)


def _offered(record: ToolRecord, mode: Mode) -> PortName | None:
    """The campaign port that offers ``record``'s tool to an owner of
    ``mode``, or ``None`` when no port of that mode does."""
    if record.tool_set is ToolSet.COMMAND:
        return "command"
    wanted = ToolSet.AGENT_CODE if mode == "agent" else ToolSet.NATIVE_CODE
    return "code" if record.tool_set is wanted else None


def launch_workload(record: ToolRecord, mode: Mode) -> Workload:
    """The workload of a launching tool no written workload calls: its
    record's ``example_arguments`` launched, retried under the same key,
    held requests delivered, then the same key with another deadline (a
    conflict, C3: every launch has a deadline argument, ``null`` in its
    digest, so a deadline of 1 second, or 2 where the example says 1, is
    another call)."""
    port = _offered(record, mode)
    if record.kind is not ToolKind.LAUNCHES or port is None:
        raise ValueError(f"{record.name} launches nothing an owner of {mode!r} is offered")
    example = dict(record.example_arguments)
    deadline = (
        "timeout" if "timeout" in record.deadline_arguments else min(record.deadline_arguments)
    )
    other = {**example, deadline: 2 if example.get(deadline) == 1 else 1}
    key = f"op-{record.name}"
    return Workload(
        name=record.name,
        mode=mode,
        steps=(
            _run(record.name, example, key, "launch", port=port),
            _run(record.name, example, key, "retry", port=port),
            Step(action="deliver", label="held requests arrive"),
            _run(record.name, other, key, "conflict", port=port),
        ),
    )


def _written_workloads(mode: Mode) -> list[Workload]:
    snippet_tool = code_tool(mode)
    foreground = {"command": BUILD_TOKEN, "timeout": 30, "env": {"API_TOKEN": SECRET}}
    background = {
        "command": SERVE_TOKEN,
        "background": True,
        "background_timeout": 60,
        "env": {"API_TOKEN": SECRET},
    }
    deliver = Step(action="deliver", label="held requests arrive")
    found: list[Workload] = [
        Workload(
            name="run_command foreground",
            mode=mode,
            steps=(
                _run("run_command", foreground, "op-fg", "launch"),
                _run("run_command", foreground, "op-fg", "retry"),
                deliver,
                _run("run_command", {"command": "echo other"}, "op-fg", "conflict"),
                _run(
                    "run_command",
                    {"command": "echo big"},
                    "op-big",
                    "oversized identity",
                    call_id=OVERSIZED_CALL_ID,
                ),
            ),
        ),
        Workload(
            name="run_command background",
            mode=mode,
            steps=(
                _run("run_command", background, "op-bg", "launch"),
                _run("run_command", background, "op-bg", "retry"),
                deliver,
                _run(
                    "read_command_output",
                    {"wait_seconds": 1},
                    "op-read",
                    "read",
                    task_of="op-bg",
                ),
                # Small pages: the env value the command printed straddles
                # them; no page and no two pages together may show it (C17).
                *(
                    _run(
                        "read_command_output",
                        {"max_bytes": 12},
                        f"op-page-{n}",
                        f"page {n}",
                        task_of="op-bg",
                        follow=n > 1,
                    )
                    for n in range(1, 5)
                ),
                _run("stop_command", {}, "op-stop", "stop", task_of="op-bg"),
                _run("stop_command", {}, "op-stop", "retry", task_of="op-bg"),
                _run(
                    "read_command_output",
                    {},
                    "op-peek",
                    "another session reads",
                    task_of="op-bg",
                    port="foreign",
                ),
            ),
        ),
        Workload(
            name="sandbox_status",
            mode=mode,
            steps=(
                _run("sandbox_status", {}, "op-status", "status"),
                _run("sandbox_status", {}, "op-status", "retry"),
            ),
        ),
        Workload(
            name=snippet_tool,
            mode=mode,
            steps=(
                _run(snippet_tool, {"code": "print(1)"}, "op-code", "launch", port="code"),
                _run(snippet_tool, {"code": "print(1)"}, "op-code", "retry", port="code"),
                deliver,
                _run(snippet_tool, {"code": "print(2)"}, "op-code", "conflict", port="code"),
            ),
        ),
    ]
    if mode == "agent":
        # A start held in the network, its retry, then a command deletes the
        # ledger before the held start arrives: the late start must not
        # launch again (C2), and the next retry cannot tell (uncertain).
        found.append(
            Workload(
                name="ledger wiped",
                mode=mode,
                steps=(
                    _run("run_command", {"command": "echo once"}, "op-wipe", "launch"),
                    _run("run_command", {"command": "echo once"}, "op-wipe", "retry"),
                    Step(action="wipe", label="a command deletes the ledger"),
                    deliver,
                    _run("run_command", {"command": "echo once"}, "op-wipe", "after the wipe"),
                ),
            )
        )
    if mode == "native":
        found.append(
            Workload(
                name="fences",
                mode=mode,
                steps=(
                    _run("run_command", {"command": "echo n"}, "op-f1", "fence 2", fence=2),
                    _run("run_command", {"command": "echo n1"}, "op-f2", "fence 3", fence=3),
                    _run("run_command", {"command": "echo n"}, "op-f3", "stale fence 2", fence=2),
                    _run("run_command", {"command": "echo n"}, "op-f3", "retry", fence=2),
                ),
            )
        )
    return found


def single_fault_plans(slots: Mapping[str, int]) -> Iterator[FaultPlan]:
    """Every plan with one fault: each ``(effect, occurrence)`` slot of a
    dry run x every fault kind x before/after."""
    for effect, count in slots.items():
        for occurrence in range(count):
            for kind in FaultKind:
                for when in ("before", "after"):
                    yield FaultPlan(
                        (Fault(effect=effect, occurrence=occurrence, kind=kind, when=when),)
                    )


_KEYS = ("op-a", "op-b", "op-c")
_BURST_EFFECTS = ("Ensure", "Start", "Start", "Wait", "Read", "Publish", "Cancel", "Inspect")
_CONCURRENT_SAFE = tuple(kind for kind, row in FAULT_TABLE.items() if row.concurrent_safe)


def random_schedule(seed: int, index: int) -> Schedule:
    """Schedule ``index`` of campaign ``seed``: the same pair gives the same
    schedule (see :func:`schedule_from`)."""
    return schedule_from(random.Random(f"sandrail-campaign:{seed}:{index}"), seed=seed)


def schedule_from(rng: random.Random, *, seed: int = 0) -> Schedule:
    """A schedule drawn from ``rng``: bursts of faults on consecutive
    occurrences of a few effects (they heal where each burst ends), harness
    restarts, concurrent duplicates, late deliveries and, for a native owner,
    fence changes between two holders (N, then N+1, then a stale N).
    ``rng`` may be a hypothesis-controlled random (``st.randoms()``), so a
    failing schedule shrinks."""
    mode: Mode = rng.choice(("agent", "native"))
    steps = _random_steps(rng, mode)
    concurrent = any(step.action == "concurrent" for step in steps)
    plan = _random_faults(rng, concurrent)
    deliver_at = frozenset(rng.sample(range(1, 60), rng.randint(0, 3)))
    return Schedule(seed=seed, mode=mode, steps=tuple(steps), plan=plan, deliver_at=deliver_at)


def _random_steps(rng: random.Random, mode: Mode) -> list[Step]:
    """6 to 16 steps: calls of every tool, restarts, late deliveries, time,
    ledger wipes, concurrent duplicates, fence changes (native only)."""
    snippet_tool = code_tool(mode)
    fence = 2
    steps: list[Step] = []
    for number in range(rng.randint(6, 16)):
        key = rng.choice(_KEYS)
        roll = rng.random()
        label = f"step {number + 1}"
        if roll < 0.22:
            command = rng.choice((BUILD, "echo hi"))
            args: dict[str, Any] = {"command": command, "timeout": 30}
            if rng.random() < 0.3:
                args["env"] = {"API_TOKEN": SECRET}
            steps.append(_run("run_command", args, key, label, fence=fence))
        elif roll < 0.34:
            args = {"command": SERVE, "background": True, "background_timeout": 60}
            steps.append(_run("run_command", args, key, label, fence=fence))
        elif roll < 0.44:
            code = rng.choice(("print(1)", "print(2)"))
            steps.append(_run(snippet_tool, {"code": code}, key, label, port="code", fence=fence))
        elif roll < 0.52:
            args = {"wait_seconds": rng.choice((0, 1, 5))}
            steps.append(
                _run("read_command_output", args, f"read-{number}", label, task_of=key, fence=fence)
            )
        elif roll < 0.57:
            steps.append(
                _run("stop_command", {}, f"stop-{number}", label, task_of=key, fence=fence)
            )
        elif roll < 0.61:
            steps.append(_run("sandbox_status", {}, f"status-{number}", label, fence=fence))
        elif roll < 0.68:
            steps.append(Step(action="restart", label=label))
        elif roll < 0.75:
            steps.append(Step(action="deliver", label=label))
        elif roll < 0.78:
            steps.append(Step(action="advance", label=label, seconds=rng.choice((1.0, 60.0))))
        elif roll < 0.80:
            steps.append(Step(action="wipe", label=label))
        elif roll < 0.90 or mode == "agent":
            command = rng.choice((BUILD, "echo hi"))
            steps.append(
                Step(
                    action="concurrent",
                    label=label,
                    tool="run_command",
                    arguments={"command": command, "timeout": 30},
                    key=key,
                    fence=fence,
                )
            )
        else:
            # Another holder takes over with fence N+1; the old one (N) tries again.
            args = {"command": "echo fenced"}
            steps.append(_run("run_command", args, f"fence-{number}", label, fence=fence + 1))
            steps.append(_run("run_command", args, f"stale-{number}", label, fence=fence))
            fence += 1
    return steps


def _random_faults(rng: random.Random, concurrent: bool) -> FaultPlan:
    """One to three bursts of faults on consecutive occurrences of an
    effect (only kinds safe with concurrent duplicates, if there are any)."""
    faults: dict[tuple[str, int], Fault] = {}
    for _ in range(rng.randint(1, 3)):
        effect = rng.choice(_BURST_EFFECTS)
        first = rng.randint(0, 5)
        for occurrence in range(first, first + rng.randint(1, 3)):
            kinds = _CONCURRENT_SAFE if concurrent else tuple(FaultKind)
            fault = Fault(
                effect=effect,
                occurrence=occurrence,
                kind=rng.choice(kinds),
                when=rng.choice(("before", "after")),
            )
            faults.setdefault((effect, occurrence), fault)
    return FaultPlan(tuple(faults.values()))
