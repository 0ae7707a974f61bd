"""sandrail: safe command and code tools for AI agents in E2B sandboxes.

A pure core (``sandrail.core``) decides; interpreters (``sandrail.interpreters``)
touch the world. Harnesses build a port and execute requests::

    import sandrail
    from sandrail.interpreters.simulator import Simulator

    port = sandrail.command_tools(
        backend=Simulator(),
        session_id="session-1",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )

Harnesses that offer the tools to a model take a :class:`Toolset` (every
tool behind ``await toolset.call(...)``) and an adapter from
:mod:`sandrail.adapters`.
"""

from sandrail._port import (
    ALLOW,
    ArtifactStore,
    ArtifactWriter,
    StreamingArtifactStore,
    ToolPort,
    code_tools,
    command_tools,
)
from sandrail._replay_file import replay_file
from sandrail._replay_file import replay_port as replay_port  # importable, not in __all__
from sandrail._toolset import MAX_CALL_TIMEOUT_SECONDS, Toolset
from sandrail._version import __version__
from sandrail.core import (
    RUNTIME_ARTIFACTS,
    AgentCommandRef,
    AgentIdentity,
    AgentOwner,
    Allow,
    ApprovalRequired,
    ArtifactRef,
    BackgroundCommandRef,
    BudgetError,
    Deny,
    ErrorCode,
    NativeCommandRef,
    NativeIdentity,
    NativeOwner,
    OwnedCommand,
    Profile,
    ToolCall,
    ToolDefinition,
    ToolRequest,
    ToolResult,
    canonical_json,
    fit_to_budget,
    task_id,
)
from sandrail.interpreters._cancel import CancelToken
from sandrail.interpreters.artifacts import DirectoryArtifactStore, MemoryArtifactStore

__all__ = [
    "ALLOW",
    "MAX_CALL_TIMEOUT_SECONDS",
    "RUNTIME_ARTIFACTS",
    "AgentCommandRef",
    "AgentIdentity",
    "AgentOwner",
    "Allow",
    "ApprovalRequired",
    "ArtifactRef",
    "ArtifactStore",
    "ArtifactWriter",
    "BackgroundCommandRef",
    "BudgetError",
    "CancelToken",
    "Deny",
    "DirectoryArtifactStore",
    "ErrorCode",
    "MemoryArtifactStore",
    "NativeCommandRef",
    "NativeIdentity",
    "NativeOwner",
    "OwnedCommand",
    "Profile",
    "StreamingArtifactStore",
    "ToolCall",
    "ToolDefinition",
    "ToolPort",
    "ToolRequest",
    "ToolResult",
    "Toolset",
    "__version__",
    "canonical_json",
    "code_tools",
    "command_tools",
    "fit_to_budget",
    "replay_file",
    "task_id",
]
