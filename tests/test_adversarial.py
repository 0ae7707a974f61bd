"""Attacks on at-most-once, masking and validation, replayed against the
simulator and the port.

Each test is one break an attacker or a hostile environment found and names
the contract line it proves. The same attacks against the real launcher in
real bash live with the E2B tests; these pin the contract at the port, where every
backend shares it.
"""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import sandrail
from sandrail import ToolResult, replay_file
from sandrail.core import REDACTED, ArtifactRef, ErrorCode, OwnedCommand, Start
from sandrail.interpreters.replay import Recorder
from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan, Script, Simulator
from tests.rig import AGENT, SESSION, Rig

SECRET = "sk-live-0123456789abcdef"


def one_fault(effect: str, kind: FaultKind, when: str = "before") -> FaultPlan:
    return FaultPlan((Fault(effect=effect, kind=kind, when=when),))  # type: ignore[arg-type]


# -- at most once (C2) ---------------------------------------------------------


def test_c2_a_retry_after_a_lost_answer_never_relaunches_what_wiped_the_ledger() -> None:
    """The Start reached the sandbox, its answer was lost, and the
    command deleted the ledger (``rm -rf /tmp/*``). The retry on the same port
    must not launch again: it is uncertain (claim lost)."""
    rig = Rig(plan=one_fault("Start", FaultKind.RESPONSE_LOST))
    lost = rig.run("run_command", {"command": "echo once"})
    assert lost.status == "uncertain"
    rig.sim.wipe_ledger("sbx-1")
    for call in range(3):
        retry = rig.run("run_command", {"command": "echo once"}, call_id=f"retry-{call}")
        assert retry.status == "uncertain", retry.content
    assert rig.sim.launches[rig.task_id()] == 1


def test_c2_the_same_wipe_through_the_fault_plan() -> None:
    rig = Rig(plan=one_fault("Start", FaultKind.LEDGER_WIPED, "after"))
    assert rig.run("run_command", {"command": "echo once"}).status == "uncertain"
    assert rig.run("run_command", {"command": "echo once"}, call_id="c2").status == "uncertain"
    assert rig.sim.launches[rig.task_id()] == 1


def test_c2_a_start_that_never_arrived_is_launched_by_the_retry_exactly_once() -> None:
    """The other side of expecting the claim: when the sandbox can prove it
    never held one (its ledger is the one it had when the first start was
    sent), the retry launches, decisively, and a late copy adds nothing."""
    rig = Rig(plan=one_fault("Start", FaultKind.HANG))
    assert rig.run("run_command", {"command": "echo once"}).status == "uncertain"
    retry = rig.run("run_command", {"command": "echo once"}, call_id="c2")
    assert retry.status == "ok", retry.content
    assert rig.sim.launches[rig.task_id()] == 1


def test_c2_a_restarted_port_with_a_durable_record_never_relaunches_after_a_wipe() -> None:
    """A harness restart forgets what the old backend sent; with the durable
    ownership record (resolve/remember callbacks) the new port still expects
    the claim, and a sandbox without it launches nothing."""
    durable: dict[str, OwnedCommand] = {}

    def ports(sim: Simulator | None = None) -> Rig:
        return Rig(
            sim=sim,
            plan=one_fault("Start", FaultKind.RESPONSE_LOST),
            resolve_owned_command=lambda request, task: durable.get(task),
            remember_owned_command=lambda request, owned: durable.__setitem__(owned.task_id, owned),
        )

    first = ports()
    assert first.run("run_command", {"command": "echo once"}).status == "uncertain"
    first.sim.wipe_ledger("sbx-1")
    second = ports(first.sim)
    retry = second.run("run_command", {"command": "echo once"}, call_id="after-restart")
    assert retry.status == "uncertain", retry.content
    assert first.sim.launches[first.task_id()] == 1


def test_c2_a_failing_durable_record_stops_the_launch_before_the_start() -> None:
    def broken(request: Any, owned: OwnedCommand) -> None:
        raise OSError("disk full")

    rig = Rig(remember_owned_command=broken)
    result = rig.run("run_command", {"command": "echo once"})
    # The start never left, and the call says so.
    assert (result.status, result.content["executed"]) == ("error", False)
    assert not any(isinstance(effect, Start) for effect in rig.sim.effects_seen)
    assert rig.sim.launches == {}


@pytest.mark.parametrize("threads", [8])
def test_c2_one_port_from_many_threads_launches_once(threads: int) -> None:
    """Execute_sync from 8 threads with one operation key."""
    rig = Rig(scripts={"work": Script.prints("done\n", duration=1)})
    results: list[ToolResult] = []
    barrier = threading.Barrier(threads)

    def call(n: int) -> None:
        request = rig.request("run_command", {"command": "work"}, call_id=f"t{n}")
        barrier.wait()
        results.append(rig.port.execute_sync(request))

    workers = [threading.Thread(target=call, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert len(results) == threads
    assert all(result.status == "ok" for result in results), [r.content for r in results]
    assert sum(not result.content["deduplicated"] for result in results) == 1
    assert rig.sim.launches[rig.task_id()] == 1
    assert len({effect.sandbox_id for effect in rig.sim.applied if isinstance(effect, Start)}) == 1


def test_c2_concurrent_tasks_on_one_loop_launch_once() -> None:
    sim = Simulator(scripts={"work": Script.prints("done\n", duration=1)})

    class Async:
        asynchronous = True

        async def __call__(self, effect: Any) -> Any:
            await asyncio.sleep(0)
            return sim(effect)

    rig = Rig(sim=sim)
    port = sandrail.command_tools(
        backend=Async(),
        session_id=SESSION,
        owner=sandrail.AgentOwner(agent_id=AGENT),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )

    async def main() -> list[ToolResult]:
        requests = [
            attrs_evolve(rig.request("run_command", {"command": "work"}, call_id=f"a{n}"), port)
            for n in range(8)
        ]
        return await asyncio.gather(*(port.execute(request) for request in requests))

    results = asyncio.run(main())
    assert all(result.status == "ok" for result in results)
    assert sim.launches[rig.task_id()] == 1


def attrs_evolve(request: sandrail.ToolRequest, port: sandrail.ToolPort) -> sandrail.ToolRequest:
    import attrs

    return attrs.evolve(request, definition=port.definition(request.call.name), cancel=None)


# -- secrets (C17) -------------------------------------------------------------


def _prints_secret(rig: Rig) -> str:
    result = rig.run(
        "run_command",
        {"command": "serve", "background": True, "env": {"TOKEN": SECRET}},
        key="op-bg",
    )
    assert result.status == "ok"
    return rig.task_id("op-bg")


def _pages(rig: Rig, task: str, size: int, *, key_prefix: str = "page") -> list[str]:
    cursor, pages = 0, []
    for n in range(40):
        page = rig.run(
            "read_command_output",
            {"task_id": task, "stdout_cursor": cursor, "max_bytes": size},
            key=f"{key_prefix}-{n}",
            call_id=f"{key_prefix}-{n}",
        )
        assert page.status == "ok", page.content
        pages.append(page.content["stdout"])
        if page.content["stdout_cursor"] == cursor and not page.content["output_may_be_truncated"]:
            break
        cursor = page.content["stdout_cursor"]
    return pages


@pytest.mark.parametrize("size", [4, 5, 7, 8, 11, 16, 64])
def test_c17_paging_never_unmasks(size: int) -> None:
    """A whole read shows AAAA<redacted>BBBB; pages of any size show
    it masked too, never split across two pages in clear."""
    rig = Rig(scripts={"serve": Script.hangs(f"AAAA{SECRET}BBBB\n")})
    task = _prints_secret(rig)
    pages = _pages(rig, task, size)
    joined = "".join(pages)
    assert joined == f"AAAA{REDACTED}BBBB\n"
    assert SECRET[:4] not in joined


def test_c17_a_cursor_computed_into_the_secret_shows_none_of_it() -> None:
    rig = Rig(scripts={"serve": Script.hangs(f"AAAA{SECRET}BBBB\n")})
    task = _prints_secret(rig)
    for cursor in range(4, 4 + len(SECRET)):
        page = rig.run(
            "read_command_output",
            {"task_id": task, "stdout_cursor": cursor, "max_bytes": 64},
            key=f"guess-{cursor}",
        )
        assert page.content["stdout"] in ("BBBB\n", f"{REDACTED}BBBB\n"), cursor


def test_c17_a_restarted_port_masks_what_the_harness_hands_it() -> None:
    """A restarted harness (a new process: a new backend object over
    the same sandboxes, and a durable resolver) read a task launched with env
    and showed the value; ``redact=`` gives it back. (Ports on the same
    backend object share what the session masks.)"""
    first = Rig(scripts={"serve": Script.hangs(f"token {SECRET}\n")})
    task = _prints_secret(first)
    durable = dict(first.port.owned_commands)
    sim = first.sim
    del first  # the harness restarted: no port of the session is left
    gc.collect()

    def restarted(**options: Any) -> Rig:
        rig = Rig(sim=sim)
        rig.port = sandrail.command_tools(
            backend=lambda effect: sim(effect),  # the new process's backend object
            session_id=rig.session_id,
            owner=rig.owner,
            authorize=rig.harness.authorize,
            assert_authority=rig.harness.assert_authority,
            resolve_owned_command=lambda request, t: durable.get(t),
            **options,
        )
        return rig

    shown = restarted().run("read_command_output", {"task_id": task}, key="read-1")
    assert SECRET in shown.content["stdout"]  # what the item saw: the port cannot know
    told = restarted(redact=[SECRET])
    masked = told.run("read_command_output", {"task_id": task}, key="read-2")
    assert masked.content["stdout"] == f"token {REDACTED}\n"


def test_c17_redact_refuses_values_that_would_mask_ordinary_text() -> None:
    with pytest.raises(ValueError, match="at least 8"):
        Rig(redact=["1234"])
    with pytest.raises(TypeError, match="iterable of strings"):
        Rig(redact=SECRET)


def test_c17_cassettes_hold_no_secret_even_split_across_reads(tmp_path: Path) -> None:
    """Joining consecutive recorded Read outcomes gave back env values
    and named secrets. Reads are masked below the recorder now."""
    named = "named-secret-42-xyz"
    sim = Simulator(scripts={"serve": Script.hangs(f"AA{SECRET}BB{named}CC\n")})
    path = tmp_path / "session.jsonl"
    recorder = Recorder(sim, path, secrets=[named])
    rig = Rig(sim=sim)
    port = sandrail.command_tools(
        backend=recorder,
        session_id=SESSION,
        owner=sandrail.AgentOwner(agent_id=AGENT),
        authorize=rig.harness.authorize,
        assert_authority=rig.harness.assert_authority,
    )
    recorder.attach(port)
    rig.port = port
    task = _prints_secret(rig)
    pages = _pages(rig, task, 6)
    recorder.close()
    text = path.read_text(encoding="utf-8")
    reads = [
        json.loads(line)["outcome"]["stdout"]
        for line in text.splitlines()
        if '"type": "Read"' in line and '"outcome"' in line
    ]
    assert reads
    for value in (SECRET, named):
        assert value not in text
        assert value not in "".join(reads)
        assert value[:6] not in "".join(reads)
    assert "".join(pages) == f"AA{REDACTED}BB{REDACTED}CC\n"
    assert replay_file(path).calls == 1 + len(pages)


# -- never raises ---------------------------------------------


class _Exploding:
    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no {name} here")

    def __call__(self, effect: Any) -> Any:
        raise RuntimeError("boom")


def test_a_backend_whose_attributes_raise_gives_a_result() -> None:
    port = sandrail.command_tools(
        backend=_Exploding(),
        session_id=SESSION,
        owner=sandrail.AgentOwner(agent_id=AGENT),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )
    request = Rig().request("run_command", {"command": "echo x"})
    request = attrs_evolve(request, port)
    result = port.execute_sync(request)
    assert result.status == "error"
    assert result.content["executed"] is False
    assert asyncio.run(port.execute(request)).status == "error"


def test_a_layered_backend_whose_finish_raises_keeps_the_result() -> None:
    sim = Simulator()

    class Layered:
        def open_call(self, request: Any, answer: Any) -> Any:
            inner = sim

            class Call:
                def __call__(self, effect: Any) -> Any:
                    return answer(effect) if type(effect).__name__ in _HARNESS else inner(effect)

                def __getattr__(self, name: str) -> Any:
                    raise RuntimeError("finish lookup explodes")

            return Call()

        def __call__(self, effect: Any) -> Any:
            return sim(effect)

    rig = Rig()
    port = sandrail.command_tools(
        backend=Layered(),
        session_id=SESSION,
        owner=sandrail.AgentOwner(agent_id=AGENT),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )
    result = port.execute_sync(
        attrs_evolve(rig.request("run_command", {"command": "echo x"}), port)
    )
    assert result.status == "ok"


_HARNESS = {"Authorize", "CheckAuthority", "ResolveOwned", "RememberOwned", "WriteArtifact"}


class _TwoFaced(Mapping[str, Any]):
    """Arguments that show one face to the first reader and another after."""

    def __init__(self) -> None:
        self.reads = 0

    def _face(self) -> dict[str, Any]:
        self.reads += 1
        if self.reads == 1:
            return {"command": "echo checked"}
        return {"command": "echo EVIL", "background": True, "env": {"X_TOKEN": SECRET}}

    def __getitem__(self, key: str) -> Any:
        return self._face()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._face())

    def __len__(self) -> int:
        return len(self._face())

    def items(self) -> Any:
        return self._face().items()


def test_c9_arguments_are_read_once_and_only_that_copy_runs() -> None:
    """A mapping that answers differently on each read launched env
    and background mode neither the schema check nor the drift digest saw."""
    rig = Rig()
    request = rig.request("run_command", {})
    request = attrs_evolve_call(request, _TwoFaced())
    result = rig.port.execute_sync(request)
    for effect in rig.sim.applied:
        if isinstance(effect, Start):
            assert effect.command == "echo checked"
            assert not effect.env
    assert SECRET not in json.dumps(result.content)
    assert result.status in ("error", "uncertain", "ok")
    if result.status == "error":
        assert result.content["error_type"] == ErrorCode.REQUEST_DRIFTED.value


def attrs_evolve_call(request: sandrail.ToolRequest, arguments: Any) -> sandrail.ToolRequest:
    import attrs

    return attrs.evolve(request, call=attrs.evolve(request.call, arguments=arguments))


def test_c5_arguments_that_are_not_a_json_object_are_refused() -> None:
    rig = Rig()
    for arguments in (["command", "x"], {"command": object()}, {1: "x"}, "echo x"):
        request = attrs_evolve_call(rig.request("sandbox_status"), arguments)
        result = rig.port.execute_sync(request)
        assert result.status == "error", arguments
        assert result.content["error_type"] == ErrorCode.ARGUMENTS_INVALID.value
    assert rig.sim.effects_seen == []


# -- artifacts (also seen) -------------------------------------------------------


class _Store:
    def __init__(self, ref: ArtifactRef) -> None:
        self.ref = ref

    def write(self, key: str, content: str, media_type: str) -> ArtifactRef:
        return self.ref


@pytest.mark.parametrize(
    "ref",
    [
        ArtifactRef(uri="mem://x", size_bytes=10**30),
        ArtifactRef(uri="mem://x", size_bytes=-1),
        ArtifactRef(uri="é" * 200, size_bytes=5),
        ArtifactRef(uri='"' * 200, size_bytes=5),
    ],
)
def test_c12_c15_an_artifact_store_answer_that_cannot_fit_is_dropped_not_fatal(
    ref: ArtifactRef,
) -> None:
    """An ok launch was reported uncertain because a store's huge size_bytes
    made the second fit raise; a URI was checked in characters, not bytes."""
    rig = Rig(
        scripts={"chatty": Script.prints("x" * 50_000)},
        artifacts=_Store(ref),
        max_output_bytes=2_000,
    )
    result = rig.run("run_command", {"command": "chatty"})
    assert result.status == "ok", result.content
    assert result.content["output_budget"] == {"truncated": True}
    assert len(sandrail.canonical_json(result.content)) <= 2_000


# -- the command line --------------------------------------------------


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sandrail", *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
    )


@pytest.mark.parametrize(
    "args",
    [
        ("run", "--session", " ", "--", "echo", "hi"),
        ("run", "--session", "", "--", "echo", "hi"),
        ("run", "--max-output-bytes", "12", "--", "echo"),
        ("run", "--env", "=x", "--", "env"),
        ("code", "/nonexistent/file.py"),
        ("replay", "/nonexistent.jsonl"),
    ],
)
def test_bad_cli_input_is_one_line_and_a_documented_status(args: tuple[str, ...]) -> None:
    done = _cli(*args)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].lower().startswith("error:")


def test_a_tampered_cassette_with_a_lone_surrogate_is_reported_not_a_traceback(
    tmp_path: Path,
) -> None:
    golden = Path(__file__).parent / "golden" / "foreground.jsonl"
    text = golden.read_text(encoding="utf-8").replace("hello golden", "hello \\udc80 golden")
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text(text, encoding="utf-8")
    done = _cli("replay", str(tampered))
    assert done.returncode in (1, 2), done
    assert "Traceback" not in done.stderr + done.stdout


_FILLER = "".join(f"row {n:06d}\n" for n in range(20_000))
_NEAR_ENDS = [
    *range(0, 40, 9),
    *range(600, 800, 7),
    *(len(_FILLER) - n for n in range(600, 800, 7)),
]


@pytest.mark.parametrize("at", _NEAR_ENDS)
def test_c17_a_secret_at_the_ends_of_a_cut_output_is_masked_whole(at: int) -> None:
    """Output too big for the budget is read only at its ends; a
    secret straddling where a head or tail read begins or ends never shows,
    not even in part."""
    output = _FILLER[:at] + SECRET + _FILLER[at:]
    rig = Rig(scripts={"big": Script.prints(output)}, max_output_bytes=2_000)
    result = rig.run("run_command", {"command": "big", "env": {"TOKEN": SECRET}})
    assert result.status == "ok"
    stdout = result.content["stdout"]
    assert SECRET not in stdout
    for piece in (SECRET[:8], SECRET[-8:], SECRET[6:14]):
        assert piece not in stdout, (at, piece)


# -- held starts and lost ledgers -------------------------


def _manual(*faults: Fault) -> Rig:
    sim = Simulator(plan=FaultPlan(faults), late_delivery="manual")
    return Rig(sim=sim)


def test_c2_a_held_start_after_its_retry_launched_and_the_ledger_was_lost_adds_nothing() -> None:
    """The first Start is held; the retry launches (the
    sandbox can prove it never held the claim); the command wipes the ledger;
    then the held Start arrives. It was issued against the lost ledger, so it
    launches nothing."""
    rig = _manual(
        Fault(effect="Start", occurrence=0, kind=FaultKind.DELIVERED_LATE),
        Fault(effect="Start", occurrence=1, kind=FaultKind.LEDGER_WIPED, when="after"),
    )
    assert rig.run("run_command", {"command": "echo hi"}).status == "uncertain"
    assert rig.run("run_command", {"command": "echo hi"}, call_id="c2").status == "uncertain"
    rig.sim.deliver_held()
    third = rig.run("run_command", {"command": "echo hi"}, call_id="c3")
    assert third.status == "uncertain", third.content
    assert rig.sim.launches[rig.task_id()] == 1


def test_c2_the_same_with_the_retry_answered_ok_before_the_wipe() -> None:
    rig = _manual(Fault(effect="Start", occurrence=0, kind=FaultKind.DELIVERED_LATE))
    assert rig.run("run_command", {"command": "echo hi"}).status == "uncertain"
    assert rig.run("run_command", {"command": "echo hi"}, call_id="c2").status == "ok"
    rig.sim.wipe_ledger("sbx-1")
    rig.sim.deliver_held()
    assert rig.sim.launches[rig.task_id()] == 1


def test_c3_a_retry_with_other_arguments_never_runs_while_the_first_start_may_arrive() -> None:
    """The first Start (echo first) is held; a second call
    under the same key with other arguments must not launch them."""
    rig = _manual(Fault(effect="Start", occurrence=0, kind=FaultKind.DELIVERED_LATE))
    assert rig.run("run_command", {"command": "echo first"}).status == "uncertain"
    second = rig.run("run_command", {"command": "echo SECOND"}, call_id="c2")
    assert second.status in ("uncertain", "error"), second.content
    rig.sim.deliver_held()
    launched = [e.command for e in rig.sim.applied if isinstance(e, Start)]
    assert "echo SECOND" not in [
        task.request.command for box in rig.sim._sandboxes.values() for task in box.tasks.values()
    ], launched
    assert rig.sim.launches[rig.task_id()] == 1


class _FlipForThePolicy(Mapping[str, Any]):
    """Shows ``echo safe`` only while the policy is reading it."""

    reading = False

    def _face(self) -> dict[str, Any]:
        return {"command": "echo safe" if self.reading else "echo EVIL"}

    def __getitem__(self, key: str) -> Any:
        return self._face()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._face())

    def __len__(self) -> int:
        return 1


def test_c8_c9_the_policy_judges_the_arguments_that_run() -> None:
    """The policy saw ``echo safe`` on the live request and
    ``echo EVIL`` ran. The policy now gets the call's own plain copy."""
    arguments = _FlipForThePolicy()
    seen: list[Any] = []

    def policy(request: sandrail.ToolRequest) -> Any:
        arguments.reading = True
        try:
            seen.append(dict(request.call.arguments))
            request.call.arguments["command"] = "echo changed by the policy"  # type: ignore[index]
            return sandrail.ALLOW
        finally:
            arguments.reading = False

    rig = Rig(authorize=policy)
    request = attrs_evolve_call(rig.request("run_command", {}), arguments)
    result = rig.port.execute_sync(request)
    ran = [e.command for e in rig.sim.applied if isinstance(e, Start)]
    assert ran in ([], [seen[0]["command"]]), (ran, seen)
    assert "echo changed by the policy" not in ran
    assert result.status in ("ok", "error")


def test_c17_the_command_field_of_a_result_masks_env_values() -> None:
    """The ``command`` field of a result shows the command masked."""
    rig = Rig()
    value = "Zq9xK2pL7wVb"
    result = rig.run("run_command", {"command": f"echo {value}", "env": {"TOKEN": value}})
    assert value not in json.dumps(result.content)
    assert result.content["command"] == f"echo {REDACTED}"


def test_c17_a_deny_reason_quoting_the_request_is_masked() -> None:
    """A policy's deny reason quoting the request shows it masked."""
    value = "Zq9xK2pL7wVb"
    rig = Rig(authorize=lambda request: sandrail.Deny(reason=f"no: {request.call.arguments}"))
    result = rig.run("run_command", {"command": "true", "env": {"TOKEN": value}})
    assert result.content["error_type"] == ErrorCode.POLICY_DENIED.value
    assert value not in json.dumps(result.content)


def test_c17_an_interaction_id_holding_a_secret_is_a_harness_error() -> None:
    """An id cannot be cut (C8) and a secret cannot show."""
    value = "Zq9xK2pL7wVb"
    rig = Rig(authorize=lambda request: sandrail.ApprovalRequired(interaction_id=f"ask-{value}"))
    result = rig.run("run_command", {"command": "true", "env": {"TOKEN": value}})
    assert result.content["error_type"] == ErrorCode.HARNESS_CALLBACK_FAILED.value
    assert value not in json.dumps(result.content)
    assert rig.sim.effects_seen == []


@pytest.mark.parametrize("field", ["session", "operation_key", "call_id"])
def test_c17_an_env_value_the_identity_shows_is_refused_before_anything_runs(field: str) -> None:
    """A value equal to (or inside) an identity field would
    show in every result, which C13 forbids cutting."""
    rig = Rig(session_id="session-secret-1234")
    values = {"session": "session-secret-1234", "operation_key": "op-key-12345678"}
    values["call_id"] = "call-id-12345678"
    result = rig.run(
        "run_command",
        {"command": "true", "env": {"LEAKED": values[field]}},
        key="op-key-12345678",
        call_id="call-id-12345678",
    )
    assert result.status == "error"
    assert result.content["error_type"] == ErrorCode.ARGUMENTS_INVALID.value
    (problem,) = result.content["problems"]
    assert problem["field"] == "arguments.env.LEAKED"
    assert rig.sim.effects_seen == []


@pytest.mark.parametrize("field", ["operation_key", "call_id"])
@pytest.mark.parametrize("source", ["earlier_env", "redact"])
def test_c17_a_value_the_session_masks_is_refused_in_a_later_calls_identity(
    field: str, source: str
) -> None:
    """A value masked for the port's life (an earlier call's
    env value, or a ``redact=`` value) was shown whole inside a later call's
    operation key or call id. The later call is refused before anything
    runs, naming the field, never the value."""
    value = "hunter2hunter2"
    rig = Rig(redact=[value] if source == "redact" else ())
    if source == "earlier_env":
        first = rig.run("run_command", {"command": "true", "env": {"X": value}}, key="op-1")
        assert first.status == "ok"
    identity = {"key": "op-2", "call_id": "call-2"}
    identity["key" if field == "operation_key" else "call_id"] = f"id-{value}"
    seen = len(rig.sim.effects_seen)
    result = rig.run("run_command", {"command": "true"}, **identity)
    assert result.status == "error"
    assert result.content["error_type"] == ErrorCode.ARGUMENTS_INVALID.value
    (problem,) = result.content["problems"]
    assert problem["field"] == field
    assert value not in result.to_json()
    assert len(rig.sim.effects_seen) == seen


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (("run", "--backgroud", "--", "sleep", "60"), 2),
        (("run", "--session", "\udcff", "--", "true"), 2),
        (("code", "/dev/zero"), 2),
    ],
)
def test_more_bad_cli_input(args: tuple[str, ...], status: int) -> None:
    """A mistyped option is not part
    of the command; a surrogate session, an endless snippet file."""
    done = subprocess.run(
        [sys.executable, "-m", "sandrail", *args],
        capture_output=True,
        text=True,
        timeout=60,
        errors="replace",
    )
    assert done.returncode == status, done
    assert "Traceback" not in done.stderr


def test_a_result_that_cannot_be_written_is_not_a_quiet_success() -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "sandrail", "run", "--", "echo", "hi"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert done.returncode == 5
    assert "its status was ok" in done.stderr


# -- E2B over local-e2b, at the port ---------------


@pytest.mark.parametrize("kind", [FaultKind.NOT_DELIVERED, FaultKind.ABORT])
@pytest.mark.parametrize("tools", ["command", "code"])
def test_c6_a_retry_whose_ensure_fails_after_the_key_launched_is_uncertain_not_nothing_ran(
    kind: FaultKind, tools: str
) -> None:
    """Attack 3, break 1: the key's first call launched (``ok``); the retry's
    Ensure was not delivered (E2B: the sandbox looked gone). "Nothing ran,
    retry" would be false and invites a second launch under a new key: the
    retry is ``uncertain`` with the record's locator, never ``executed: false``."""
    name, arguments = (
        ("run_command", {"command": "echo once"})
        if tools == "command"
        else ("sandbox_run_code", {"code": "print(1)", "language": "python"})
    )
    rig = Rig(tools=tools, plan=FaultPlan((Fault(effect="Ensure", occurrence=1, kind=kind),)))  # type: ignore[arg-type]
    first = rig.run(name, arguments)
    assert first.status == "ok", first.content
    retry = rig.run(name, arguments, call_id="retry")
    assert retry.status == "uncertain", retry.content
    assert "executed" not in retry.content
    assert retry.content["task_id"] == rig.task_id()
    assert retry.content["sandbox_id"] == first.content["sandbox_id"]
    assert rig.sim.launches[rig.task_id()] == 1


def test_c5_an_ensure_that_fails_for_a_key_that_never_launched_is_still_nothing_ran() -> None:
    """The other side: with no earlier start of the key, an undelivered
    Ensure is ``error`` with ``executed: false`` (C5), and the retry launches once."""
    rig = Rig(plan=one_fault("Ensure", FaultKind.NOT_DELIVERED))
    failed = rig.run("run_command", {"command": "echo once"})
    assert (failed.status, failed.content["executed"]) == ("error", False)
    assert rig.run("run_command", {"command": "echo once"}, call_id="c2").status == "ok"
    assert rig.sim.launches[rig.task_id()] == 1
