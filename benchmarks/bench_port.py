"""The port on the simulator: trivial foreground run_command calls per second,
and one foreground run with 16 MiB of output (time and peak memory).

Throughput runs the whole stack in one thread: validation, admission, policy,
every guard, the simulator, the budget. Its baseline is the simulator alone
answering the same sandbox effects (Ensure, Start, Wait, Read) without the
core, so the ratio is the price of the contract per call; one more row
skips argument validation (an ablation, to show its share), and the design
floor row drives a generator that only yields the call's twelve effects (the
harness ones answered at once), the most any port and core built on these
effects can reach. The 16 MiB runs
report the port's peak memory (tracemalloc, in a separate pass, since tracing
slows the code it measures) as a multiple of the output size. Python holds
text with any non-ASCII character at 2 bytes a character, so the UTF-8 case
starts from 2x for the text alone.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import time
import tracemalloc
from collections.abc import Generator
from typing import Any
from unittest import mock

import sandrail
from benchmarks._common import row
from sandrail.core import (
    ALL_WELL,
    Authorize,
    CheckAuthority,
    Ensure,
    Read,
    RememberOwned,
    ResolveOwned,
    Start,
    Wait,
    snapshot_request,
)
from sandrail.core import _programs as programs
from sandrail.interpreters._drivers import drive
from sandrail.interpreters.simulator import Script, Simulator

GOAL = (
    "port: ≥ 12,000 trivial foreground run_command calls/s on one core; "
    "16 MiB output: peak extra memory < 3× the output"
)

_MIB = 1 << 20


def _port(sim: Simulator, budget: int = 24_000) -> sandrail.ToolPort:
    return sandrail.command_tools(
        backend=sim,
        session_id="bench",
        owner=sandrail.AgentOwner(agent_id="agent"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        max_output_bytes=budget,
    )


def _requests(port: sandrail.ToolPort, command: str, count: int, tag: str) -> list[Any]:
    definition = port.definition("run_command")
    identity = sandrail.AgentIdentity(agent_id="agent")
    return [
        sandrail.ToolRequest(
            call=sandrail.ToolCall(
                name="run_command", call_id=f"c{i}", arguments={"command": command}
            ),
            operation_key=f"{tag}-{i}",
            session_id="bench",
            definition=definition,
            identity=identity,
        )
        for i in range(count)
    ]


def _port_rate(count: int, tag: str, *, validation: bool = True) -> float:
    sim = Simulator()
    port = _port(sim)
    requests = _requests(port, "true", count, tag)
    gc.collect()
    with contextlib.ExitStack() as stack:
        if not validation:
            # An ablation, not a mode: what argument validation costs per call.
            stack.enter_context(mock.patch.object(programs, "check_arguments", _valid))
        began = time.perf_counter()
        for request in requests:
            result = port.execute_sync(request)
        elapsed = time.perf_counter() - began
    if result.status != "ok":
        raise AssertionError(f"benchmark call failed: {result.content}")
    return count / elapsed


def _valid(definition: object, arguments: object) -> tuple[()]:
    return ()


def _sandbox_effects(sandbox_id: str, task: str) -> tuple[Start, Wait, Read]:
    """A trivial foreground run's Start, Wait and Read."""
    return (
        Start(
            sandbox_id=sandbox_id,
            task_id=task,
            request_digest="d",
            command="true",
            cwd=None,
            env=None,
            timeout_seconds=300,
        ),
        Wait(sandbox_id=sandbox_id, task_id=task, timeout_seconds=315),
        Read(
            sandbox_id=sandbox_id, task_id=task, stdout_cursor=0, stderr_cursor=0, max_bytes=2**24
        ),
    )


def _simulator_rate(count: int) -> float:
    sim = Simulator()
    began = time.perf_counter()
    for i in range(count):
        sandbox_id = sim(Ensure(session_id="bench", owner_key="o")).sandbox_id
        task = f"{i:064x}"
        start, wait, read = _sandbox_effects(sandbox_id, task)
        sim(start)
        sim(wait)
        sim(read)
    return count / (time.perf_counter() - began)


def _effects_only(request: Any, snapshot: Any) -> Generator[Any, Any, Any]:
    """The effects a trivial foreground call yields, in its order, with no
    work between them: what the design costs before the port and core do
    anything (the guard's effect made once, as the core makes it)."""
    check = CheckAuthority(request_digest=snapshot.digest)
    task = hashlib.sha256(request.operation_key.encode()).hexdigest()
    yield Authorize(tool="run_command", call_id=request.call.call_id)
    yield check
    ready = yield Ensure(session_id="bench", owner_key="o")
    yield check
    yield ResolveOwned(task_id=task, for_launch=True)
    yield RememberOwned(
        task_id=task,
        operation_key=request.operation_key,
        sandbox_id=ready.sandbox_id,
        launched=True,
        ledger_epoch=ready.ledger_epoch,
        launch_digest="d",
    )
    start, wait, read = _sandbox_effects(ready.sandbox_id, task)
    yield start
    yield check
    yield wait
    yield check
    yield read
    yield check
    return None


def _design_floor_rate(count: int, tag: str) -> float:
    """The simulator answering a trivial call's twelve effects, yielded by a
    generator that does nothing else, driven by the sync driver with the
    harness effects answered at once, the request snapshotted as a port
    does: the least any port and core of this effect design can cost."""
    sim = Simulator()
    port = _port(sim)
    requests = _requests(port, "true", count, tag)
    settings = port.settings
    allow, well = sandrail.ALLOW, ALL_WELL

    def answer(effect: Any) -> Any:
        kind = type(effect)
        if kind is CheckAuthority:
            return well
        if kind is Authorize:
            return allow
        if kind is ResolveOwned or kind is RememberOwned:
            return None
        return sim(effect)

    gc.collect()
    began = time.perf_counter()
    for request in requests:
        drive(_effects_only(request, snapshot_request(request, settings)), answer)
    return count / (time.perf_counter() - began)


def _big_output(ascii_only: bool) -> str:
    mark = "ok" if ascii_only else "ok ✓"
    line = f"2026-11-30T12:00:00Z INFO compiling module ... {mark}\n"
    data = (line * (16 * _MIB // len(line.encode()) + 1)).encode()[: 16 * _MIB]
    return data.decode("utf-8", "ignore")


def _big_run(ascii_only: bool, trace: bool) -> tuple[float, int]:
    """One foreground run whose command prints 16 MiB, measured on the retry.

    The first call launches it, so the simulator holds the output (its own
    storage, the sandbox's disk); the measured call has the same operation
    key, finds that launch (C2), waits, reads all 16 MiB back through the
    cursors and fits the result into the budget: all of the port's work.
    """
    sim = Simulator(scripts={"build": Script.prints(_big_output(ascii_only))})
    port = _port(sim)
    (request,) = _requests(port, "build", 1, "big")
    port.execute_sync(request)
    gc.collect()
    if trace:
        tracemalloc.start()
        base, _ = tracemalloc.get_traced_memory()
    began = time.perf_counter()
    result = port.execute_sync(request)
    elapsed = time.perf_counter() - began
    peak = 0
    if trace:
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        peak = top - base
    content = result.content
    if result.status != "ok" or not content["deduplicated"] or "omitted" not in content["stdout"]:
        raise AssertionError("the 16 MiB run did not read and cut its output")
    return elapsed, peak


def run(quick: bool) -> list[dict[str, Any]]:
    count = 1_000 if quick else 5_000
    repeats = 1 if quick else 3
    _port_rate(200, "warm")
    port_rate = max(_port_rate(count, f"r{n}") for n in range(repeats))
    unvalidated = max(_port_rate(count, f"u{n}", validation=False) for n in range(repeats))
    sim_rate = max(_simulator_rate(count) for _ in range(repeats))
    design = max(_design_floor_rate(count, f"d{n}") for n in range(repeats))
    bench = "run_command throughput"
    rows = [
        row(bench, "simulator alone (floor)", "calls/s", sim_rate, "calls/s"),
        row(
            bench, "port + core + simulator", "calls/s", port_rate, "calls/s", port_rate / sim_rate
        ),
        row(
            bench,
            "same, argument validation skipped (ablation)",
            "calls/s",
            unvalidated,
            "calls/s",
            unvalidated / sim_rate,
        ),
        row(
            bench,
            "design floor: its 12 effects, no port or core work",
            "calls/s",
            design,
            "calls/s",
            design / sim_rate,
        ),
        row(bench, "goal", "calls/s", 12_000.0, "calls/s", port_rate / 12_000),
    ]
    output_bytes = 16 * _MIB
    for ascii_only in (True, False):
        benchmark = "16 MiB foreground output, " + ("ASCII" if ascii_only else "with UTF-8")
        best = min(_big_run(ascii_only, trace=False)[0] for _ in range(1 if quick else 3))
        _, peak = _big_run(ascii_only, trace=True)
        rows += [
            row(benchmark, "output size (baseline)", "bytes", output_bytes, "B"),
            row(benchmark, "port + core", "time", best * 1e3, "ms"),
            row(benchmark, "port + core", "peak extra memory", float(peak), "B"),
            row(benchmark, "port + core", "peak / output", peak / output_bytes, "×"),
        ]
    return rows
