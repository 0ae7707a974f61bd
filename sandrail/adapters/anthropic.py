"""The Anthropic Messages API: a ``tools`` list and a ``tool_use`` handler.

    tools = sandrail.adapters.anthropic.AnthropicTools(toolset, run_id=run_id)
    # client.messages.create(..., tools=tools.definitions)
    # for each tool_use block of the reply: await tools.handle(block) -> tool_result block

:attr:`AnthropicTools.definitions` are plain dicts (``name``,
``description``, ``input_schema`` and ``strict: true``) with the
``anthropic-strict`` schemas: what Anthropic's strict tool use accepts
(the patterns written in the regular-expression subset Anthropic documents,
such as the task id's; no numeric bounds, lengths, ``maxItems`` or other
patterns, which are stated in the descriptions instead and checked when the
call comes back: a model can send ``timeout: 0``, which is refused naming
the field and runs nothing; see :mod:`sandrail.core._profiles` for what each
profile gives up). :meth:`AnthropicTools.handle` takes a ``tool_use`` block (the
SDK's object or its dict form) and returns the ``tool_result`` block:
``content`` is exactly ``result.to_json()``, ``is_error`` is
``result.is_error``. No SDK import is needed: the blocks are plain data.

Operation keys: ``f"{run_id}:{tool_use.id}"`` with the ``run_id`` given here
(the toolset's by default). Use one run id per agent run, kept when a run
resumes; Anthropic's tool-use ids are unique, but a scripted or replayed
conversation may reuse them. A model's retry is a new ``tool_use`` with a
new id; an exact repeat of a call left unsettled (``uncertain``,
``approval_required``, or never answered) runs under that call's key and
reconciles it (see :class:`~sandrail.Toolset`), unless both are blocks of
one reply: :meth:`AnthropicTools.handle_all` gives every block the reply's
turn (:meth:`AnthropicTools.turn_of` its content), and ``handle`` and
``approve`` take it as ``turn=``, so two identical blocks of one reply are
two calls, each its own question and decision.

Approval (``docs/howto/approval.md``). When the harness's policy answers
``ApprovalRequired``, :meth:`AnthropicTools.handle` runs nothing and returns
the ``approval_required`` result (``AnthropicTools.needs_approval(answer)``
says so). Do not send it to the model: ask a person, then answer the block
with ``await tools.approve(block)`` (runs that very call once, under its own
operation key, so approving again, after a restart say, launches nothing
new: C2) or ``tools.reject(block, reason=...)`` (runs nothing; the model
reads ``approval_rejected``). A ``Deny`` never asks: the model reads
``policy_denied``. The approval is bound to the block asked about: a block
with its id and other input is refused (``approval_mismatch``) and a
rejected block stays rejected (``docs/howto/approval.md``). The key's run
part is ``run_id=``: keep it with the conversation, and give the toolsets
one durable record, when an approval may be answered by another process.

``timeout_seconds`` is each call's deadline: when it passes, the call is
aborted as a :class:`~sandrail.CancelToken` would abort it and the
``tool_result`` holds the resulting ``canceled`` or ``uncertain`` result.
Use it rather than a timeout around :meth:`AnthropicTools.handle`, which
cancels the call and leaves nothing to send the model.

The handlers never raise for any block: a block that cannot be read (an
attribute that raises, a missing id) is answered with a refusal.
:meth:`AnthropicTools.handle_all` (and ``handle_all_sync``) raises
``TypeError`` only when it is not given a list (or other iterable) of
blocks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sandrail import ToolResult, Toolset
from sandrail.adapters.kit import Adapter, ModelCall, check_run_id

__all__ = ["AnthropicTools"]


class AnthropicTools:
    """``toolset`` as Anthropic Messages tools. ``strict=False`` lists the
    ``full`` schemas without the ``strict`` flag instead.

    Raises ``ValueError`` for a blank ``run_id`` (``TypeError`` for one that
    is not a string) or a ``timeout_seconds`` that is not a positive
    number."""

    def __init__(
        self,
        toolset: Toolset,
        *,
        run_id: str | None = None,
        strict: bool = True,
        timeout_seconds: float | None = None,
    ) -> None:
        self._run_id = check_run_id(run_id)
        self._adapter = Adapter(
            toolset,
            framework="Anthropic",
            profile="anthropic-strict" if strict else "full",
            timeout_seconds=timeout_seconds,
        )
        self._strict = strict

    @property
    def definitions(self) -> list[dict[str, Any]]:
        """The ``tools`` parameter of ``messages.create``: fresh plain dicts."""
        toolset = self._adapter.toolset
        listed = []
        for name, schema in self._adapter.schemas().items():
            tool: dict[str, Any] = {
                "name": name,
                "description": toolset.definition(name).description,
                "input_schema": schema,
            }
            if self._strict:
                tool["strict"] = True
            listed.append(tool)
        return listed

    # The twins differ only in how they wait (awaited, or blocking):
    # everything else is :meth:`_call_of`'s and :func:`_answer`'s.

    async def handle(self, block: object, *, turn: str | None = None) -> dict[str, Any]:
        """The ``tool_result`` block answering one ``tool_use`` block (an
        ``approval_required`` one when a person must decide first: see
        :meth:`approve`). ``turn``: the reply that holds the block
        (:meth:`turn_of` its content), so that two identical blocks of one
        reply are two calls, each its own question and decision."""
        tool_use_id, call = self._call_of(block, turn)
        if not isinstance(call, ModelCall):
            return _answer(tool_use_id, call)
        return _answer(tool_use_id, await self._adapter.run(call))

    def handle_sync(self, block: object, *, turn: str | None = None) -> dict[str, Any]:
        """:meth:`handle` for code without an event loop."""
        tool_use_id, call = self._call_of(block, turn)
        if not isinstance(call, ModelCall):
            return _answer(tool_use_id, call)
        return _answer(tool_use_id, self._adapter.run_sync(call))

    async def approve(self, block: object, *, turn: str | None = None) -> dict[str, Any]:
        """A person approved this ``tool_use`` block: run it (once, under
        its own operation key) and return its ``tool_result`` block. The
        harness's ``ApprovalRequired`` for exactly this call is taken as
        ``ALLOW``; a ``Deny`` still refuses it. ``turn``: as for
        :meth:`handle` (give the same: :meth:`turn_of` the reply's content)."""
        tool_use_id, call = self._call_of(block, turn)
        if not isinstance(call, ModelCall):
            return _answer(tool_use_id, call)
        return _answer(tool_use_id, await self._adapter.run(call, approved=True))

    def approve_sync(self, block: object, *, turn: str | None = None) -> dict[str, Any]:
        """:meth:`approve` for code without an event loop."""
        tool_use_id, call = self._call_of(block, turn)
        if not isinstance(call, ModelCall):
            return _answer(tool_use_id, call)
        return _answer(tool_use_id, self._adapter.run_sync(call, approved=True))

    def reject(self, block: object, reason: str | None = None) -> dict[str, Any]:
        """A person rejected this ``tool_use`` block: nothing runs; the
        ``tool_result`` block says ``approval_rejected`` (``executed:
        false``), what to do instead, and ``reason`` when given. A block
        that already ran (approved before, rejected now) is never answered
        "nothing ran": the result is ``uncertain``, ``approval_rejected``,
        with the task's locator to read it by (C5, C6)."""
        tool_use_id, call = self._call_of(block)
        # A block that cannot be run is still answered as rejected: nothing ran.
        known = call if isinstance(call, ModelCall) else None
        return _answer(tool_use_id, self._adapter.reject(known, reason))

    @staticmethod
    def needs_approval(answer: object) -> bool:
        """Whether a ``tool_result`` block from :meth:`handle` waits for a
        person (``status: "approval_required"``; nothing ran): answer its
        ``tool_use`` block with :meth:`approve` or :meth:`reject` instead of
        sending it to the model."""
        content = answer.get("content") if isinstance(answer, Mapping) else None
        if not isinstance(content, str) or '"approval_required"' not in content:
            return False
        try:
            return bool(json.loads(content).get("status") == "approval_required")
        except (ValueError, AttributeError, RecursionError):
            return False

    def turn_of(self, content: Iterable[object]) -> str | None:
        """The turn of a reply (its ``content``): the run and the ids of its
        ``tool_use`` blocks, in order, which the conversation keeps as they
        were. :meth:`handle_all` gives it to every block of the reply; give
        it to :meth:`handle` and :meth:`approve` (``turn=``) when answering
        blocks one by one. ``None`` for content that is not a list of
        blocks, or holds a block without an id."""
        if isinstance(content, (str, bytes, Mapping)) or not isinstance(content, Iterable):
            return None
        try:
            ids = [_plain_id(_field(b, "id")) for b in content if _field(b, "type") == "tool_use"]
        except Exception:
            return None
        if not ids or "" in ids:
            return None
        return json.dumps([self._run(), ids])

    def _run(self) -> str:
        return self._run_id if self._run_id is not None else self._adapter.toolset.run_id

    def _call_of(
        self, block: object, turn: str | None = None
    ) -> tuple[str, ModelCall | ToolResult]:
        """The block's id (plain text, ``""`` when it has none), and the
        call it asks for or the refusal the model reads instead."""
        tool_use_id = _field(block, "id")
        call = self._adapter.call_of(
            _field(block, "name"),
            _field(block, "input"),
            call_id=tool_use_id,
            run_id=self._run(),
            turn=turn,
        )
        shown = call.call_id if isinstance(call, ModelCall) else _plain_id(tool_use_id)
        return shown, call

    async def handle_all(self, content: Iterable[object]) -> list[dict[str, Any]]:
        """``tool_result`` blocks for every ``tool_use`` block of a reply's
        ``content``, in order: the next user message's content. A block
        whose ``type`` cannot be read is not a ``tool_use`` block. Raises
        ``TypeError`` when ``content`` is not a list (or other iterable) of
        blocks: pass the reply's ``content``, not the reply."""
        blocks = _tool_uses(content, "handle_all")
        turn = self.turn_of(blocks)
        return [await self.handle(block, turn=turn) for block in blocks]

    def handle_all_sync(self, content: Iterable[object]) -> list[dict[str, Any]]:
        """:meth:`handle_all` for code without an event loop: each block as
        :meth:`handle_sync` answers it, one after the other, in order."""
        blocks = _tool_uses(content, "handle_all_sync")
        turn = self.turn_of(blocks)
        return [self.handle_sync(block, turn=turn) for block in blocks]


def _tool_uses(content: Iterable[object], method: str) -> list[object]:
    """The ``tool_use`` blocks of a reply's ``content``; ``TypeError`` when
    ``content`` is not an iterable of blocks."""
    if isinstance(content, (str, bytes, Mapping)) or not isinstance(content, Iterable):
        raise TypeError(
            f"{method} takes a reply's content (a list of blocks), got {type(content).__name__}"
        )
    return [block for block in content if _field(block, "type") == "tool_use"]


def _answer(tool_use_id: str, result: ToolResult) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": result.to_json(),
        "is_error": result.is_error,
    }


def _field(block: object, name: str) -> object:
    """``block``'s field ``name`` (a dict's item or an object's attribute), or
    ``None`` when it is missing or reading it fails (a block is the model's
    or an SDK's object: reading it may run code that raises)."""
    try:
        if isinstance(block, Mapping):
            return block.get(name)
        return getattr(block, name, None)
    except Exception:
        return None


def _plain_id(value: object) -> str:
    """A block id as plain text, ``""`` when it is none or blank (never
    calling a ``str`` subclass's own methods)."""
    plain = str.__str__(value) if isinstance(value, str) else ""
    return plain if plain.strip() else ""
