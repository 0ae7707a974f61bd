"""A scripted LangChain chat model (LangChain's own ``GenericFakeChatModel``)
that keeps every message list it was sent, and the tool calls it makes."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

NULLS = {"cwd": None, "timeout": None, "env": None, "background": None}
"""The nullable fields of ``run_command`` in the ``openai-strict`` profile."""


Turn = list[dict[str, Any]] | str | Callable[[list[BaseMessage]], Any]


class ScriptedChat(GenericFakeChatModel):
    """Answers with the scripted turns in order: tool calls (``[{"name",
    "args", "id"}]``), a final text, or a function of the messages sent so
    far returning either; ``sent`` holds every message list it was sent."""

    sent: list[list[BaseMessage]] = []  # noqa: RUF012 - pydantic field, set per instance
    turns: list[Any] = []  # noqa: RUF012

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChat:
        return self

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        self.sent.append(list(messages))
        turn = self.turns[len(self.sent) - 1] if len(self.sent) <= len(self.turns) else "done"
        if callable(turn):
            turn = turn(messages)
        if isinstance(turn, str):
            return AIMessage(content=turn)
        return AIMessage(content="", tool_calls=turn)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.messages = iter([self._next(messages)])
        return super()._generate(messages, *args, **kwargs)


def scripted(turns: Iterable[Turn]) -> ScriptedChat:
    """A :class:`ScriptedChat` with these turns."""
    return ScriptedChat(messages=iter(()), sent=[], turns=list(turns))


def run_command(command: str, call_id: str, **fields: Any) -> dict[str, Any]:
    """A ``run_command`` tool call in the ``openai-strict`` shape."""
    return {"name": "run_command", "args": {**NULLS, "command": command, **fields}, "id": call_id}


def tool_messages(messages: Iterable[BaseMessage]) -> list[ToolMessage]:
    return [message for message in messages if isinstance(message, ToolMessage)]
