"""Memory a big foreground output costs when an artifact store keeps it:
streamed to the store page by page, against the same store taking it whole.

A foreground ``run_command`` prints 16 MiB with ``max_output_bytes=24000``
and a :class:`~sandrail.DirectoryArtifactStore`. The figure is the peak of
Python memory (``tracemalloc``) above what was in use before the call, while
the call runs, on the simulator and on E2B through the SDK on local-e2b
(whose server runs in this process too: its allocations count as well).
The simulator's row includes the simulator's own copy of the output (its
"sandbox", 16 MiB encoded when the command is first looked at), so 16 MiB is
its floor; the local-e2b server keeps the output in files. The baseline, in
the same run: the same store behind a wrapper with only ``write``, which the
port must hand the whole artifact at once (what every store got before
streaming). Both store the same output (checked); the time
each call took is shown too (streaming reads the output's two ends for the
result, then the whole output a page at a time for the store).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import sandrail
from benchmarks._common import row
from sandrail.interpreters.e2b import E2BBackend
from sandrail.interpreters.simulator import Script, Simulator
from sandrail.local_e2b import serve

GOAL = (
    "with an artifact store, a 16 MiB output goes to the store streamed: peak memory of "
    "the call a small fraction of the output (a few pages), never the output held whole"
)
BUDGET = 24_000
_BIG = 16 * 1024 * 1024
_COMMAND = f"yes 'compiled unit' | head -c {_BIG}"


class _WholeOnly:
    """The same store, offering only ``write``: the port joins the pieces."""

    def __init__(self, store: sandrail.DirectoryArtifactStore) -> None:
        self._store = store

    def write(self, key: str, content: str, media_type: str) -> sandrail.ArtifactRef:
        return self._store.write(key, content, media_type)


def _port(backend: Any, store: Any) -> tuple[sandrail.ToolPort, str]:
    session = f"bench-{uuid.uuid4().hex[:8]}"
    port = sandrail.command_tools(
        backend=backend,
        session_id=session,
        owner=sandrail.AgentOwner(agent_id="agent"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        max_output_bytes=BUDGET,
        artifacts=store,
    )
    return port, session


def _request(port: sandrail.ToolPort, session: str, key: str, command: str) -> Any:
    return sandrail.ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id=key, arguments={"command": command}),
        operation_key=key,
        session_id=session,
        definition=port.definition("run_command"),
        identity=sandrail.AgentIdentity(agent_id="agent"),
    )


async def _measured(call: Callable[[], Awaitable[sandrail.ToolResult]]) -> tuple[float, float, Any]:
    """Peak MiB above the start, seconds, and the result of one call."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    began = time.perf_counter()
    try:
        result = await call()
        took = time.perf_counter() - began
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    if result.status != "ok" or not result.artifact_refs:
        raise AssertionError(f"the call kept no artifact: {dict(result.content)}")
    return (peak - base) / 2**20, took, result


async def _compare(backend: Any, directory: Path, rounds: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    streamed = sandrail.DirectoryArtifactStore(directory / "streamed", max_total_bytes=2**30)
    whole = sandrail.DirectoryArtifactStore(directory / "whole", max_total_bytes=2**30)
    stores = {"streamed": streamed, "whole": whole}
    ports = {"streamed": _port(backend, streamed), "whole": _port(backend, _WholeOnly(whole))}
    uris: dict[str, str] = {}
    for port, session in ports.values():
        warm = await port.execute(_request(port, session, "warm", "true"))
        if warm.status != "ok":
            raise AssertionError(f"warm-up failed: {dict(warm.content)}")
    for round_ in range(rounds):
        order = ("streamed", "whole") if round_ % 2 == 0 else ("whole", "streamed")
        for name in order:
            port, session = ports[name]
            request = _request(port, session, f"big-{round_}", _COMMAND)
            peak, took, result = await _measured(lambda: port.execute(request))  # noqa: B023
            figures[f"{name} MiB"] = max(figures.get(f"{name} MiB", 0.0), peak)
            figures[f"{name} s"] = min(figures.get(f"{name} s", float("inf")), took)
            uris[name] = result.artifact_refs[0].uri
    # The sessions differ (so do the ids in the artifacts), the output not.
    kept = {name: json.loads(store.read(uris[name])) for name, store in stores.items()}
    if (
        kept["streamed"]["stdout"] != kept["whole"]["stdout"]
        or len(kept["whole"]["stdout"]) != _BIG
    ):
        raise AssertionError("the streamed and the whole artifact hold different output")
    return figures


class _Async:
    """The simulator as an asynchronous backend (as the E2B backend is)."""

    asynchronous = True

    def __init__(self) -> None:
        self.sim = Simulator(
            scripts={
                "true": Script.prints(""),
                _COMMAND: Script.prints(("compiled unit\n" * (_BIG // 14 + 1))[:_BIG]),
            }
        )

    async def __call__(self, effect: Any) -> Any:
        return self.sim(effect)


async def _on_local_e2b(directory: Path, rounds: int) -> dict[str, float]:
    with serve(signal_scope="process") as server:
        async with E2BBackend(**server.sdk_options) as backend:
            return await _compare(backend, directory, rounds)


def run(quick: bool) -> list[dict[str, Any]]:
    rounds = 1 if quick else 3
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, figures in (
            ("simulator", asyncio.run(_compare(_Async(), Path(tmp) / "sim", rounds))),
            (
                "E2B through the SDK on local-e2b",
                asyncio.run(_on_local_e2b(Path(tmp) / "e2b", rounds)),
            ),
        ):
            title = f"16 MiB foreground output to an artifact store, {label}"
            rows += [
                row(
                    title,
                    "whole (store with only write)",
                    "peak memory",
                    figures["whole MiB"],
                    "MiB",
                ),
                row(
                    title,
                    "streamed (store with open)",
                    "peak memory",
                    figures["streamed MiB"],
                    "MiB",
                    figures["whole MiB"] / figures["streamed MiB"],
                ),
                row(title, "whole (store with only write)", "best time", figures["whole s"], "s"),
                row(
                    title,
                    "streamed (store with open)",
                    "best time",
                    figures["streamed s"],
                    "s",
                    figures["whole s"] / figures["streamed s"],
                ),
            ]
    return rows
