"""Cassettes and the core's result format: a cassette replays only under the
omission marker it was recorded with. An outside attack found that a
changed marker made a cassette diverge at its first cut result, with both
texts shown alike, instead of saying why."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import sandrail
import sandrail.core._budget as budget
from sandrail import replay_file
from sandrail.cli.replay import replay as replay_command
from sandrail.interpreters._cassette_codec import FIRST_RESULT_FORMAT, result_format
from sandrail.interpreters.replay import CassetteError, Recorder, Replayer
from sandrail.interpreters.simulator import Simulator

GOLDEN = Path(__file__).parent / "golden"
BIG_OUTPUT = GOLDEN / "big_output.jsonl"  # its result is cut: it holds a marker


@pytest.fixture
def another_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The core of a later sandrail whose omission marker reads otherwise."""
    marker = budget._MARKER_FORMAT.replace("{}", "{} (another)")  # whatever the marker reads
    monkeypatch.setattr(budget, "_MARKER_FORMAT", marker)
    monkeypatch.setattr(budget, "_MARKER_BASE", budget.escaped_size(marker.format("")))
    monkeypatch.setattr(
        budget,
        "_MARKER_PATTERN",
        re.compile(re.escape(marker).replace(re.escape("{}"), "(0|[1-9][0-9]*)")),
    )


def _header(path: Path) -> dict[str, object]:
    return json.loads(path.read_text(encoding="utf-8").split("\n", 1)[0])  # type: ignore[no-any-return]


def _with_header(source: Path, target: Path, **changes: object) -> Path:
    header, rest = source.read_text(encoding="utf-8").split("\n", 1)
    data = {**json.loads(header), **changes}
    data = {key: value for key, value in data.items() if value is not None}
    target.write_text(json.dumps(data) + "\n" + rest, encoding="utf-8")
    return target


@pytest.mark.usefixtures("another_marker")
def test_c12_a_cassette_recorded_with_another_omission_marker_is_refused_by_name() -> None:
    """Replayed by a core whose marker changed, the recording is refused
    before anything runs, naming the cause, not replayed to a divergence."""
    with pytest.raises(CassetteError) as caught:
        replay_file(BIG_OUTPUT)
    message = str(caught.value)
    assert message.startswith(f"{BIG_OUTPUT}:1: recorded by sandrail ")
    assert "with another result format (its omission marker is " in message
    assert "12345 (another)" in message
    assert message.endswith("record it again")
    with pytest.raises(CassetteError, match="another result format"):
        Replayer(BIG_OUTPUT)


@pytest.mark.usefixtures("another_marker")
def test_c12_the_cli_explains_a_cassette_of_another_result_format_without_a_traceback() -> None:
    result = CliRunner().invoke(replay_command, [str(BIG_OUTPUT)])
    assert result.exit_code == 2
    assert "another result format" in result.output
    assert "Traceback" not in result.output


def test_c12_a_cassette_states_its_result_format_and_an_older_one_has_the_first(
    tmp_path: Path,
) -> None:
    """A header says which omission marker its results hold; a header that
    does not (written before headers said it) holds the first marker, and
    a header that states another one is refused."""
    older = _with_header(BIG_OUTPUT, tmp_path / "older.jsonl", result_format=None)
    assert "result_format" not in _header(older)
    if result_format() == FIRST_RESULT_FORMAT:
        assert replay_file(older).calls == 1
    else:  # a sandrail whose marker changed since: the older header is refused by name
        with pytest.raises(CassetteError, match="another result format"):
            replay_file(older)
    stated = _with_header(
        BIG_OUTPUT,
        tmp_path / "stated.jsonl",
        result_format={"omission_marker": budget.omission_marker(12345)},
    )
    assert replay_file(stated).calls == 1
    other = _with_header(
        BIG_OUTPUT,
        tmp_path / "other.jsonl",
        result_format={"omission_marker": "\n[12345 bytes cut]\n"},
    )
    with pytest.raises(CassetteError, match=r"omission marker is '\\n\[12345 bytes cut\]\\n'"):
        replay_file(other)
    broken = _with_header(BIG_OUTPUT, tmp_path / "broken.jsonl", result_format=["x"])
    with pytest.raises(CassetteError, match="result_format must be an object of strings"):
        replay_file(broken)


def test_c12_a_recording_states_the_omission_marker_of_the_sandrail_that_made_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "new.jsonl"
    recorder = Recorder(Simulator(), path)
    recorder.attach(
        sandrail.command_tools(
            backend=recorder,
            session_id="s",
            owner=sandrail.AgentOwner(agent_id="a"),
            authorize=lambda request: sandrail.ALLOW,
            assert_authority=lambda request: True,
        )
    )
    recorder.close()
    assert _header(path)["result_format"] == {"omission_marker": budget.omission_marker(12345)}
