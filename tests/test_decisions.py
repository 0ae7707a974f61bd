"""The question store on its own (``sandrail._decisions``): where a question
was shown, and a record that cannot keep it (docs/howto/approval.md)."""

from __future__ import annotations

from typing import Any

import sandrail
from sandrail._decisions import Decisions
from sandrail.core import OwnedCommand, ToolCall, ToolRequest, command_tool_definitions

_OWNER = sandrail.AgentOwner(agent_id="agent")
_RUN = next(d for d in command_tool_definitions() if d.name == "run_command")


def _request(command: str, key: str = "run:c1") -> ToolRequest:
    return ToolRequest(
        call=ToolCall(name="run_command", call_id="c1", arguments={"command": command}),
        operation_key=key,
        session_id="s",
        definition=_RUN,
    )


class _Record:
    """A record in memory; ``failing`` makes every write (or read) raise."""

    def __init__(self) -> None:
        self.rows: dict[str, OwnedCommand] = {}
        self.failing: str | None = None

    def remember(self, request: ToolRequest, row: OwnedCommand) -> OwnedCommand:
        if self.failing == "remember":
            raise OSError("disk full")
        self.rows[row.task_id] = row
        return row

    def resolve(self, request: ToolRequest, task: str) -> OwnedCommand | None:
        if self.failing == "resolve":
            raise OSError("gone")
        return self.rows.get(task)


def _decisions(record: _Record) -> Decisions:
    return Decisions(record.remember, record.resolve, "s", _OWNER)


def test_c8_a_question_counts_as_shown_only_in_the_place_it_was_shown() -> None:
    record = _Record()
    decisions = _decisions(record)
    staging = _request("echo staging")
    assert decisions.ask(staging) == "asked"
    assert not decisions.shown(staging, "first")
    decisions.show(staging, "first")
    assert decisions.shown(staging, "first")
    assert not decisions.shown(staging, "second")  # another place: another question's answer
    assert not decisions.shown(_request("echo PRODUCTION"), "first")  # another call under the key
    decisions.show(_request("echo PRODUCTION"), "second")  # not this key's question: not kept
    assert not decisions.shown(staging, "second")
    assert _decisions(record).shown(staging, "first")  # another process on the same record


def test_c8_a_place_a_failing_record_cannot_keep_or_read_is_never_shown() -> None:
    record = _Record()
    decisions = _decisions(record)
    request = _request("echo staging")
    decisions.ask(request)
    record.failing = "remember"
    decisions.show(request, "first")  # kept nowhere, and no error escapes
    record.failing = None
    assert not decisions.shown(request, "first")
    decisions.show(request, "first")
    record.failing = "resolve"
    assert not decisions.shown(request, "first")  # read as never shown: the answer is refused


def test_c8_a_key_that_is_not_text_is_never_shown() -> None:
    record = _Record()
    decisions = _decisions(record)
    odd: Any = _request("echo staging", key="run:\ud800")
    assert decisions.ask(odd) == "asked"  # nothing can be kept for it
    decisions.show(odd, "first")
    assert not decisions.shown(odd, "first")
    assert not decisions.shown(_request("echo x"), "\ud800")  # a place that is not text
