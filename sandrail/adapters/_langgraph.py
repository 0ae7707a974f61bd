"""What the LangChain and Deep Agents adapters share: the run identity LangGraph
keeps across a resume and a crash re-run, and the approval question asked
through LangGraph's own ``interrupt()``.

Identity. LangGraph re-runs a node from its first line when it is resumed
(``Command(resume=...)``) and when it raised and the thread is invoked again
(``invoke(None, config)``). Across both, three things stay the same (measured
on ``langgraph`` 1.2 with its SQLite and PostgreSQL checkpointers): the thread
id, the checkpoint namespace (``tools:<task id>`` inside a ``ToolNode``; the
task id is a function of the checkpoint the task belongs to, so a new turn of
the same thread has a new one) and the model's tool call id. The run part of
an operation key is the first two, so the key of a re-run is the key of the
run it repeats, and the key of a new turn is new even when a scripted model
numbers its calls ``call_1`` again.

Approval. When the harness's policy answers ``ApprovalRequired``, the tool
calls ``interrupt()`` with the question a person must see (env values are
never part of it) and LangGraph pauses the run. The
answer is ``Command(resume={"type": "approve"})`` or ``{"type": "reject",
"message": ...}``, the decision shape of LangChain's
``HumanInTheLoopMiddleware`` in its per-call mode, or the same as its
batched mode answers (``{"decisions": [{"type": "approve"}]}``: the question
has that middleware's shape); LangGraph checks it against
:func:`decision_schema` before saving it, so a malformed answer is refused at the
``Command`` and can be given again. On resume the node runs from its first
line: the policy is asked again (nothing runs), ``interrupt()`` returns the
answer, and an approval runs that very call under the key it had when the
question was asked.

Place. LangGraph hands an answer given without a question id to the first
pending question, and ``HumanInTheLoopMiddleware`` matches a batch of
decisions to its calls by their order; a saved run whose calls were
reordered after the questions were shown would hand each answer to another
call, every one of them asked about. :func:`place_of` names where a call's
question stands: the node (the checkpoint namespace's node names), the
task's path (a tool call's place among the tasks the model's calls were
sent to) and the order of the calls in the model message. It is kept when
the question is put to a person, and an answer counts only in the same
place (see :meth:`sandrail.Toolset.asked`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any, Literal

from sandrail.adapters.kit import run_id_of

__all__ = ["decision_schema", "place_of", "read_decision", "run_of_config", "turn_of"]


@functools.cache
def decision_schema() -> Any:
    """The answer ``interrupt()`` takes back: one decision, ``{"type":
    "approve"}`` or ``{"type": "reject", "message": ...}``, or the same in
    ``HumanInTheLoopMiddleware``'s batched shape, ``{"decisions": [one
    decision]}`` (the question is in its shape: ``action_requests``, one of
    them). Nothing else: a key it does not name (``{"type": "approve",
    "args": ...}``: an approval edits nothing) and any other decision
    (``edit``, ``respond``) are refused. LangGraph validates a resume value
    against it before saving it (a ``pydantic.ValidationError`` at the
    ``Command``, and the question stays open). Built on first use, with the
    ``TypedDict`` pydantic reads on every Python."""
    from typing import Annotated, NotRequired

    from pydantic import ConfigDict, Field
    from typing_extensions import TypedDict

    closed = ConfigDict(extra="forbid")
    # The functional form: real types, not annotations postponed in here.
    approve = TypedDict("Approve", {"type": Literal["approve"]})  # type: ignore[name-match]  # noqa: UP013
    reject = TypedDict(  # type: ignore[name-match]  # noqa: UP013
        "Reject", {"type": Literal["reject"], "message": NotRequired[str]}
    )
    one = approve | reject
    batched = TypedDict(  # type: ignore[name-match]  # noqa: UP013
        "Decisions", {"decisions": Annotated[list[one], Field(min_length=1, max_length=1)]}
    )
    for shape in (approve, reject, batched):
        shape.__pydantic_config__ = closed  # type: ignore[union-attr]
    return one | batched


def run_of_config(
    config: object, runtime: object = None, call_id: str | None = None, *, state: object = None
) -> str | None:
    """The run part of an operation key for the tool call ``call_id``:
    ``langgraph:{thread_id}:message:{message id}`` where LangGraph's ``ToolNode``
    gives the tool its ``ToolRuntime`` and the graph state holds the model
    message that made the call (or ``state``, the graph state, holds it: a
    middleware hook's view); else ``langgraph:{thread_id}:task:{checkpoint_ns}``
    from the ``RunnableConfig``; ``None`` outside a LangGraph task (no
    namespace and no such message).

    Why the message first: the checkpoint namespace holds the task id, a
    function of the checkpoint the task runs in. A node resumed or re-run
    runs in the checkpoint it ran in before, but a call gated in an earlier
    node (``HumanInTheLoopMiddleware``'s batched mode asks in the model
    node's ``after_model`` hook) runs in a checkpoint made after each
    resume, so two resumes of one saved question would give it two keys.
    The message that made the call is in the saved state: the same after any
    resume or re-run, new for every model turn. The thread id is absent
    without a checkpointer: the message or namespace alone then tells runs
    apart (such a run cannot be resumed), and the thread part is ``-``.
    The parts are joined by :func:`~sandrail.adapters.kit.run_id_of` (a ``:``
    inside one, as in ``tools:<task id>``, is escaped)."""
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    if not isinstance(configurable, Mapping):
        configurable = {}
    thread = configurable.get("thread_id")
    shown = "-" if thread is None or not str(thread).strip() else str(thread)
    made_by = _message_of(getattr(runtime, "state", None) if state is None else state, call_id)
    if made_by is not None:
        return run_id_of("langgraph", shown, "message", made_by)
    namespace = configurable.get("checkpoint_ns")
    if not isinstance(namespace, str) or not namespace.strip():
        return None
    return run_id_of("langgraph", shown, "task", namespace)


def place_of(config: object, state: object, call_id: str | None) -> str | None:
    """Where the question about tool call ``call_id`` stands (see the module
    doc), as text, or ``None`` outside a LangGraph task."""
    metadata = config.get("metadata") if isinstance(config, Mapping) else None
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    path = metadata.get("langgraph_path") if isinstance(metadata, Mapping) else None
    namespace = configurable.get("checkpoint_ns") if isinstance(configurable, Mapping) else None
    if not isinstance(path, tuple | list) and not isinstance(namespace, str):
        return None
    found = _made_by(state, call_id)
    nodes = namespace.split("|") if isinstance(namespace, str) else []
    return json.dumps(
        {
            "nodes": [node.split(":")[0] for node in nodes],
            "path": [str(part) for part in path] if isinstance(path, tuple | list) else None,
            "calls": [_id(c) for c in found.tool_calls] if found is not None else None,
        },
        sort_keys=True,
        default=str,
    )


def turn_of(config: object, state: object = None, call_id: str | None = None) -> str | None:
    """The model turn that made tool call ``call_id``, for
    :attr:`~sandrail.adapters.kit.ModelCall.turn` (two identical calls of
    one turn are two calls, never a repeat of each other): the thread and
    the id of the model message in ``state`` that made the call; where the
    state is not at hand (a sandbox backend sees only the config), the
    thread, the namespace of the graph the tool task runs in and the
    task's superstep (LangGraph runs every tool call of one model message
    in one superstep, and a later turn in a later one). ``None`` outside a
    LangGraph task."""
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    if not isinstance(configurable, Mapping):
        configurable = {}
    thread = configurable.get("thread_id")
    shown = "-" if thread is None or not str(thread).strip() else str(thread)
    made_by = _message_of(state, call_id)
    if made_by is not None:
        return run_id_of("langgraph", shown, "message", made_by)
    metadata = config.get("metadata") if isinstance(config, Mapping) else None
    step = metadata.get("langgraph_step") if isinstance(metadata, Mapping) else None
    namespace = configurable.get("checkpoint_ns")
    if isinstance(step, bool) or not isinstance(step, int) or not isinstance(namespace, str):
        return None
    graph = namespace.rpartition("|")[0] or "-"
    return run_id_of("langgraph", shown, "step", graph, str(step))


def _id(call: object) -> object:
    return call.get("id") if isinstance(call, Mapping) else None


def _message_of(state: object, call_id: str | None) -> str | None:
    """The id of the latest message in ``state`` whose tool calls include
    ``call_id``, or ``None``."""
    message = _made_by(state, call_id)
    made_by = getattr(message, "id", None)
    return made_by if isinstance(made_by, str) and made_by.strip() else None


def _made_by(state: object, call_id: str | None) -> Any:
    """The latest message in ``state`` whose tool calls include ``call_id``,
    or ``None``."""
    if not isinstance(call_id, str):
        return None
    messages = state.get("messages") if isinstance(state, Mapping) else state
    if not isinstance(messages, list):
        messages = getattr(state, "messages", None)
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        calls = getattr(message, "tool_calls", None)
        if not isinstance(calls, list):
            continue
        if any(isinstance(c, Mapping) and c.get("id") == call_id for c in calls):
            return message
    return None


def read_decision(answer: object) -> tuple[bool, str | None]:
    """``(approved, reason)`` from the value ``interrupt()`` returned (one
    decision, or a batch of one: see :func:`decision_schema`). Anything but
    an approval is a rejection: nothing runs (a value that is not a decision
    at all, which :func:`decision_schema` keeps LangGraph from saving, is
    read as a rejection with its reason said)."""
    if isinstance(answer, Mapping) and set(answer) == {"decisions"}:
        batch = answer["decisions"]
        answer = batch[0] if isinstance(batch, list) and len(batch) == 1 else None
    if isinstance(answer, Mapping) and set(answer) <= {"type", "message"}:
        kind = answer.get("type")
        if kind == "approve":
            return True, None
        if kind == "reject":
            message = answer.get("message")
            return False, message if isinstance(message, str) else None
    return False, "the answer given was neither an approval nor a rejection"
