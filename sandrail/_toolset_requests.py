"""What every entry point of a :class:`~sandrail.Toolset` does before a call
runs, and what it knows of the calls that already launched.

A call's harness-given arguments are checked (a ``ValueError`` for a
harness bug: a ``timeout_seconds`` or ``run_id`` it cannot take), what the
model got wrong is refused as a result, and the request is built, under an
unsettled earlier call's key for an exact repeat (see :mod:`sandrail._toolset`).
The ownership record answers whether a key already launched: a call that
did is never answered ``executed: false`` (C5).

Its own module because the calls, and the questions a person is asked about
them (:mod:`sandrail._toolset_approvals`), both stand on it:
:class:`ToolsetRequests` is the base of :class:`~sandrail._toolset_approvals.ToolsetApprovals`
and so of :class:`~sandrail.Toolset`, which sets the state it reads.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple

from sandrail._decisions import Decisions
from sandrail._launched import alike, launched_row, lookup
from sandrail._masks import Masks, masked_problems
from sandrail._options import ResolveOwnedCallback
from sandrail._port import ToolPort
from sandrail.core import (
    ArgumentProblem,
    ErrorCode,
    OwnedCommand,
    Owner,
    OwnerIdentity,
    Profile,
    ToolCall,
    ToolDefinition,
    ToolRequest,
    ToolResult,
    arguments_rejection,
    bound_result,
    canonical_arguments,
    error_result,
    refused_after_launch,
    repeat_key,
    repeat_scope,
    same_call,
    settled_arguments,
)
from sandrail.interpreters._cancel import CancelToken, EitherSignal

__all__ = ["MAX_CALL_TIMEOUT_SECONDS", "IdentitySource", "ToolsetRequests", "check_timeout"]

IdentitySource = OwnerIdentity | Callable[[], OwnerIdentity]
_Repeat = tuple[str, str]  # (the scope, the digest of the same call): what repeats match on


class _Unsettled(NamedTuple):
    """An unsettled call, as a repeat finds it."""

    key: str
    arguments: Mapping[str, Any]
    """In the port's form."""
    turn: str | None
    """The model turn that made it (``None``: not known)."""
    taken: dict[str, str | None]
    """The repeats that run under its key: each one's own key and turn."""


_RAN_AS_KEPT: Final = 4096
"""The most repeats whose earlier call is remembered (the oldest go)."""

_UNSETTLED_OF_A_CALL: Final = 64
"""The most unsettled identical calls kept in one scope (the oldest go)."""

MAX_CALL_TIMEOUT_SECONDS: Final = 86_400 * 366
"""The longest ``timeout_seconds`` a call takes (a year): longer ones are a
harness bug (and past ``threading.TIMEOUT_MAX`` no timer can wait them)."""


class ToolsetRequests:
    """A toolset's requests and launches (see the module doc): a base of
    :class:`~sandrail.Toolset`, which sets the state below."""

    _ports: dict[str, ToolPort]
    _masks: Masks
    _max_output_bytes: int
    _identity: IdentitySource
    _session_id: str
    _owner: Owner
    _resolve: ResolveOwnedCallback
    _lock: threading.Lock
    _decisions: Decisions
    _unsettled: OrderedDict[_Repeat, list[_Unsettled]]
    _ran_as: OrderedDict[tuple[_Repeat, str], _Unsettled]
    """The earlier call each repeat ran under, by the repeat's own key."""

    def _prepare(
        self,
        name: str,
        arguments: object,
        call_id: str,
        operation_key: str,
        profile: Profile,
        cancel: object | None,
        timeout_seconds: float | None,
        reconcile_repeats: bool,
        run_id: str | None,
        turn: str | None = None,
    ) -> ToolResult | _Prepared:
        """What both entry points do before the call runs: check the
        harness's own arguments (``ValueError``), refuse what the model got
        wrong (a result), and build the request, under an unsettled earlier
        call's key for an exact repeat (see :mod:`sandrail._toolset`): never
        one the model made in the same ``turn`` (both at once, before it
        could read either result: two calls, each its own)."""
        deadline = check_timeout(timeout_seconds)
        if run_id is not None and (not isinstance(run_id, str) or not str.__str__(run_id).strip()):
            raise ValueError("run_id must be a non-blank string")
        if turn is not None and (not isinstance(turn, str) or not str.__str__(turn).strip()):
            raise ValueError("turn must be a non-blank string")
        port = self._ports.get(name) if isinstance(name, str) else None
        if port is None:
            return bound_result(
                error_result(
                    ErrorCode.TOOL_UNBOUND,
                    instruction="There is no tool of that name.",
                    available_tools=list(self._ports),
                ),
                self._max_output_bytes,
            )
        definition = port.definition(name)
        converted = self._converted(definition, profile, arguments)
        if isinstance(converted, ToolResult):
            return converted
        token = CancelToken()
        try:
            identity = self._identity() if callable(self._identity) else self._identity
        except Exception:
            return error_result(
                ErrorCode.HARNESS_CALLBACK_FAILED,
                instruction="The harness's identity function failed; nothing ran.",
            )
        asked_key = operation_key
        repeat = None
        same = same_call(name, converted, port.settings) if reconcile_repeats else None
        if same is not None:
            repeat = (
                repeat_scope(run_id, operation_key, call_id),
                hashlib.sha256(same).hexdigest(),
            )
        if repeat is not None:
            with self._lock:
                earlier = list(self._unsettled.get(repeat, ()))
                seen = [(held.key, held.turn, dict(held.taken)) for held in earlier]
                ran_as = self._ran_as.get((repeat, operation_key))
            if earlier or ran_as is not None:
                key = repeat_key(
                    operation_key,
                    turn,
                    seen,
                    launched=self.launched(name, operation_key) is not None,
                    rejected=lambda key: self._rejected_unrun(definition, key),
                    ran_before=None if ran_as is None else ran_as.key,
                )
                if key != operation_key:
                    # The earlier call's key and arguments: the same launch
                    # to the port, however this repeat spelled its defaults.
                    # Taken by this call: another repeat of the same message
                    # takes another earlier call, and this one keeps it when
                    # run again, even once it was settled.
                    held = next((held for held in earlier if held.key == key), ran_as)
                    assert held is not None  # the key came from earlier or ran_as
                    with self._lock:
                        held.taken[operation_key] = turn
                        self._ran_as[(repeat, operation_key)] = held
                        self._ran_as.move_to_end((repeat, operation_key))
                        while len(self._ran_as) > _RAN_AS_KEPT:
                            self._ran_as.popitem(last=False)
                    operation_key, converted = key, held.arguments
        request = ToolRequest(
            call=ToolCall(name=name, call_id=call_id, arguments=converted),
            operation_key=operation_key,
            session_id=self._session_id,
            definition=definition,
            identity=identity,
            cancel=token if cancel is None else EitherSignal(token, cancel),
        )
        return _Prepared(port, request, token, repeat, deadline, asked_key, turn)

    def _rejected_unrun(self, definition: ToolDefinition, operation_key: str) -> bool:
        """Whether a person rejected the call under ``operation_key`` first
        and nothing ran under it: that call is settled (a repeat of it in
        another turn is a new question, see :func:`~sandrail.core.repeat_key`)."""
        question = self._decisions.of(lookup(definition, self._session_id, operation_key))
        if question is None or question.decision != "rejected":
            return False
        return self.launched(definition.name, operation_key) is None

    def _converted(
        self, definition: ToolDefinition, profile: Profile, arguments: object
    ) -> Mapping[str, Any] | ToolResult:
        """The model's ``arguments`` in the port's form (``profile``'s
        undone, a deadline spelled as its default left out: the call that
        leaves it out, so one digest and one claim, C3), or their refusal
        with the session's values masked."""
        if not isinstance(arguments, Mapping):
            # Not an object at all (a list, a tuple, a string): refused as
            # such, never converted (a tuple would pass for problems).
            problem = ArgumentProblem("arguments", "must be a JSON object")
            content = arguments_rejection([problem], self._max_output_bytes)
            return ToolResult(status="error", content=content)
        converted = canonical_arguments(definition, profile, arguments)
        if not isinstance(converted, (tuple, Mapping)):
            converted = (ArgumentProblem("arguments", "must be a JSON object"),)
        if isinstance(converted, tuple):
            problems = masked_problems(converted, self._masks.secrets, arguments)
            content = arguments_rejection(problems, self._max_output_bytes)
            return ToolResult(status="error", content=content)
        port = self._ports.get(definition.name)
        return (
            converted
            if port is None
            else settled_arguments(definition.name, converted, port.settings)
        )

    def launched(self, name: str, operation_key: str) -> OwnedCommand | None:
        """The ownership record's row when a start of tool ``name`` under
        ``operation_key`` may already have left (this toolset's record, and
        the harness's durable one when it gives one), else ``None``: a call
        that already launched is never answered ``executed: false`` (C5)."""
        definitions = {n: port.definition(n) for n, port in self._ports.items()}
        return launched_row(
            self._resolve, definitions, self._session_id, self._owner, name, operation_key
        )

    def _launched_alike(self, request: ToolRequest) -> bool:
        """Whether ``request``'s key already launched this very call (the
        same launch digest, C3): ``ApprovalRequired`` then reconciles it."""
        call = request.call
        try:
            name, key = str(call.name), str.__str__(request.operation_key)
            known = self.launched(name, key)
            return known is not None and alike(known, name, call.arguments, self._masks.secrets)
        except Exception:
            return False

    def _after_launch(self, request: ToolRequest, result: ToolResult) -> ToolResult:
        """``result``, unless the policy refused (``policy_denied``) a call
        whose key already launched (:func:`refused_after_launch`)."""
        content = result.content
        if result.status != "error" or content.get("error_type") != ErrorCode.POLICY_DENIED.value:
            return result
        known = self.launched(str(request.call.name), str.__str__(request.operation_key))
        if known is None:
            return result
        return refused_after_launch(
            ErrorCode.POLICY_DENIED,
            known,
            request,
            reason=content.get("instruction"),
            readable="read_command_output" in self._ports,
            max_output_bytes=self._max_output_bytes,
        )


class _Prepared(NamedTuple):
    """A call ready to run (from :meth:`ToolsetRequests._prepare`)."""

    port: ToolPort
    request: ToolRequest
    token: CancelToken
    repeat: _Repeat | None
    deadline: float | None
    asked_key: str
    """The key the caller gave (the request runs under an earlier call's
    when it repeats that call)."""
    turn: str | None = None
    """The model turn that made the call, when the caller named it."""


def check_timeout(timeout_seconds: object) -> float | None:
    """``timeout_seconds`` as a float, or ``ValueError`` unless it is ``None``
    or a positive number of at most :data:`MAX_CALL_TIMEOUT_SECONDS`."""
    if timeout_seconds is None:
        return None
    if (
        isinstance(timeout_seconds, bool)
        or not isinstance(timeout_seconds, (int, float))
        # Compared as given: an int too large for a float is still refused
        # as too long (math.isfinite would raise OverflowError on it).
        or not 0 < timeout_seconds <= MAX_CALL_TIMEOUT_SECONDS
    ):
        raise ValueError(
            "timeout_seconds must be a positive number of at most "
            f"{MAX_CALL_TIMEOUT_SECONDS} (a year), got {_shown(timeout_seconds)}"
        )
    return float(timeout_seconds)


def _shown(value: object) -> str:
    """``repr(value)``, cut short (a 400-digit int is no message)."""
    try:
        text = repr(value)
    except Exception:
        return f"a {type(value).__name__}"
    return text if len(text) <= 40 else text[:37] + "..."
