"""The Anthropic Messages API: a ``tools`` list and a ``tool_use`` handler.

    tools = sandrail.adapters.anthropic.AnthropicTools(toolset, run_id=run_id)
    # client.messages.create(..., tools=tools.definitions)
    # for each tool_use block of the reply: await tools.handle(block) -> tool_result block

:attr:`AnthropicTools.definitions` are plain dicts (``name``,
``description``, ``input_schema`` and ``strict: true``) with the
``anthropic-strict`` schemas: what Anthropic's strict tool use accepts
(patterns without lookaround; no numeric bounds, lengths or ``maxItems``,
which are stated in the descriptions instead and checked when the call
comes back). :meth:`AnthropicTools.handle` takes a ``tool_use`` block (the
SDK's object or its dict form) and returns the ``tool_result`` block:
``content`` is exactly ``result.to_json()``, ``is_error`` is
``result.is_error``. No SDK import is needed: the blocks are plain data.

Operation keys: ``f"{run_id}:{tool_use.id}"`` with the ``run_id`` given here
(the toolset's by default). Use one run id per agent run, kept when a run
resumes; Anthropic's tool-use ids are unique, but a scripted or replayed
conversation may reuse them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sandrail._toolset import Toolset
from sandrail.core import ArgumentProblem, Profile, ToolResult, arguments_rejection

__all__ = ["AnthropicTools"]


class AnthropicTools:
    """``toolset`` as Anthropic Messages tools. ``strict=False`` lists the
    ``full`` schemas without the ``strict`` flag instead."""

    def __init__(self, toolset: Toolset, *, run_id: str | None = None, strict: bool = True) -> None:
        self._toolset = toolset
        self._run_id = run_id
        self._profile: Profile = "anthropic-strict" if strict else "full"
        self._strict = strict

    @property
    def definitions(self) -> list[dict[str, Any]]:
        """The ``tools`` parameter of ``messages.create``: fresh plain dicts."""
        listed = []
        for name in self._toolset.names:
            tool: dict[str, Any] = {
                "name": name,
                "description": self._toolset.definition(name).description,
                "input_schema": self._toolset.schema(name, self._profile),
            }
            if self._strict:
                tool["strict"] = True
            listed.append(tool)
        return listed

    async def handle(self, block: object) -> dict[str, Any]:
        """The ``tool_result`` block answering one ``tool_use`` block."""
        tool_use_id, name, arguments = _read(block)
        if not tool_use_id:
            return _answer(tool_use_id, _no_id(self._toolset))
        result = await self._toolset.call(
            name,
            arguments,
            call_id=tool_use_id,
            operation_key=self._toolset.operation_key(tool_use_id, run_id=self._run_id),
            profile=self._profile,
        )
        return _answer(tool_use_id, result)

    def handle_sync(self, block: object) -> dict[str, Any]:
        """:meth:`handle` for code without an event loop."""
        tool_use_id, name, arguments = _read(block)
        if not tool_use_id:
            return _answer(tool_use_id, _no_id(self._toolset))
        result = self._toolset.call_sync(
            name,
            arguments,
            call_id=tool_use_id,
            operation_key=self._toolset.operation_key(tool_use_id, run_id=self._run_id),
            profile=self._profile,
        )
        return _answer(tool_use_id, result)

    async def handle_all(self, content: Iterable[object]) -> list[dict[str, Any]]:
        """``tool_result`` blocks for every ``tool_use`` block of a reply's
        ``content``, in order: the next user message's content."""
        return [await self.handle(block) for block in content if _kind(block) == "tool_use"]


def _answer(tool_use_id: str, result: ToolResult) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": result.to_json(),
        "is_error": result.is_error,
    }


def _no_id(toolset: Toolset) -> ToolResult:
    problem = ArgumentProblem("tool_use", "must have a non-blank id")
    return ToolResult(
        status="error", content=arguments_rejection([problem], toolset.max_output_bytes)
    )


def _kind(block: object) -> object:
    if isinstance(block, Mapping):
        return block.get("type")
    return getattr(block, "type", None)


def _read(block: object) -> tuple[str, str, object]:
    if isinstance(block, Mapping):
        tool_use_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
    else:
        tool_use_id = getattr(block, "id", None)
        name = getattr(block, "name", None)
        arguments = getattr(block, "input", None)
    clean_id = tool_use_id if isinstance(tool_use_id, str) and tool_use_id.strip() else ""
    return clean_id, name if isinstance(name, str) else "", arguments
