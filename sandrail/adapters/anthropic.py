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
reconciles it (see :class:`~sandrail.Toolset`).

Approval (DESIGN §12). When the harness's policy answers
``ApprovalRequired``, :meth:`AnthropicTools.handle` runs nothing and returns
the ``approval_required`` result (``AnthropicTools.needs_approval(answer)``
says so). Do not send it to the model: ask a person, then answer the block
with ``await tools.approve(block)`` (runs that very call once, under its own
operation key, so approving again, after a restart say, launches nothing
new: C2) or ``tools.reject(block, reason=...)`` (runs nothing; the model
reads ``approval_rejected``). A ``Deny`` never asks: the model reads
``policy_denied``. The key's run part is ``run_id=``: keep it with the
conversation when an approval may be answered by another process.

``timeout_seconds`` is each call's deadline: when it passes, the call is
aborted as a :class:`~sandrail.CancelToken` would abort it and the
``tool_result`` holds the resulting ``canceled`` or ``uncertain`` result.
Use it rather than a timeout around :meth:`AnthropicTools.handle`, which
cancels the call and leaves nothing to send the model.

The handlers never raise for any block: a block that cannot be read (an
attribute that raises, a missing id) is answered with a refusal.
:meth:`AnthropicTools.handle_all` raises ``TypeError`` only when it is not
given a list (or other iterable) of blocks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from sandrail._toolset import Toolset, check_timeout
from sandrail.core import ArgumentProblem, Profile, ToolResult, arguments_rejection

__all__ = ["AnthropicTools"]


class AnthropicTools:
    """``toolset`` as Anthropic Messages tools. ``strict=False`` lists the
    ``full`` schemas without the ``strict`` flag instead.

    Raises ``ValueError`` for a blank ``run_id`` or a ``timeout_seconds``
    that is not a positive number."""

    def __init__(
        self,
        toolset: Toolset,
        *,
        run_id: str | None = None,
        strict: bool = True,
        timeout_seconds: float | None = None,
    ) -> None:
        if run_id is not None and (not isinstance(run_id, str) or not run_id.strip()):
            raise ValueError("run_id must be a non-blank string")
        self._toolset = toolset
        self._run_id = run_id
        self._profile: Profile = "anthropic-strict" if strict else "full"
        self._strict = strict
        self._timeout_seconds = check_timeout(timeout_seconds)

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

    # The twins differ only in the toolset call they make (awaited, or
    # blocking): everything else is :meth:`_call_for`'s and :func:`_answer`'s.

    async def handle(self, block: object) -> dict[str, Any]:
        """The ``tool_result`` block answering one ``tool_use`` block (an
        ``approval_required`` one when a person must decide first: see
        :meth:`approve`)."""
        tool_use_id, call = self._call_for(block)
        if isinstance(call, ToolResult):
            return _answer(tool_use_id, call)
        return _answer(tool_use_id, await self._toolset.call(**call))

    def handle_sync(self, block: object) -> dict[str, Any]:
        """:meth:`handle` for code without an event loop."""
        tool_use_id, call = self._call_for(block)
        if isinstance(call, ToolResult):
            return _answer(tool_use_id, call)
        return _answer(tool_use_id, self._toolset.call_sync(**call))

    async def approve(self, block: object) -> dict[str, Any]:
        """A person approved this ``tool_use`` block: run it (once, under
        its own operation key) and return its ``tool_result`` block. The
        harness's ``ApprovalRequired`` for exactly this call is taken as
        ``ALLOW``; a ``Deny`` still refuses it."""
        tool_use_id, call = self._call_for(block, approved=True)
        if isinstance(call, ToolResult):
            return _answer(tool_use_id, call)
        return _answer(tool_use_id, await self._toolset.call(**call))

    def approve_sync(self, block: object) -> dict[str, Any]:
        """:meth:`approve` for code without an event loop."""
        tool_use_id, call = self._call_for(block, approved=True)
        if isinstance(call, ToolResult):
            return _answer(tool_use_id, call)
        return _answer(tool_use_id, self._toolset.call_sync(**call))

    def reject(self, block: object, reason: str | None = None) -> dict[str, Any]:
        """A person rejected this ``tool_use`` block: nothing runs; the
        ``tool_result`` block says ``approval_rejected`` (``executed:
        false``), what to do instead, and ``reason`` when given. A block
        that already ran (approved before, rejected now) is never answered
        "nothing ran": the result is ``uncertain``, ``approval_rejected``,
        with the task's locator to read it by (C5, C6)."""
        tool_use_id, name, arguments = _read(block)
        if not tool_use_id:
            return _answer(tool_use_id, _no_id(self._toolset))
        rejected = self._toolset.rejection(
            reason,
            name=name,
            call_id=tool_use_id,
            operation_key=self._toolset.operation_key(tool_use_id, run_id=self._run_id),
            arguments=arguments,
            profile=self._profile,
        )
        return _answer(tool_use_id, rejected)

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

    def _call_for(
        self, block: object, *, approved: bool = False
    ) -> tuple[str, ToolResult | _ToolsetCall]:
        """The block's id, and the toolset call it asks for (its keyword
        arguments), or the refusal of a block without an id. ``approved``:
        a person approved it (see :meth:`approve`)."""
        tool_use_id, name, arguments = _read(block)
        if not tool_use_id:
            return tool_use_id, _no_id(self._toolset)
        return tool_use_id, _ToolsetCall(
            name=name,
            arguments=arguments,
            call_id=tool_use_id,
            operation_key=self._toolset.operation_key(tool_use_id, run_id=self._run_id),
            profile=self._profile,
            timeout_seconds=self._timeout_seconds,
            reconcile_repeats=True,
            run_id=self._run_id if self._run_id is not None else self._toolset.run_id,
            approved=approved,
        )

    async def handle_all(self, content: Iterable[object]) -> list[dict[str, Any]]:
        """``tool_result`` blocks for every ``tool_use`` block of a reply's
        ``content``, in order: the next user message's content. A block
        whose ``type`` cannot be read is not a ``tool_use`` block. Raises
        ``TypeError`` when ``content`` is not a list (or other iterable) of
        blocks: pass the reply's ``content``, not the reply."""
        if isinstance(content, (str, bytes, Mapping)) or not isinstance(content, Iterable):
            raise TypeError(
                "handle_all takes a reply's content (a list of blocks), "
                f"got {type(content).__name__}"
            )
        return [await self.handle(block) for block in content if _kind(block) == "tool_use"]


class _ToolsetCall(TypedDict):
    """The keyword arguments of :meth:`~sandrail.Toolset.call` (and of
    ``call_sync``) for one ``tool_use`` block."""

    name: str
    arguments: object
    call_id: str
    operation_key: str
    profile: Profile
    timeout_seconds: float | None
    reconcile_repeats: bool
    run_id: str
    approved: bool


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


def _kind(block: object) -> object:
    return _field(block, "type")


def _read(block: object) -> tuple[str, str, object]:
    """Plain copies of the block's id, name and input: a ``str`` subclass's
    or a mapping's own methods may raise, so nothing past this reads them."""
    tool_use_id = _plain_text(_field(block, "id"))
    clean_id = tool_use_id if tool_use_id is not None and tool_use_id.strip() else ""
    return clean_id, _plain_text(_field(block, "name")) or "", _plain_object(_field(block, "input"))


def _plain_text(value: object) -> str | None:
    """``value`` as a plain ``str`` (never calling a subclass's methods), or
    ``None`` when it is not a string."""
    return str.__str__(value) if isinstance(value, str) else None


class _Unreadable:
    """Stands for an input that could not be read: refused as not an object."""


def _plain_object(value: object) -> object:
    """A plain ``dict`` copy of a mapping input (its own ``get``, ``items``
    or iteration may raise: then it is unreadable), else ``value``."""
    if not isinstance(value, Mapping):
        return value
    try:
        return {_plain_text(key) or key: value[key] for key in list(value.keys())}
    except Exception:
        return _Unreadable()
