"""Glue from a :class:`~sandrail.Toolset` to the frameworks harnesses use.

Each adapter is one or two lines for a user and sends the model exactly
``result.to_json()`` (the budgeted text), never the result object:

- :mod:`sandrail.adapters.mcp`: an MCP server on the official ``mcp`` SDK
  (``pip install 'sandrail[mcp]'``; ``sandrail mcp`` serves it over stdio or
  streamable HTTP);
- :mod:`sandrail.adapters.openai_agents`: ``FunctionTool`` s for the OpenAI
  Agents SDK, strict mode on (``sandrail[openai-agents]``);
- :mod:`sandrail.adapters.pydantic_ai`: a pydantic-ai toolset
  (``sandrail[pydantic-ai]``);
- :mod:`sandrail.adapters.anthropic`: the Messages API ``tools`` list and a
  handler from a ``tool_use`` block to its ``tool_result`` block (plain data;
  the ``anthropic`` SDK is optional).

Each is glue on the public helpers of :mod:`sandrail.adapters.kit` (the
operation key from the framework's identity, the model's arguments, the
approval round trip, refusals), which an adapter for another framework uses
the same way. Each imports its framework only when used and names the extra
to install when it is missing. Each takes ``timeout_seconds`` (where its framework
has tool timeouts) and enforces it itself, so the model is sent the
``canceled`` or ``uncertain`` result instead of "timed out", and runs its
calls with ``reconcile_repeats`` (a model's retry of an unsettled call
reconciles it); see :class:`~sandrail.Toolset`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``, or raise ``ImportError`` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"this sandrail adapter needs {module!r}: pip install 'sandrail[{extra}]'"
        ) from exc
