"""C17 in a cassette: what a Recorder writes when secrets overlap, and where a
named secret may not stand (the port's settings, a call's identity), each as
an outside attack found it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandrail import replay_file
from sandrail.interpreters.replay import Recorder, Replayer, ResultEntry
from sandrail.interpreters.simulator import Simulator
from tests.embed_rig import command_toolset


def _recorded(path: Path, *, secrets: tuple[str, ...] = (), session_id: str = "s-1") -> Any:
    recorder = Recorder(Simulator(), path, secrets=secrets)
    return recorder, command_toolset(recorder, session_id=session_id)


X = "QzXkWmJvRtPyLnHg"
Y = "PyLnHgBbCcDdEeFf"  # begins with X's last six characters
LONG = "SuperSecretDeployKey_9Zq"
TAIL = "qWwWwWwWw"  # shares LONG's last character


@pytest.mark.parametrize(
    ("env", "named", "command", "pieces"),
    [
        ({"X": X, "Y": Y}, (), f"echo {X}{Y[6:]}", (X[:10], Y[-10:])),
        ({"X": LONG, "Y": TAIL}, (), f"echo {LONG}{TAIL[1:]}", (LONG[:-1], TAIL[1:])),
        ({"X": LONG}, (TAIL,), f"echo {LONG}{TAIL[1:]}", (LONG[:-1], TAIL[1:])),
    ],
    ids=["two-env-values", "one-character-overlap", "env-value-and-named-secret"],
)
def test_c17_overlapping_secrets_leave_no_piece_in_the_cassette_and_it_replays(
    tmp_path: Path, env: dict[str, str], named: tuple[str, ...], command: str, pieces: Any
) -> None:
    """Two secrets that overlap in a command's text are cut as one run, as
    results mask them: cutting one first left most of the other in the
    request line and the ``Start`` step, and the replay then diverged."""
    path = tmp_path / "overlap.jsonl"
    recorder, toolset = _recorded(path, secrets=named)
    result = toolset.call_sync(
        "run_command", {"command": command, "env": env}, call_id="c1", operation_key="k1"
    )
    recorder.close()
    assert result.status == "ok", result.content
    assert result.content["command"] == "echo <redacted>"
    written = path.read_text(encoding="utf-8")
    for piece in pieces:
        assert piece not in written
        assert piece not in result.to_json()
    assert replay_file(path).calls == 1


def test_c17_a_named_secret_in_the_ports_settings_is_refused_before_the_header(
    tmp_path: Path,
) -> None:
    """The header holds the port's settings whole (a replay rebuilds the port
    from them): a Recorder secret among them is refused, with nothing written."""
    path = tmp_path / "header.jsonl"
    with pytest.raises(ValueError, match="secrets stands in the port's settings"):
        _recorded(path, secrets=("NmSeCrEtWoRdQq",), session_id="s-NmSeCrEtWoRdQq")
    assert "NmSeCrEtWoRdQq" not in path.read_text(encoding="utf-8")


@pytest.mark.parametrize("where", ["operation_key", "call_id"])
def test_c17_a_named_secret_in_a_calls_identity_is_refused_before_anything_runs(
    tmp_path: Path, where: str
) -> None:
    """Every result shows a call's identity whole (C13), so a Recorder secret
    in it is refused before anything runs, as an env value there is."""
    path = tmp_path / "identity.jsonl"
    recorder, toolset = _recorded(path, secrets=("NmSeCrEtWoRdQq",))
    keys = {"call_id": "c1", "operation_key": "k1"}
    keys[where] = f"x-NmSeCrEtWoRdQq-{where}"
    result = toolset.call_sync("run_command", {"command": "echo hi"}, **keys)
    recorder.close()
    assert (result.status, result.content["executed"]) == ("error", False), result.content
    assert "NmSeCrEtWoRdQq" not in result.to_json()
    assert "NmSeCrEtWoRdQq" not in path.read_text(encoding="utf-8")


def _replayed_results(path: Path) -> list[Any]:
    report = replay_file(path)
    assert report.complete
    return [entry.result for entry in report.transcript if isinstance(entry, ResultEntry)]


@pytest.mark.parametrize("where", ["operation_key", "call_id"])
def test_c17_a_call_refused_for_a_named_secret_in_its_identity_replays_to_its_refusal(
    tmp_path: Path, where: str
) -> None:
    """The cassette holds the marker where the secret stood, which no port
    masks: the replayed core ran the call the recorded core refused, and the
    replay diverged. The call line says its identity was cut, and the
    replay puts a value its port masks there, so the core refuses it again."""
    path = tmp_path / "refused.jsonl"
    recorder, toolset = _recorded(path, secrets=("NmSeCrEtWoRdQq",))
    keys = {"call_id": "c1", "operation_key": "k1"}
    keys[where] = f"x-NmSeCrEtWoRdQq-{where}"
    refused = toolset.call_sync("run_command", {"command": "echo hi"}, **keys)
    ran = toolset.call_sync("run_command", {"command": "echo hi"}, call_id="c2", operation_key="k2")
    recorder.close()
    assert refused.content["executed"] is False
    assert _replayed_results(path) == [refused.to_dict(), ran.to_dict()]


def test_c17_a_call_refused_for_an_earlier_env_value_in_its_identity_replays_to_its_refusal(
    tmp_path: Path,
) -> None:
    """The same for an env value an earlier call passed, which the session
    masks from then on; an identity that holds the marker itself is no
    secret and runs, recorded and replayed alike."""
    path = tmp_path / "env-refused.jsonl"
    recorder, toolset = _recorded(path)
    value = "EnVsEcReTvAlUe1"
    results = [
        toolset.call_sync(
            "run_command",
            {"command": "echo hi", "env": {"TOKEN": value}},
            call_id="c1",
            operation_key="k1",
        ),
        toolset.call_sync(
            "run_command", {"command": "echo hi"}, call_id="c2", operation_key=f"x-{value}"
        ),
        toolset.call_sync(
            "run_command", {"command": "echo hi"}, call_id="c3", operation_key="x-<redacted>"
        ),
    ]
    recorder.close()
    assert [result.status for result in results] == ["ok", "error", "ok"]
    assert value not in path.read_text(encoding="utf-8")
    assert _replayed_results(path) == [result.to_dict() for result in results]


def test_c17_a_replayer_named_the_secret_replays_a_live_call_refused_for_it(
    tmp_path: Path,
) -> None:
    """A live request replayed through a port on a Replayer carries the secret
    itself: named to the replayer, it is refused there as it was recorded."""
    path = tmp_path / "live.jsonl"
    secret = "NmSeCrEtWoRdQq"
    recorder, toolset = _recorded(path, secrets=(secret,))
    recorded = toolset.call_sync(
        "run_command", {"command": "echo hi"}, call_id="c1", operation_key=f"x-{secret}"
    )
    recorder.close()
    replayer = Replayer(path, secrets=(secret,))
    replaying = command_toolset(replayer)
    replayed = replaying.call_sync(
        "run_command", {"command": "echo hi"}, call_id="c1", operation_key=f"x-{secret}"
    )
    replayer.assert_consumed()
    assert replayed.to_dict() == recorded.to_dict()
    assert recorded.content["executed"] is False
