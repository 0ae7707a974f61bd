"""A scripted ADK model (a ``BaseLlm`` that returns scripted function calls)
and the runner plumbing the ADK tests share."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

NULLS = {"cwd": None, "timeout": None, "env": None, "background": None}
Turn = list[dict[str, Any]] | str | Callable[[LlmRequest], Any]


class ScriptedLlm(BaseLlm):
    """Answers with its turns in order: function calls (``[{"name", "args",
    "id"}]``), a final text, or a function of the request returning either;
    ``requests`` keeps every request it was sent."""

    turns: list[Any] = []  # noqa: RUF012 - pydantic field, set per instance
    requests: list[LlmRequest] = []  # noqa: RUF012

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        index = len(self.requests) - 1
        turn = self.turns[index] if index < len(self.turns) else "done"
        if callable(turn):
            turn = turn(llm_request)
        if isinstance(turn, str):
            parts = [types.Part(text=turn)]
        else:
            parts = [
                types.Part(
                    function_call=types.FunctionCall(name=c["name"], args=c["args"], id=c["id"])
                )
                for c in turn
            ]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


def scripted(turns: list[Turn]) -> ScriptedLlm:
    return ScriptedLlm(model="scripted", turns=list(turns), requests=[])


def run_command(command: str, call_id: str, **fields: Any) -> dict[str, Any]:
    return {"name": "run_command", "args": {**NULLS, "command": command, **fields}, "id": call_id}


def responses_sent(model: ScriptedLlm) -> list[dict[str, Any]]:
    """Every function response the model was sent (its last request's history)."""
    sent = []
    for content in model.requests[-1].contents:
        for part in content.parts or ():
            if (
                part.function_response is not None
                and part.function_response.name != "adk_request_confirmation"
            ):
                sent.append(dict(part.function_response.response or {}))
    return sent


def confirmation_calls(events: list[Any]) -> list[Any]:
    """The ``adk_request_confirmation`` function calls among ``events``."""
    return [
        call
        for event in events
        for call in event.get_function_calls()
        if call.name == "adk_request_confirmation"
    ]


def answer(call: Any, confirmed: bool) -> types.Content:
    """The user's answer to one confirmation request."""
    response = types.FunctionResponse(
        name="adk_request_confirmation", id=call.id, response={"confirmed": confirmed}
    )
    return types.Content(role="user", parts=[types.Part(function_response=response)])


def text(message: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=message)])


def dumped(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
