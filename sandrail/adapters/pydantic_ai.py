"""pydantic-ai ``Tool`` s for a :class:`~sandrail.Toolset`.

    agent = Agent(model, tools=sandrail.adapters.pydantic_ai.tools(toolset))

Each tool carries the ``openai-strict`` profile by default (closed objects,
every property required and nullable, ``env`` as a ``{name, value}`` list):
pydantic-ai turns OpenAI's strict mode on for it, and its Anthropic strict
conversion no longer closes ``env`` to ``{}``. Arguments come back in that
shape and are converted for the port; the tool returns exactly
``result.to_json()`` (a string, so pydantic-ai sends it as it is).

Operation keys: ``f"{ctx.run_id}:{ctx.tool_call_id}"``. pydantic-ai gives
every run its own ``run_id`` (pass ``run_id=`` to ``Agent.run`` to keep one
across a resumed run), so a test model that reuses call ids across runs
never makes a new run's call a retry of an old one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sandrail._toolset import Toolset
from sandrail.adapters import require
from sandrail.core import ErrorCode, Profile, error_result

__all__ = ["tools"]


def tools(toolset: Toolset, *, profile: Profile = "openai-strict") -> list[Any]:
    """One ``pydantic_ai.Tool`` per tool of ``toolset``.

    Raises ``ImportError`` naming the ``pydantic-ai`` extra when pydantic-ai
    is missing.
    """
    pydantic_ai = require("pydantic_ai", "pydantic-ai")
    return [
        pydantic_ai.Tool.from_schema(
            _function(toolset, name, profile),
            name=name,
            description=toolset.definition(name).description,
            json_schema=toolset.schema(name, profile),
            takes_ctx=True,
        )
        for name in toolset.names
    ]


def _function(toolset: Toolset, name: str, profile: Profile) -> Callable[..., Any]:
    async def run(ctx: Any, **arguments: Any) -> str:
        if not ctx.run_id or not ctx.tool_call_id:
            # No run or call id, no safe operation key: a shared stand-in would
            # make calls of different runs one call, a fresh one would let a
            # retry launch twice. Nothing runs.
            return error_result(
                ErrorCode.OPERATION_KEY_REQUIRED,
                instruction="pydantic-ai gave this tool call no run_id or tool_call_id; "
                "nothing ran.",
            ).to_json()
        call_id = str(ctx.tool_call_id)
        result = await toolset.call(
            name,
            arguments,
            call_id=call_id,
            operation_key=toolset.operation_key(call_id, run_id=str(ctx.run_id)),
            profile=profile,
        )
        return result.to_json()

    run.__name__ = name
    return run
