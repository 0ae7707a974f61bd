"""C15 with big output: the full output reaches the artifact store piece by
piece, never whole in memory, and is exactly what a whole write would store.

The port, the core and the simulator are the real objects. The page size is
made small here (it is 1 MiB) so that a few kilobytes of output span many
pages; the oracle is the same call with the page made huge, which takes the
whole-output path (one read, one ``WriteArtifact``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import sandrail
import sandrail.core._collect as collect_module
import sandrail.core._streamed as streamed_module
from sandrail.core import (
    AppendArtifact,
    ArtifactRef,
    CloseArtifact,
    OpenArtifact,
    WriteArtifact,
    canonical_json,
)
from sandrail.core._budget import parse_omissions
from sandrail.core._streamed import retained
from sandrail.interpreters.replay import Recorder
from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan, Script, Simulator
from tests.rig import Rig

# ---------------------------------------------------------------------------
# Helpers


@contextlib.contextmanager
def page_size(size: int) -> Iterator[None]:
    """Stream in pages of ``size`` bytes (and stream anything above one page)."""
    saved = streamed_module.STREAM_PAGE_BYTES, collect_module.STREAM_PAGE_BYTES
    streamed_module.STREAM_PAGE_BYTES = size  # type: ignore[misc]
    collect_module.STREAM_PAGE_BYTES = size  # type: ignore[misc]
    try:
        yield
    finally:
        streamed_module.STREAM_PAGE_BYTES, collect_module.STREAM_PAGE_BYTES = saved  # type: ignore[misc]


class SpyWriter:
    def __init__(self, store: SpyStore, key: str, media_type: str) -> None:
        self.store = store
        self.inner = store.memory.open(key, media_type)
        self.fail_after = store.fail_after

    def write(self, text: str) -> None:
        if self.fail_after is not None and len(self.store.pieces) >= self.fail_after:
            raise OSError("disk full")
        self.store.pieces.append(len(text))
        self.inner.write(text)

    def commit(self) -> ArtifactRef:
        self.store.commits += 1
        return self.inner.commit()

    def abort(self) -> None:
        self.store.aborts += 1
        self.inner.abort()


class SpyStore:
    """A streaming store that counts what it is given."""

    def __init__(self, *, fail_after: int | None = None) -> None:
        self.memory = sandrail.MemoryArtifactStore()
        self.pieces: list[int] = []
        self.whole_writes = 0
        self.opens = self.commits = self.aborts = 0
        self.fail_after = fail_after

    def write(self, key: str, content: str, media_type: str) -> ArtifactRef:
        self.whole_writes += 1
        return self.memory.write(key, content, media_type)

    def open(self, key: str, media_type: str) -> SpyWriter:
        self.opens += 1
        return SpyWriter(self, key, media_type)

    def read(self, uri: str) -> str:
        return self.memory.read(uri)


class WholeOnlyStore:
    """A store with only ``write``: it gets the artifact joined, at the end."""

    def __init__(self) -> None:
        self.memory = sandrail.MemoryArtifactStore()
        self.writes: list[int] = []

    def write(self, key: str, content: str, media_type: str) -> ArtifactRef:
        self.writes.append(len(content))
        return self.memory.write(key, content, media_type)


def run_big(
    store: Any, stdout: str, stderr: str = "", *, budget: int = 2_000
) -> sandrail.ToolResult:
    rig = Rig(
        scripts={"big": Script.prints(stdout, stderr=stderr)},
        artifacts=store,
        max_output_bytes=budget,
    )
    return rig.run("run_command", {"command": "big"})


def port_for(backend: Any, store: Any) -> Any:
    """A command port on ``backend`` with ``store``, allowing everything."""
    return sandrail.command_tools(
        backend=backend,
        session_id="session-1",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        artifacts=store,
        max_output_bytes=2_000,
    )


def big_request(port: Any) -> sandrail.ToolRequest:
    return sandrail.ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id="c1", arguments={"command": "big"}),
        operation_key="op-1",
        session_id="session-1",
        definition=port.definition("run_command"),
        identity=sandrail.AgentIdentity(agent_id="agent-1"),
    )


def stored(store: Any, result: sandrail.ToolResult) -> dict[str, Any]:
    (ref,) = result.artifact_refs
    text = store.memory.read(ref.uri) if hasattr(store, "memory") else store.read(ref.uri)
    assert canonical_json(json.loads(text)) == text.encode("utf-8")  # canonical JSON
    assert ref.size_bytes == len(text.encode("utf-8"))
    parsed: dict[str, Any] = json.loads(text)
    return parsed


# ---------------------------------------------------------------------------
# The streamed artifact is the whole output, given in pages


def test_c15_a_big_output_reaches_the_store_in_pages_never_whole() -> None:
    stdout = "".join(f"line {n} é€😀\n" for n in range(4_000))
    stderr = 'warn\t"quoted" \\ back\x01\n' * 700
    store = SpyStore()
    with page_size(4_096):
        result = run_big(store, stdout, stderr)
    assert result.status == "ok"
    artifact = stored(store, result)
    assert artifact["stdout"] == stdout
    assert artifact["stderr"] == stderr
    assert artifact["stdout_bytes"] == len(stdout.encode())
    assert "retention_limited" not in artifact
    assert (store.opens, store.commits, store.aborts, store.whole_writes) == (1, 1, 0, 0)
    # No piece is more than a page of output, escaped (6 bytes a character at worst).
    assert max(store.pieces) <= 6 * 4_096
    assert len(store.pieces) > 2 * (len(stdout.encode()) + len(stderr.encode())) // (6 * 4_096)
    note = result.content["output_budget"]
    assert note == {
        "truncated": True,
        "artifact_uri": result.artifact_refs[0].uri,
        "size_bytes": result.artifact_refs[0].size_bytes,
    }
    assert len(canonical_json(result.content)) <= 2_000


def test_c15_a_store_without_open_gets_the_same_artifact_whole() -> None:
    stdout = "x" * 20_000 + "\n"
    streaming, whole = SpyStore(), WholeOnlyStore()
    with page_size(1_024):
        a = run_big(streaming, stdout)
        b = run_big(whole, stdout)
    assert a.content == b.content
    assert a.artifact_refs == b.artifact_refs
    assert len(whole.writes) == 1
    assert streaming.whole_writes == 0


def test_c15_output_within_one_page_is_read_once_and_stored_in_one_piece() -> None:
    """Up to a page (the real one: 1 MiB) the output is read at once and
    stored as one piece; still through ``open``, so the guard runs before the
    store commits (C9)."""
    store = SpyStore()
    rig = Rig(scripts={"big": Script.prints("y" * 50_000)}, artifacts=store, max_output_bytes=2_000)
    result = rig.run("run_command", {"command": "big"})
    assert result.artifact_refs
    reads = [effect for effect in rig.sim.applied if type(effect).__name__ == "Read"]
    assert len(reads) == 1
    assert (store.opens, store.commits, store.whole_writes, len(store.pieces)) == (1, 1, 0, 1)


_CHARACTERS = st.sampled_from(["a", "b", " ", "\n", "é", "€", "😀", '"', "\\", "\x00", "\x1f"])
_TEXT = st.one_of(
    st.text(alphabet=_CHARACTERS, max_size=40),
    st.builds(
        lambda piece, times: piece * times,
        st.text(alphabet=_CHARACTERS, min_size=1, max_size=40),
        st.integers(min_value=1, max_value=400),
    ),
)


@pytest.mark.untraced
@settings(deadline=None)
@given(
    stdout=_TEXT,
    stderr=_TEXT,
    page=st.integers(min_value=4, max_value=700),
    budget=st.integers(min_value=1_000, max_value=2_500),
    secret=st.sampled_from(["", "s3cr3t-ABCDEFGH", 'q"uo\\te-€€€-12345']),
    where=st.floats(min_value=0, max_value=1),
)
def test_c15_c17_a_streamed_artifact_is_byte_for_byte_the_whole_write(
    stdout: str, stderr: str, page: int, budget: int, secret: str, where: float
) -> None:
    """Streaming stores exactly what one whole write would: the same
    artifact, to the byte, with a secret the call passed masked across page
    edges (C17); and the result shows the two ends of that same text, within
    its budget, naming the artifact (C12, C13, C15)."""
    if secret:
        cut = int(len(stdout) * where)
        stdout = stdout[:cut] + secret + stdout[cut:]
        stderr = secret + stderr
    arguments = {"env": {"TOKEN": secret}} if secret else {}
    results = []
    for size in (page, 10**9):
        store = SpyStore()
        rig = Rig(
            scripts={"big": Script.prints(stdout, stderr=stderr)},
            artifacts=store,
            max_output_bytes=budget,
        )
        with page_size(size):
            result = rig.run("run_command", {"command": "big", **arguments})
        text = store.memory.read(result.artifact_refs[0].uri) if result.artifact_refs else None
        results.append((result, text))
        if size == page:
            event(f"streamed: {store.opens == 1}, whole write: {store.whole_writes == 1}")
        if secret:
            assert secret not in json.dumps(result.content, ensure_ascii=False)
            assert text is None or secret not in text
    (paged, paged_text), (whole, whole_text) = results
    assert paged.status == whole.status == "ok"
    assert paged_text == whole_text
    assert paged.artifact_refs == whole.artifact_refs
    assert len(canonical_json(paged.content)) <= budget
    if paged_text is None:
        assert paged.content == whole.content  # nothing was cut
        return
    assert paged.content["output_budget"]["artifact_uri"] == paged.artifact_refs[0].uri
    full = json.loads(paged_text)
    for key in ("stdout", "stderr"):
        shown = paged.content[key]
        markers = parse_omissions(shown)  # the alphabet has no "[": only ours
        if not markers:
            assert shown == full[key]
            continue
        (marker,) = markers
        head, tail = shown[: marker.start], shown[marker.end :]
        assert full[key].startswith(head)
        assert full[key].endswith(tail)
        if not secret:
            omitted = marker.omitted_bytes
            assert omitted == len(full[key].encode()) - len(head.encode()) - len(tail.encode())


# ---------------------------------------------------------------------------
# Retention: at most RETAINED_OUTPUT_LIMIT bytes go to the store


@pytest.mark.parametrize(
    ("sizes", "kept"),
    [
        ((10, 20), (10, 20)),
        ((16 * 2**20, 0), (16 * 2**20, 0)),
        ((16 * 2**20, 1), (16 * 2**20 - 1, 1)),
        ((20 * 2**20, 20 * 2**20), (8 * 2**20, 8 * 2**20)),
        ((1_000, 20 * 2**20), (1_000, 16 * 2**20 - 1_000)),
        ((20 * 2**20, 1_000), (16 * 2**20 - 1_000, 1_000)),
    ],
)
def test_c15_retention_shares_the_limit_fairly(
    sizes: tuple[int, int], kept: tuple[int, int]
) -> None:
    assert retained(*sizes) == kept
    assert sum(retained(*sizes)) <= 16 * 2**20


def test_c15_an_output_past_the_retention_limit_is_stored_up_to_it_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streamed_module, "RETAINED_OUTPUT_LIMIT", 6_000)
    stdout, stderr = "o" * 9_000, "e" * 1_000
    store = SpyStore()
    with page_size(1_000):
        result = run_big(store, stdout, stderr)
    artifact = stored(store, result)
    assert artifact["retention_limited"] is True
    assert artifact["stderr"] == stderr
    assert artifact["stdout"] == stdout[:5_000]
    assert artifact["stdout_bytes"] == 9_000  # the real size, not what was kept
    # The result shows the real end of the output, not the end of what was kept.
    assert result.content["stdout"].endswith("o" * 10)


# ---------------------------------------------------------------------------
# Failures: the call goes on without an artifact, nothing is left half-written


def test_c15_a_store_that_fails_mid_stream_is_aborted_and_the_result_still_fits() -> None:
    store = SpyStore(fail_after=3)
    with page_size(512):
        result = run_big(store, "z" * 10_000)
    assert result.status == "ok"
    assert result.artifact_refs == ()
    assert result.content["output_budget"] == {"truncated": True}
    assert (store.commits, store.aborts) == (0, 1)
    assert len(store.memory) == 0


def test_c15_a_failed_read_mid_stream_drops_the_artifact_not_the_result() -> None:
    # Reads 0 and 1 are the two ends; read 3 is a page of the stream.
    plan = FaultPlan(faults=(Fault(effect="Read", occurrence=3, kind=FaultKind.NOT_DELIVERED),))
    store = SpyStore()
    rig = Rig(
        scripts={"big": Script.prints("q" * 10_000)},
        plan=plan,
        artifacts=store,
        max_output_bytes=2_000,
    )
    with page_size(1_000):
        result = rig.run("run_command", {"command": "big"})
    assert result.status == "ok"
    assert result.artifact_refs == ()
    assert (store.commits, store.aborts) == (0, 1)


def test_c9_authority_lost_mid_stream_is_uncertain_and_the_artifact_discarded() -> None:
    store = SpyStore()
    rig = Rig(scripts={"big": Script.prints("w" * 10_000)}, artifacts=store, max_output_bytes=2_000)
    original = SpyWriter.write

    def write(self: SpyWriter, text: str) -> None:
        original(self, text)
        if len(store.pieces) == 4:
            rig.harness.authority_held = False  # the lease lapses mid-stream

    with page_size(1_000), pytest.MonkeyPatch.context() as patch:
        patch.setattr(SpyWriter, "write", write)
        result = rig.run("run_command", {"command": "big"})
    assert result.status == "uncertain"
    assert result.content["error_type"] == sandrail.ErrorCode.AUTHORITY_LOST.value
    assert (store.commits, store.aborts) == (0, 1)


def test_c15_a_directory_store_keeps_no_temporary_file_after_a_failure(tmp_path: Path) -> None:
    store = sandrail.DirectoryArtifactStore(tmp_path, max_total_bytes=4_000)
    with page_size(512):
        result = run_big(store, "v" * 10_000)  # bigger than the store's cap
    assert result.status == "ok"
    assert result.artifact_refs == ()
    assert list(tmp_path.iterdir()) == []


def test_c15_a_directory_store_streams_into_place(tmp_path: Path) -> None:
    store = sandrail.DirectoryArtifactStore(tmp_path)
    stdout = "".join(f"{n}\n" for n in range(5_000))
    with page_size(512):
        result = run_big(store, stdout)
    (ref,) = result.artifact_refs
    assert json.loads(store.read(ref.uri))["stdout"] == stdout
    assert [path.name for path in tmp_path.iterdir()] == [
        ref.uri.removeprefix("artifact://") + ".artifact"
    ]
    assert (
        oct((tmp_path / f"{ref.uri.removeprefix('artifact://')}.artifact").stat().st_mode & 0o777)
        == "0o600"
    )


class _YieldingSimulator:
    """An asynchronous backend: the simulator, giving the loop a turn at each
    effect (where a cancellation is delivered)."""

    asynchronous = True

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    async def __call__(self, effect: Any) -> Any:
        await asyncio.sleep(0)
        return self.sim(effect)


def test_c15_a_cancelled_call_leaves_no_artifact_open(tmp_path: Path) -> None:
    """The harness cancels the call's task while the store is being written:
    whatever the call opened is aborted, no temporary file is left."""
    store = sandrail.DirectoryArtifactStore(tmp_path)
    sim = Simulator(scripts={"big": Script.prints("c" * 10_000)})
    port = port_for(_YieldingSimulator(sim), store)
    writer_class: Any = sandrail.interpreters.artifacts._FileWriter
    original = writer_class.write_bytes
    writes = 0
    temporary: list[str] = []

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None

        def write_bytes(self: Any, data: bytes) -> None:
            nonlocal writes
            writes += 1
            original(self, data)
            if writes == 3:
                temporary.extend(path.name for path in tmp_path.iterdir())
                task.cancel()  # delivered at the backend's next turn

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(writer_class, "write_bytes", write_bytes)
            with pytest.raises(asyncio.CancelledError):
                await port.execute(big_request(port))

    with page_size(512):
        asyncio.run(main())
    assert writes == 3
    assert len(temporary) == 1
    assert temporary[0].startswith(".tmp-")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------
# Recording and replay see the pieces as effects


def test_c15_a_streamed_artifact_records_and_replays(tmp_path: Path) -> None:
    from sandrail import replay_file

    path = tmp_path / "streamed.jsonl"
    recorder = Recorder(Simulator(scripts={"big": Script.prints("r" * 6_000)}), path)
    store = SpyStore()
    port = recorder.attach(port_for(recorder, store))
    with page_size(1_000):
        result = port.execute_sync(big_request(port))
        recorder.close()
        kinds = [json.loads(line).get("effect", {}).get("type") for line in path.open()]
        assert {"OpenArtifact", "AppendArtifact", "CloseArtifact"} <= set(kinds)
        assert "WriteArtifact" not in kinds
        report = replay_file(path)
    assert result.status == "ok"
    assert result.artifact_refs
    assert report.calls == 1


def test_c15_artifact_effects_are_harness_effects_the_simulator_refuses() -> None:
    sim = Simulator()
    for effect in (
        OpenArtifact(key="k"),
        AppendArtifact(key="k", text="x"),
        CloseArtifact(key="k", keep=True),
        WriteArtifact(key="k", content="{}"),
    ):
        with pytest.raises(TypeError, match="harness effect"):
            sim(effect)


class _OddStore:
    """A store whose ``open`` gives something that is not a usable writer."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer
        self.whole = sandrail.MemoryArtifactStore()

    def write(self, key: str, content: str, media_type: str) -> ArtifactRef:
        return self.whole.write(key, content, media_type)

    def open(self, key: str, media_type: str) -> Any:
        return self.writer


class _AsyncWriter:
    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.aborted = False

    async def write(self, text: str) -> None:  # never awaited by the port
        self.pieces.append(text)

    def commit(self) -> ArtifactRef:
        return ArtifactRef(uri="artifact://partial", size_bytes=len("".join(self.pieces)))

    def abort(self) -> None:
        self.aborted = True


class _LyingWriter(_AsyncWriter):
    def write(self, text: str) -> None:  # type: ignore[override]
        self.pieces.append(text)

    def commit(self) -> Any:
        return {"uri": "artifact://x", "size_bytes": 1}


@pytest.mark.parametrize(
    "writer",
    [object(), None, "not a writer", _AsyncWriter(), _LyingWriter()],
    ids=["object", "none", "string", "async-write", "commit-not-a-ref"],
)
def test_c15_a_store_whose_writer_cannot_be_trusted_keeps_no_artifact(writer: Any) -> None:
    """Whatever ``open`` returns, the call still fits and names no artifact it
    cannot vouch for; an asynchronous ``write`` (pieces taken later, if ever)
    is refused at the first piece, so no partial artifact is committed."""
    with page_size(512):
        result = run_big(_OddStore(writer), "k" * 10_000)
    assert result.status == "ok"
    assert result.artifact_refs == ()
    assert result.content["output_budget"] == {"truncated": True}
    if isinstance(writer, _AsyncWriter) and not isinstance(writer, _LyingWriter):
        assert writer.pieces == []
        assert writer.aborted


def _streamed_call(lost_after: int | None) -> tuple[list[Any], sandrail.ToolResult]:
    """One streamed call driven straight through the core; authority is lost
    right after the ``lost_after``-th effect that is not a guard check.
    Returns every effect in order, and the result."""
    from sandrail.core import (
        Allow,
        AuthorityReport,
        Authorize,
        CheckAuthority,
        PortSettings,
        RememberOwned,
        ResolveOwned,
        command_tool_definitions,
        tool_program,
    )
    from sandrail.interpreters._drivers import drive

    settings = PortSettings(
        session_id="s",
        owner=sandrail.AgentOwner(agent_id="a"),
        definitions=command_tool_definitions(),
        contract="test",
        max_output_bytes=2_000,
        artifacts_enabled=True,
    )
    definition = next(d for d in settings.definitions if d.name == "run_command")
    live = sandrail.ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id="c1", arguments={"command": "big"}),
        operation_key="op-1",
        session_id="s",
        definition=definition,
        identity=sandrail.AgentIdentity(agent_id="a"),
    )
    sim = Simulator(scripts={"big": Script.prints("p" * 3_000, stderr="e" * 2_500)})
    seen: list[Any] = []
    lost = False

    def interpret(effect: Any) -> Any:
        nonlocal lost
        seen.append(effect)
        if isinstance(effect, CheckAuthority):
            return AuthorityReport(aborted=False, drifted=False, authority_held=not lost)
        steps = sum(not isinstance(e, CheckAuthority) for e in seen)
        if lost_after is not None and steps == lost_after:
            lost = True
        if isinstance(effect, Authorize):
            return Allow()
        if isinstance(effect, ResolveOwned | RememberOwned | OpenArtifact | AppendArtifact):
            return None
        if isinstance(effect, CloseArtifact):
            return ArtifactRef(uri="artifact://0123", size_bytes=1) if effect.keep else None
        return sim(effect)

    return seen, drive(tool_program(live, settings), interpret)


def test_c9_no_read_or_store_step_follows_a_lost_authority_while_streaming() -> None:
    """Authority lost right after any step of the stream (the last end read,
    opening the artifact, any page read, any piece stored): the next guard
    sees it before any other step, the artifact is discarded, and the call is
    uncertain (C9, C15)."""
    from sandrail.core import CheckAuthority, Read

    with page_size(1_000):
        effects, result = _streamed_call(None)
        assert result.status == "ok"
        steps = [e for e in effects if not isinstance(e, CheckAuthority)]
        first = next(n for n, e in enumerate(steps) if isinstance(e, OpenArtifact)) - 1
        assert isinstance(steps[first], Read)  # the tail of the two ends
        assert sum(isinstance(e, Read) for e in steps[first:]) >= 6  # pages of both streams
        for lost_after in range(first + 1, len(steps) + 1):
            effects, result = _streamed_call(lost_after)
            assert result.status == "uncertain", lost_after
            assert result.content["error_type"] == sandrail.ErrorCode.AUTHORITY_LOST.value
            after = [e for e in effects if not isinstance(e, CheckAuthority)][lost_after:]
            assert all(isinstance(e, CloseArtifact) and not e.keep for e in after), (
                lost_after,
                after,
            )


@pytest.mark.parametrize("printed", [50_000, 10_000], ids=["one-piece", "streamed"])
def test_c9_c15_authority_lost_while_the_store_writes_keeps_no_artifact(
    tmp_path: Path, printed: int
) -> None:
    """The lease lapses (or the harness cancels) while
    the store takes the output, whole or streamed: the guard after that
    piece sees it before the store is told to commit, so nothing is kept."""
    store = sandrail.DirectoryArtifactStore(tmp_path)
    rig = Rig(
        scripts={"big": Script.prints("a" * printed)}, artifacts=store, max_output_bytes=2_000
    )
    writer_class: Any = sandrail.interpreters.artifacts._FileWriter
    original = writer_class.write_bytes

    def write_bytes(self: Any, data: bytes) -> None:
        original(self, data)
        if len(data) > 100:  # a piece of output, not the template
            rig.harness.authority_held = False

    with page_size(1_024 if printed == 10_000 else 10**9), pytest.MonkeyPatch.context() as patch:
        patch.setattr(writer_class, "write_bytes", write_bytes)
        result = rig.run("run_command", {"command": "big"})
    assert result.status == "uncertain"
    assert result.content["error_type"] == sandrail.ErrorCode.AUTHORITY_LOST.value
    assert list(tmp_path.iterdir()) == []


def test_c15_a_stale_temporary_file_is_removed_by_the_next_store(tmp_path: Path) -> None:
    """A writer aborted while the directory was
    read-only cannot remove its temporary file; the next store made on the
    directory removes it once it is an hour old, and leaves a live one."""
    import os

    from sandrail.interpreters.artifacts import STALE_TEMPORARY_SECONDS

    stale, live = tmp_path / ".tmp-stale", tmp_path / ".tmp-live"
    stale.write_bytes(b"x" * 1_000)
    live.write_bytes(b"y" * 1_000)
    old = stale.stat().st_mtime - STALE_TEMPORARY_SECONDS - 60
    os.utime(stale, (old, old))
    store = sandrail.DirectoryArtifactStore(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == [".tmp-live"]
    assert store.total_bytes == 0


class _NamingStore(SpyStore):
    """A store whose references show whatever it likes."""

    def __init__(self, uri: str = "", media_type: str = "") -> None:
        super().__init__()
        self.uri, self.media_type = uri, media_type

    def open(self, key: str, media_type: str) -> Any:
        writer = super().open(key, media_type)
        inner_commit = writer.commit

        def commit() -> ArtifactRef:
            ref = inner_commit()
            return ArtifactRef(
                uri=self.uri or ref.uri,
                size_bytes=ref.size_bytes,
                media_type=self.media_type or ref.media_type,
            )

        writer.commit = commit  # type: ignore[method-assign]
        return writer


@pytest.mark.parametrize("field", ["uri", "media_type"])
def test_c17_an_artifact_reference_showing_an_env_value_is_not_named(field: str) -> None:
    """The reference's URI and media type reach the
    model; one that holds a value the port masks is left out (C17)."""
    secret = "tok-0123456789abcdef"
    store = _NamingStore(**{field: f"x://{secret}"})
    rig = Rig(scripts={"big": Script.prints("b" * 5_000)}, artifacts=store, max_output_bytes=2_000)
    result = rig.run("run_command", {"command": "big", "env": {"TOKEN": secret}})
    assert result.status == "ok"
    assert result.artifact_refs == ()
    assert result.content["output_budget"] == {"truncated": True}
    assert secret not in json.dumps(result.to_dict())
    assert store.aborts == 1


def test_c15_a_commit_that_returns_no_reference_aborts_the_writer() -> None:
    """The writer is told to abort, so a store that
    kept the artifact anyway can drop what no result names."""
    writer = _LyingWriter()
    with page_size(512):
        result = run_big(_OddStore(writer), "k" * 10_000)
    assert result.artifact_refs == ()
    assert writer.aborted


@pytest.mark.parametrize(
    "changes",
    [{"uri": "x://" + "u" * 300}, {"size_bytes": -1}, {"size_bytes": True}, {"media_type": 7}],
    ids=["long-uri", "negative-size", "bool-size", "media-type-not-text"],
)
def test_c15_a_reference_the_port_cannot_name_aborts_the_writer(changes: dict[str, Any]) -> None:
    """A reference no result can carry (C14's room for
    it) is refused where the store answers, and the writer is told to abort,
    so what the store kept can be dropped; the result still fits."""

    class Store(SpyStore):
        def open(self, key: str, media_type: str) -> Any:
            writer = super().open(key, media_type)
            inner_commit = writer.commit

            def commit() -> ArtifactRef:
                ref = inner_commit()
                values = {
                    "uri": ref.uri,
                    "size_bytes": ref.size_bytes,
                    "media_type": ref.media_type,
                }
                values.update(changes)
                return ArtifactRef(**values)

            writer.commit = commit  # type: ignore[method-assign]
            return writer

    store = Store()
    rig = Rig(scripts={"big": Script.prints("b" * 5_000)}, artifacts=store, max_output_bytes=2_000)
    result = rig.run("run_command", {"command": "big"})
    assert result.status == "ok"
    assert result.artifact_refs == ()
    assert store.aborts == 1
    assert len(canonical_json(result.content)) <= 2_000


def test_c17_a_recorded_call_whose_reference_shows_a_named_secret_replays(tmp_path: Path) -> None:
    """A reference showing a value the recorder masks
    (``Recorder(secrets=...)``) is not named live either, so the recording
    replays exactly and holds no trace of the value."""
    from sandrail import replay_file

    named = "NamedSecret!!42"
    path = tmp_path / "named.jsonl"
    store = _NamingStore(uri=f"artifact://0123-{named}")
    recorder = Recorder(
        Simulator(scripts={"big": Script.prints("n" * 100_000)}), path, secrets=[named]
    )
    port = recorder.attach(port_for(recorder, store))
    result = port.execute_sync(big_request(port))
    recorder.close()
    assert result.status == "ok"
    assert result.artifact_refs == ()
    assert store.aborts == 1
    assert named not in path.read_text(encoding="utf-8")
    assert replay_file(path).calls == 1


def test_c15_a_directory_store_ignores_links_it_did_not_make(tmp_path: Path) -> None:
    """A ``.tmp-*`` or ``*.artifact`` link someone
    else put in the directory is neither swept, counted nor read through."""
    import os

    from sandrail.interpreters.artifacts import STALE_TEMPORARY_SECONDS, ArtifactNotFoundError

    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "precious"
    target.write_bytes(b"keep me" * 1_000)
    old = target.stat().st_mtime - STALE_TEMPORARY_SECONDS - 60
    os.utime(target, (old, old))
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    (store_dir / ".tmp-link").symlink_to(target)
    (store_dir / "0123456789abcdef.artifact").symlink_to(target)
    store = sandrail.DirectoryArtifactStore(store_dir)
    assert (store_dir / ".tmp-link").is_symlink()
    assert target.read_bytes() == b"keep me" * 1_000
    assert store.total_bytes == 0
    with pytest.raises(ArtifactNotFoundError):
        store.read("artifact://0123456789abcdef")
    with pytest.raises(ArtifactNotFoundError):
        store.read("artifact://../outside/precious")


def test_c6_c15_a_page_that_finds_the_output_gone_keeps_no_artifact() -> None:
    """A page read while streaming answers ``unknown`` (root deleted the
    output since the ends were read): no evidence, so the artifact is
    discarded; the result shows the ends it had read."""
    from sandrail.core import CommandState, OutputChunk, Read

    sim = Simulator(scripts={"big": Script.prints("g" * 10_000)})
    reads = 0

    def backend(effect: Any) -> Any:
        nonlocal reads
        if isinstance(effect, Read):
            reads += 1
            if reads == 4:  # the ends, then two pages, then the output is gone
                return OutputChunk(
                    stdout="",
                    stderr="",
                    next_stdout_cursor=effect.stdout_cursor,
                    next_stderr_cursor=effect.stderr_cursor,
                    more=False,
                    state=CommandState(status="unknown"),
                )
        return sim(effect)

    store = SpyStore()
    port = port_for(backend, store)
    with page_size(1_000):
        result = port.execute_sync(big_request(port))
    assert reads == 4
    assert result.status == "ok"
    assert result.artifact_refs == ()
    assert (store.commits, store.aborts) == (0, 1)


def test_c15_a_fifo_named_like_an_artifact_is_not_read(tmp_path: Path) -> None:
    """Reading waited forever on a FIFO."""
    import os

    from sandrail.interpreters.artifacts import ArtifactNotFoundError

    store = sandrail.DirectoryArtifactStore(tmp_path)
    os.mkfifo(tmp_path / "0123456789abcdef.artifact")
    with pytest.raises(ArtifactNotFoundError):
        store.read("artifact://0123456789abcdef")


def test_c15_a_temporary_file_swapped_mid_stream_is_not_committed(tmp_path: Path) -> None:
    """Someone replaces the writer's temporary file
    by a link to another file while it streams; the commit refuses a file it
    did not write, and the result names no artifact."""
    import os

    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("not the output")
    store_dir = tmp_path / "store"
    store = sandrail.DirectoryArtifactStore(store_dir)
    writer_class: Any = sandrail.interpreters.artifacts._FileWriter
    original = writer_class.write_bytes
    swapped = False

    def write_bytes(self: Any, data: bytes) -> None:
        nonlocal swapped
        original(self, data)
        if not swapped:
            swapped = True
            os.unlink(self._tmp)
            os.link(elsewhere, self._tmp)

    with page_size(512), pytest.MonkeyPatch.context() as patch:
        patch.setattr(writer_class, "write_bytes", write_bytes)
        result = run_big(store, "s" * 10_000)
    assert swapped
    assert result.status == "ok"
    assert result.artifact_refs == ()
    assert elsewhere.read_text() == "not the output"


@pytest.mark.parametrize("secret", ["", "hunter2", "ok", 12345678])
def test_c17_a_recorder_refuses_a_named_secret_it_cannot_mask(tmp_path: Path, secret: Any) -> None:
    """A named secret under 8 characters was scrubbed
    from the cassette but not masked in output, so the recording did not
    replay (and ``ok`` or a JSON key scrubbed broke it). Refused at once,
    before the file is touched."""
    path = tmp_path / "never.jsonl"
    with pytest.raises(ValueError, match="Recorder secrets must"):
        Recorder(Simulator(), path, secrets=[secret])
    assert not path.exists()
