"""Fidelity: one set of scenarios, run on the simulator and on the E2B
interpreter through the unmodified SDK against local-e2b (real HTTP, real
bash), in both owner modes; any difference in status or content fails.

Each scenario runs on every backend with the same session id (so the same
task ids) and must give the same results, with one field set aside:

- ``sandbox_id``: the simulator names sandboxes ``sbx-1``, ``sbx-2``, ...;
  E2B gives random ids. Both are opaque handles the harness only echoes
  back. One thing depends on them: the byte budget (C12) counts the id, so
  where presentation text is cut to fit, E2B's longer id leaves exactly
  that many bytes less of it (:func:`test_c12_big_output_is_cut_to_the_budget_alike`
  checks that, and nothing more, differs).

No timing field exists in these results (durations are not reported), so
nothing else is set aside. The simulator runs commands it cannot emulate
from ``scripts`` that say what real bash prints (written next to each
command); that is the claim the E2B run checks. Live E2B joins the
comparison when ``E2B_API_KEY`` is set (marker ``live``). Only the public
port API is used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

import sandrail
from sandrail.interpreters.e2b import E2BBackend
from sandrail.interpreters.simulator import Chunk, Script, Simulator
from sandrail.local_e2b import LocalE2B
from tests.e2b_world import needs_root, new_session, server_fixture

SCOPE = {"tenant": "t1"}
SET_ASIDE = ("sandbox_id",)
"""Fields compared by presence only (see the module doc)."""

pytestmark = needs_root
server = server_fixture()

View = tuple[str, dict[str, Any], dict[str, Any] | None]


class World:
    """A port on one backend for one session, plus request builders."""

    def __init__(self, backend: Any, session: str, *, native: bool, code: bool) -> None:
        self.native = native
        self.session = session
        owner: sandrail.NativeOwner | sandrail.AgentOwner = (
            sandrail.NativeOwner(scope=SCOPE) if native else sandrail.AgentOwner(agent_id="a1")
        )
        build = sandrail.code_tools if code else sandrail.command_tools
        self.port = build(
            backend=backend,
            session_id=session,
            owner=owner,
            authorize=lambda request: sandrail.ALLOW,
            assert_authority=lambda request: True,
            max_output_bytes=4_000,
        )

    @property
    def code_tool(self) -> str:
        return "run_code" if self.native else "sandbox_run_code"

    def call(self, tool: str, key: str, fence: int = 1, **arguments: Any) -> sandrail.ToolResult:
        identity: sandrail.NativeIdentity | sandrail.AgentIdentity
        if self.native:
            identity = sandrail.NativeIdentity(
                scope=SCOPE,
                run_id="r1",
                turn_id="t1",
                build_id="b1",
                task_chain_id="c1",
                parent_run_id=None,
                execution_fence=fence,
            )
        else:
            identity = sandrail.AgentIdentity(agent_id="a1")
        request = sandrail.ToolRequest(
            call=sandrail.ToolCall(name=tool, call_id=f"call-{key}", arguments=arguments),
            operation_key=key,
            session_id=self.session,
            definition=self.port.definition(tool),
            identity=identity,
        )
        return self.port.execute_sync(request)


def view(result: sandrail.ToolResult) -> View:
    """The result as compared: ids set aside keep only their presence."""
    content = {
        key: ("<set aside>" if key in SET_ASIDE and value else value)
        for key, value in result.content.items()
    }
    ref = result.background_command_ref
    return result.status, content, None if ref is None else dict(ref.to_dict())


Scenario = Callable[[World], list[sandrail.ToolResult]]


@pytest.fixture(scope="module")
def e2b_backend(server: LocalE2B) -> Iterator[E2BBackend]:
    with E2BBackend(**server.sdk_options) as backend:
        yield backend


@pytest.fixture
def agree(e2b_backend: E2BBackend) -> Callable[..., list[View]]:
    """``agree(scenario, native=..., code=..., scripts=...)`` runs the
    scenario on the simulator (with ``scripts``), on E2B over local-e2b,
    and on live E2B when configured; asserts they agree; returns the views."""

    def run(
        scenario: Scenario,
        *,
        native: bool = False,
        code: bool = False,
        scripts: Mapping[str, Script] | None = None,
    ) -> list[View]:
        session = new_session()
        backends: dict[str, Any] = {
            "simulator": Simulator(scripts=scripts),
            "local-e2b": e2b_backend,
        }
        if os.environ.get("E2B_API_KEY"):
            backends["live"] = E2BBackend(sandbox_timeout_seconds=600)
        seen = {
            name: [view(r) for r in scenario(World(b, session, native=native, code=code))]
            for name, b in backends.items()
        }
        reference = seen.pop("simulator")
        for name, views in seen.items():
            assert views == reference, f"{name} differs from the simulator"
        return reference

    return run


MODES = pytest.mark.parametrize("native", [False, True], ids=["agent", "native"])


# Each scenario runs on every backend and owner mode; the expected view is
# written once and must hold on all of them (that is the agreement).


@MODES
def test_echo(agree: Any, native: bool) -> None:
    ((status, content, _),) = agree(
        lambda w: [w.call("run_command", "k1", command="echo hi")], native=native
    )
    assert status == "ok"
    assert (content["status"], content["exit_code"], content["stdout"], content["stderr"]) == (
        "exited",
        0,
        "hi\n",
        "",
    )
    assert (content["stdout_bytes"], content["deduplicated"]) == (3, False)


@MODES
def test_exit_codes_and_both_streams(agree: Any, native: bool) -> None:
    both = "echo out; echo err >&2; exit 4"
    views = agree(
        lambda w: [
            w.call("run_command", "k1", command="exit 3"),
            w.call("run_command", "k2", command="false"),
            w.call("run_command", "k3", command="true"),
            w.call("run_command", "k4", command=both),
        ],
        native=native,
        scripts={both: Script.prints("out\n", stderr="err\n", exit_code=4)},
    )
    assert [(v[0], v[1]["exit_code"]) for v in views] == [
        ("ok", 3),
        ("ok", 1),
        ("ok", 0),
        ("ok", 4),
    ]
    assert (views[3][1]["stdout"], views[3][1]["stderr"]) == ("out\n", "err\n")


@MODES
def test_seq_unicode_and_cwd(agree: Any, native: bool) -> None:
    views = agree(
        lambda w: [
            w.call("run_command", "k1", command="seq 5"),
            w.call("run_command", "k2", command="echo 'ünï ✓'"),
            w.call("run_command", "k3", command="pwd", cwd="/tmp"),
        ],
        native=native,
        scripts={"pwd": Script.prints("/tmp\n")},
    )
    assert [v[1]["stdout"] for v in views] == ["1\n2\n3\n4\n5\n", "ünï ✓\n", "/tmp\n"]


_MARKER = re.compile(r"\n\[\.\.\. ([0-9]+) bytes omitted \.\.\.\]\n")


@MODES
def test_c12_big_output_is_cut_to_the_budget_alike(e2b_backend: E2BBackend, native: bool) -> None:
    """The one difference the sandbox id makes: the cut keeps as many
    bytes fewer of the output as E2B's id is longer; the rest agrees."""
    session = new_session()
    full = "".join(f"{n}\n" for n in range(1, 20001))
    views: dict[str, View] = {}
    ids: dict[str, str] = {}
    for name, backend in (("simulator", Simulator()), ("local-e2b", e2b_backend)):
        world = World(backend, session, native=native, code=False)
        result = world.call("run_command", "k1", command="seq 20000")
        ids[name] = result.content["sandbox_id"]
        assert len(sandrail.core.canonical_json(result.content)) <= 4_000
        views[name] = view(result)
    kept: dict[str, int] = {}
    for name, (status, content, _) in views.items():
        assert (status, content["stdout_bytes"]) == ("ok", len(full))
        head, omitted, tail = _MARKER.split(content.pop("stdout"))
        assert full.startswith(head)
        assert full.endswith(tail)
        assert len(head) + int(omitted) + len(tail) == len(full)
        kept[name] = len(sandrail.core.canonical_json(head + tail))
    assert views["simulator"] == views["local-e2b"]
    # Counted as the budget counts (canonical JSON: a newline is 2 bytes); a
    # cut never splits an escape, so the text may keep 1 byte less still.
    longer = len(ids["local-e2b"]) - len(ids["simulator"])
    assert longer <= kept["simulator"] - kept["local-e2b"] <= longer + 1


@MODES
def test_c2_retry_is_deduplicated_with_the_first_output(agree: Any, native: bool) -> None:
    first, again = agree(
        lambda w: [
            w.call("run_command", "k1", command="echo once"),
            w.call("run_command", "k1", command="echo once"),
        ],
        native=native,
    )
    assert (first[1]["deduplicated"], again[1]["deduplicated"]) == (False, True)
    assert {k: v for k, v in first[1].items() if k != "deduplicated"} == {
        k: v for k, v in again[1].items() if k != "deduplicated"
    }


@MODES
def test_c3_same_key_other_arguments_conflicts(agree: Any, native: bool) -> None:
    _, conflict = agree(
        lambda w: [
            w.call("run_command", "k1", command="echo one"),
            w.call("run_command", "k1", command="echo two"),
        ],
        native=native,
    )
    assert (conflict[0], conflict[1]["error_type"], conflict[1]["executed"]) == (
        "error",
        "e2b_command_operation_conflict",
        False,
    )


def test_c10_stale_fence_is_refused(agree: Any) -> None:
    _, stale = agree(
        lambda w: [
            w.call("run_command", "k1", fence=5, command="true"),
            w.call("run_command", "k2", fence=3, command="echo stale"),
        ],
        native=True,
    )
    assert (stale[0], stale[1]["error_type"]) == ("error", "e2b_command_fence_stale")


def test_foreground_timeout_is_timed_out_124(agree: Any) -> None:
    ((status, content, _),) = agree(
        lambda w: [w.call("run_command", "k1", command="sleep 30", timeout=1)]
    )
    assert (status, content["status"], content["exit_code"]) == ("ok", "timed_out", 124)


_LATER_SEQ = "sleep 0.5; seq 300"
_SEQ_300 = "".join(f"{n}\n" for n in range(1, 301))


@MODES
def test_background_then_read_with_wait_and_pages(agree: Any, native: bool) -> None:
    """A background launch answers while the command runs (on E2B within
    milliseconds of its start, so it prints half a second later)."""

    def scenario(w: World) -> list[sandrail.ToolResult]:
        started = w.call("run_command", "k1", command=_LATER_SEQ, background=True)
        task = started.content["task_id"]
        return [
            started,
            w.call("read_command_output", "k2", task_id=task, wait_seconds=10),
            w.call("read_command_output", "k3", task_id=task, max_bytes=64),
            w.call("read_command_output", "k4", task_id=task, stdout_cursor=64, max_bytes=64),
        ]

    later = Script(chunks=(Chunk(offset=0.5, stream="stdout", text=_SEQ_300),), duration=0.5)
    started, whole, page, next_page = agree(scenario, native=native, scripts={_LATER_SEQ: later})
    assert (started[0], started[1]["status"]) == ("ok", "running")
    assert started[2] is not None
    assert (whole[1]["status"], whole[1]["exit_code"]) == ("exited", 0)
    assert whole[1]["stdout"] == _SEQ_300
    assert (page[1]["stdout"], page[1]["output_may_be_truncated"]) == (
        whole[1]["stdout"][:64],
        True,
    )
    assert next_page[1]["stdout"] == whole[1]["stdout"][64:128]


@MODES
def test_c18_stop_then_read_then_stop_again(agree: Any, native: bool) -> None:
    def scenario(w: World) -> list[sandrail.ToolResult]:
        started = w.call("run_command", "k1", command="sleep 30", background=True)
        task = started.content["task_id"]
        return [
            w.call("stop_command", "k2", task_id=task),
            w.call("read_command_output", "k3", task_id=task),
            w.call("stop_command", "k4", task_id=task),
        ]

    stopped, read, again = agree(scenario, native=native)
    for result in (stopped, read, again):
        assert (result[0], result[1]["status"], result[1]["exit_code"]) == ("ok", "canceled", 143)


@MODES
def test_c4_read_of_a_task_not_owned_is_refused(agree: Any, native: bool) -> None:
    ((status, content, _),) = agree(
        lambda w: [w.call("read_command_output", "k1", task_id="f" * 64)], native=native
    )
    assert (status, content["error_type"]) == ("error", "e2b_command_not_owned")


@MODES
def test_c17_env_values_reach_the_command_and_never_the_result(agree: Any, native: bool) -> None:
    secret = "sk-conformance-0123456789"
    command = 'printf "%s|%s" "$TOKEN" "$PLAIN"'
    ((status, content, _),) = agree(
        lambda w: [
            w.call("run_command", "k1", command=command, env={"TOKEN": secret, "PLAIN": "abc"})
        ],
        native=native,
        scripts={command: Script.prints(f"{secret}|abc")},
    )
    assert status == "ok"
    assert content["stdout"] == f"{sandrail.core.REDACTED}|abc"


@MODES
def test_c16_snippet_runs_from_a_file(agree: Any, native: bool) -> None:
    code = "echo \"from $(printf 'a file')\"\n"
    ((status, content, _),) = agree(
        lambda w: [w.call(w.code_tool, "k1", code=code, language="bash")],
        native=native,
        code=True,
        scripts={code: Script.prints("from a file\n")},
    )
    assert status == "ok"
    assert (content["status"], content["exit_code"], content["stdout"]) == (
        "exited",
        0,
        "from a file\n",
    )
