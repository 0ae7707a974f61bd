"""Recording and replaying calls whose identity or requests hold secrets,
and a recorder whose file fails: what an outside attack on the recorder's
close rules and the replay of refused calls found, each case a test.

A call whose operation key or call id holds a secret (a recorder's named
secret, an env value of its own or of an earlier call) is refused before
anything runs; the cassette cuts the secret out of its identity, so a replay
of the file takes the recorded refusal as it was, and a replay on a live port
(the real requests, the secrets named to the replayer) refuses it again.
Nothing a replay says, its results or its divergence messages, shows a
secret the recording session masked.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

import sandrail
from sandrail.interpreters.replay import (
    CassetteError,
    DivergenceError,
    Recorder,
    RecorderBusyError,
    RecorderClosedError,
    RecorderWriteError,
    Replayer,
    ResultEntry,
    load_cassette,
)
from sandrail.interpreters.simulator import Simulator
from tests.embed_rig import command_toolset

SECRET = "hunter2-token"
ENV = "envvalue-0123456789"
Call = tuple[dict[str, Any], str, str]
"""A call's arguments, call id and operation key."""


def _run(toolset: sandrail.Toolset, calls: list[Call]) -> list[sandrail.ToolResult]:
    return [
        toolset.call_sync("run_command", arguments, call_id=call_id, operation_key=key)
        for arguments, call_id, key in calls
    ]


def _recorded(path: Path, calls: list[Call]) -> list[sandrail.ToolResult]:
    recorder = Recorder(Simulator(), path, secrets=[SECRET])
    results = _run(command_toolset(recorder), calls)
    recorder.close()
    return results


def _calls_with(*identity_calls: Call) -> list[Call]:
    return [*identity_calls, ({"command": "echo after"}, "c9", "k:after")]


IDENTITIES: dict[str, list[Call]] = {
    "named secret in the key, the marker in the call id": _calls_with(
        ({"command": "echo one"}, "<redacted>", f"k:{SECRET}")
    ),
    "the marker and a named secret in one key": _calls_with(
        ({"command": "echo one"}, "c1", f"<redacted>{SECRET}")
    ),
    "its own env value in its key": _calls_with(
        ({"command": "echo one", "env": {"TOK": ENV}}, "c1", f"k:{ENV}")
    ),
    "its own env value in its call id, the marker in its key": _calls_with(
        ({"command": "echo one", "env": {"TOK": ENV}}, f"id{ENV}", "k:<redacted>")
    ),
    "an earlier call's env value in its key": _calls_with(
        ({"command": "echo one", "env": {"TOK": ENV}}, "c0", "k:c0"),
        ({"command": "echo one"}, "c1", f"k:{ENV}"),
    ),
}


@pytest.mark.parametrize("calls", IDENTITIES.values(), ids=IDENTITIES)
def test_c5_c17_a_call_refused_for_a_secret_in_its_identity_replays_to_its_refusal(
    tmp_path: Path, calls: list[Call]
) -> None:
    path = tmp_path / "refused.jsonl"
    recorded = _recorded(path, calls)
    assert "error" in {result.status for result in recorded}
    text = path.read_text(encoding="utf-8")
    assert SECRET not in text
    assert ENV not in text
    report = sandrail.replay_file(path)
    assert report.complete
    results = [entry.result for entry in report.transcript if isinstance(entry, ResultEntry)]
    assert results == [r.to_dict() for r in recorded]


@pytest.mark.parametrize("calls", IDENTITIES.values(), ids=IDENTITIES)
def test_c17_a_live_port_on_a_replayer_gets_the_recorded_results(
    tmp_path: Path, calls: list[Call]
) -> None:
    """The real requests, the named secret named to the replayer: the same
    results; an earlier call's env value needs no naming (the replayer cuts
    it from later calls, as the recorder did)."""
    path = tmp_path / "live.jsonl"
    recorded = _recorded(path, calls)
    replayer = Replayer(path, secrets=[SECRET])
    replayed = _run(command_toolset(replayer), calls)
    replayer.assert_consumed()
    assert [r.to_dict() for r in replayed] == [r.to_dict() for r in recorded]


def test_c17_a_live_replay_masks_the_named_secret_in_its_results(tmp_path: Path) -> None:
    """A replayer's named secrets are masked in the results of the port it
    answers, as a recorder's were: the replay returns what was recorded,
    never the secret a live request carries."""
    path = tmp_path / "named.jsonl"
    calls: list[Call] = [({"command": f"echo {SECRET}"}, "c1", "k:1")]
    (recorded,) = _recorded(path, calls)
    assert SECRET not in recorded.to_json()
    replayer = Replayer(path, secrets=[SECRET])
    (replayed,) = _run(command_toolset(replayer), calls)
    replayer.assert_consumed()
    assert SECRET not in replayed.to_json()
    assert replayed.to_dict() == recorded.to_dict()


def test_c17_a_divergence_never_shows_an_env_value_the_session_passed(tmp_path: Path) -> None:
    """A later call whose command differs from the recording and holds an
    earlier call's env value: the divergence names the difference with the
    value cut out, as every result of that session showed it."""
    path = tmp_path / "diverge.jsonl"
    _recorded(
        path,
        [
            ({"command": "echo one", "env": {"T": ENV}}, "c0", "k:c0"),
            ({"command": "echo x"}, "c1", "k:c1"),
        ],
    )
    replayer = Replayer(path)
    toolset = command_toolset(replayer)
    toolset.call_sync(
        "run_command",
        {"command": "echo one", "env": {"T": ENV}},
        call_id="c0",
        operation_key="k:c0",
    )
    with pytest.raises(DivergenceError) as caught:
        toolset.call_sync(
            "run_command", {"command": f"echo {ENV}"}, call_id="c1", operation_key="k:c1"
        )
    assert "command" in str(caught.value)
    assert ENV not in str(caught.value)


def test_c17_a_call_that_ran_with_a_secrets_text_in_its_identity_is_named_unreplayable(
    tmp_path: Path,
) -> None:
    """A key holding a secret's JSON-escaped form is not the secret, so the
    call runs; the cassette cuts that text (its escaped form is how the
    secret reads in JSON), and the launch was keyed by it. The replay says
    so, instead of diverging at a task id."""
    quoted = 'pass"word123'
    path = tmp_path / "escaped.jsonl"
    recorder = Recorder(Simulator(), path, secrets=[quoted])
    (result,) = _run(
        command_toolset(recorder), [({"command": "echo one"}, "c1", 'k:pass\\"word123')]
    )
    recorder.close()
    assert result.status == "ok"
    with pytest.raises(DivergenceError, match="cannot replay; record it again"):
        sandrail.replay_file(path)


class _FailingSink(io.StringIO):
    """A file whose ``fail_at``-th write fails (a full disk)."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.writes = 0
        self.fail_at = fail_at

    def write(self, text: str) -> int:
        self.writes += 1
        if self.writes == self.fail_at:
            raise OSError(28, "No space left on device")
        return super().write(text)


def test_c5_a_call_whose_line_could_not_be_written_keeps_no_close_waiting() -> None:
    sink = _FailingSink(fail_at=2)  # the header, then the call's line
    recorder = Recorder(Simulator(), sink)
    (result,) = _run(command_toolset(recorder), [({"command": "echo one"}, "c1", "k:1")])
    assert (result.status, result.content["executed"]) == ("error", False)
    with pytest.raises(RecorderWriteError, match="the call line of call 1"):
        recorder.close()
    lines = [json.loads(line) for line in sink.getvalue().splitlines()]
    assert [line["kind"] for line in lines] == ["header", "end"]
    assert lines[-1]["calls"] == 0


def test_attaching_a_closed_recorder_is_refused_by_name(tmp_path: Path) -> None:
    recorder = Recorder(Simulator(), tmp_path / "closed.jsonl")
    recorder.close()
    with pytest.raises(RecorderClosedError, match="closed"):
        command_toolset(recorder)


def test_a_with_block_that_raises_while_a_call_runs_keeps_its_own_exception() -> None:
    """Leaving ``with recorder:`` by an exception while a call is still being
    recorded: the block's exception goes on (the recorder stays open for the
    call), not a ``RecorderBusyError`` in its place."""
    recorder = Recorder(Simulator(), io.StringIO())
    command_toolset(recorder)
    layer = recorder.open_layer(
        sandrail.ToolRequest(
            call=sandrail.ToolCall(name="run_command", call_id="c1", arguments={"command": "x"}),
            operation_key="k:1",
            session_id="s-1",
            definition=command_toolset(Simulator()).definition("run_command"),
            identity=sandrail.AgentIdentity(agent_id="agent-1"),
        )
    )
    with pytest.raises(KeyError, match="the block's own"), recorder:
        raise KeyError("the block's own")
    with pytest.raises(RecorderBusyError):
        recorder.close()
    layer.close()
    recorder.close()


@pytest.mark.parametrize(
    ("call_id", "key", "command"),
    [
        ("c1", f"k:{SECRET}", "echo one"),
        (f"{SECRET}{SECRET}", "k:1", "echo one"),
        ("c1", "k:1", f"echo {SECRET} and more"),
    ],
    ids=["in the key", "twice in the call id", "in the command"],
)
def test_c17_a_divergence_for_a_secret_the_replayer_was_not_named_does_not_show_it(
    tmp_path: Path, call_id: str, key: str, command: str
) -> None:
    """The live requests carry a recorder's named secret, and the replayer
    was not told it: the replay diverges where the recording cut it, and the
    message says so without showing what stands there."""
    path = tmp_path / "unnamed.jsonl"
    _recorded(path, [({"command": command}, call_id, key)])
    replayer = Replayer(path)
    with pytest.raises(DivergenceError) as caught:
        _run(command_toolset(replayer), [({"command": command}, call_id, key)])
    assert "name that secret to the Replayer" in str(caught.value)
    assert SECRET not in str(caught.value)
    assert SECRET[:6] not in str(caught.value)


def test_c5_a_result_line_the_file_refused_is_reported_when_the_recorder_closes() -> None:
    """The call keeps its true result (a recorder never changes one), and
    ``close`` says the cassette is incomplete, once, after closing."""
    call: list[Call] = [({"command": "echo one"}, "c1", "k:1")]
    counted = _FailingSink(fail_at=0)
    _run(command_toolset(Recorder(Simulator(), counted)), call)
    sink = _FailingSink(fail_at=counted.writes)  # the last: the call's result
    recorder = Recorder(Simulator(), sink)
    (result,) = _run(command_toolset(recorder), call)
    assert result.status == "ok"
    with pytest.raises(RecorderWriteError, match="the result line of call 1"):
        recorder.close()
    recorder.close()  # closed: nothing more to say


def test_a_recorder_whose_header_the_file_refused_is_not_attached() -> None:
    recorder = Recorder(Simulator(), _FailingSink(fail_at=1))
    with pytest.raises(OSError, match="No space"):
        command_toolset(recorder)
    assert not recorder.attached


def test_a_secret_holding_the_redaction_marker_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="redaction marker"):
        Recorder(Simulator(), io.StringIO(), secrets=["my-<redacted>-token"])


def test_a_file_that_is_no_cassette_is_not_called_truncated(tmp_path: Path) -> None:
    """A program's binary (no newline at its end) is named by its first
    line, not taken for a cassette cut short."""
    path = tmp_path / "binary.jsonl"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe\nmore")
    with pytest.raises(CassetteError, match=":1: not UTF-8"):
        load_cassette(path)


def test_a_call_interrupted_before_its_result_is_named_in_a_complete_file(tmp_path: Path) -> None:
    """The end line was written, one call has no result: the error says the
    call ended without one, not that the file is truncated."""

    def interrupting(request: sandrail.ToolRequest) -> sandrail.PolicyDecision:
        raise KeyboardInterrupt

    path = tmp_path / "interrupted.jsonl"
    recorder = Recorder(Simulator(), path)
    toolset = command_toolset(recorder, authorize=interrupting)
    with pytest.raises(KeyboardInterrupt):
        _run(toolset, [({"command": "echo one"}, "c1", "k:1")])
    recorder.close()
    with pytest.raises(CassetteError, match="ended without one"):
        load_cassette(path)
