"""What the engine integrations share: one toolset per workflow session,
worker-side secrets, the locator a heartbeat carries, and the one rule of
what the engine does with each answer.

Strategy: the engine gives identity (workflow, attempt, step) through its
own context (a context variable set for the activity or step that runs), so
a toolset is built once per *session* and asks that context on every call:
its ``identity`` function and its authority check read the current call's
engine context, never the one of the call that built it. Concurrent calls
of one workflow share the toolset, as they share the sandbox.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

from sandrail import (
    ALLOW,
    NativeIdentity,
    NativeOwner,
    ToolRequest,
    ToolResult,
    Toolset,
    task_id,
)
from sandrail.adapters.kit import run_id_of
from sandrail.core import TOOLS

__all__ = [
    "Refusals",
    "SessionToolsets",
    "Verdict",
    "check_refusals",
    "engine_id",
    "engine_options",
    "locator",
    "verdict",
    "with_env",
]

Refusals = Literal["return", "raise"]
"""What a call does with an answer that is not ``ok``: return it (an agent's
tool: the model reads it) or raise the engine's non-retryable failure."""

Verdict = Literal["return", "reconcile", "refuse"]
"""What the engine should do with an answer (see :func:`verdict`)."""

_KEPT_TOOLSETS: Final = 256

_RESERVED: Final = frozenset({"session_id", "owner", "identity", "assert_authority", "run_id"})


def engine_id(*parts: str) -> str:
    """One operation key or session id from the engine's identity parts,
    joined by ``:`` with each part's ``%`` and ``:`` escaped
    (:func:`sandrail.adapters.kit.run_id_of`), so ids that hold a ``:``
    (a workflow id ``a:call:b``) never make two calls one key; parts
    without either character are kept as they are. Raises ``ValueError``
    for a blank part (the engine gave no identity to key by)."""
    joined = run_id_of(*parts)
    if joined is None:
        raise ValueError(f"the engine gave a blank identity part: {parts!r}")
    return joined


def engine_options(reconcile_attempts: object, build_id: object, version: str) -> tuple[int, str]:
    """The bound on attempts and the build id an integration runs with
    (``build_id`` defaults to ``sandrail-{version}``). Raises ``TypeError``
    or ``ValueError`` for a bound that is not an int from 1 to 100 or a
    build id that is not a non-blank string."""
    if isinstance(reconcile_attempts, bool) or not isinstance(reconcile_attempts, int):
        raise TypeError("reconcile_attempts must be an int")
    if not 1 <= reconcile_attempts <= 100:
        raise ValueError("reconcile_attempts must be between 1 and 100")
    if build_id is None:
        return reconcile_attempts, f"sandrail-{version}"
    if not isinstance(build_id, str) or not build_id.strip():
        raise ValueError("build_id must be a non-blank string")
    return reconcile_attempts, build_id


def check_refusals(refusals: object) -> Refusals:
    """``refusals`` itself, or ``ValueError`` unless it is ``"return"`` or ``"raise"``."""
    if refusals == "return":
        return "return"
    if refusals == "raise":
        return "raise"
    raise ValueError(f'refusals must be "return" or "raise", got {refusals!r}')


class SessionToolsets:
    """One :class:`~sandrail.Toolset` per session id, built on first use
    and kept (the most recent 256) for as long as this worker lives.

    Each toolset has a :class:`~sandrail.NativeOwner` of ``scope``, the
    identity ``identity()`` returns for the call running when it is asked
    (its execution fence is the engine's attempt), and an authority check
    that holds while ``engine_authority()`` does and the harness's own
    ``assert_authority`` (if given) does too. ``options`` are the other
    options of :class:`~sandrail.Toolset`, given to each.

    Raises ``TypeError`` or ``ValueError`` at once for options no toolset
    could take (built once here to find out), never on a later call.
    """

    def __init__(
        self,
        *,
        scope: Mapping[str, Any],
        identity: Callable[[], NativeIdentity],
        engine_authority: Callable[[], bool],
        env: Mapping[str, str] | Callable[[], Mapping[str, str]] | None,
        options: Mapping[str, Any],
    ) -> None:
        reserved = sorted(_RESERVED & set(options))
        if reserved:
            raise TypeError(
                f"{', '.join(reserved)}: the engine integration sets these itself "
                "(the session and identity come from the workflow)"
            )
        if not isinstance(scope, Mapping):
            raise TypeError("scope must be a JSON object (a mapping), the owner's scope")
        if env is not None and not callable(env) and not isinstance(env, Mapping):
            raise TypeError("env must be a mapping of names to values, or a function returning one")
        self._owner = NativeOwner(scope=dict(scope))
        self._identity = identity
        self._engine_authority = engine_authority
        self._harness_authority: Callable[[ToolRequest], bool] | None = options.get(
            "assert_authority"
        )
        self._env = env
        self._options = {"authorize": lambda request: ALLOW, **options}
        self._toolsets: OrderedDict[str, Toolset] = OrderedDict()
        self._lock = threading.Lock()
        # Build one now: options no toolset can take fail here, not in a call.
        self._build("sandrail-options-check").names  # noqa: B018

    @property
    def owner(self) -> NativeOwner:
        """The owner every toolset here has (its scope is part of each task id)."""
        return self._owner

    def toolset(self, session_id: str) -> Toolset:
        """The toolset of ``session_id`` (built on first use)."""
        with self._lock:
            found = self._toolsets.get(session_id)
            if found is not None:
                self._toolsets.move_to_end(session_id)
                return found
        built = self._build(session_id)
        with self._lock:
            found = self._toolsets.setdefault(session_id, built)
            self._toolsets.move_to_end(session_id)
            while len(self._toolsets) > _KEPT_TOOLSETS:
                self._toolsets.popitem(last=False)
            return found

    def _build(self, session_id: str) -> Toolset:
        return Toolset(
            **self._options,
            session_id=session_id,
            owner=self._owner,
            identity=self._identity,
            assert_authority=self._authority,
        )

    def _authority(self, request: ToolRequest) -> bool:
        if not self._engine_authority():
            return False
        harness = self._harness_authority
        return True if harness is None else bool(harness(request))

    def secrets(self) -> Mapping[str, str]:
        """The worker-side env values (``{}`` without any)."""
        env = self._env
        if env is None:
            return {}
        values = env() if callable(env) else env
        if not isinstance(values, Mapping):
            raise TypeError("the env function must return a mapping of names to values")
        return values


def with_env(name: str, arguments: object, secrets: Mapping[str, str]) -> object:
    """``arguments`` with the worker-side ``secrets`` joined to their ``env``
    (a secret wins over a model's value of the same name), for the tools
    whose record says they take one
    (:attr:`~sandrail.core.ToolRecord.takes_env`); anything else unchanged
    (the port refuses what is not valid, with its own words, and a tool
    without a record)."""
    record = TOOLS.get(name) if isinstance(name, str) else None
    if not secrets or record is None or not record.takes_env:
        return arguments
    if not isinstance(arguments, Mapping):
        return arguments
    given = arguments.get("env")
    env = dict(given) if isinstance(given, Mapping) else {}
    if given is not None and not isinstance(given, Mapping):
        return arguments  # refused by the port as it is
    env.update(secrets)
    return {**arguments, "env": env}


def call_arguments(arguments: object) -> object:
    """A call's arguments as the toolset takes them: a mapping copied, none
    as ``{}``, anything else as it is (the toolset refuses it as the call's
    bad arguments, ``e2b_command_arguments_invalid``, and nothing runs)."""
    if arguments is None:
        return {}
    return dict(arguments) if isinstance(arguments, Mapping) else arguments


def call_identity(
    call_id: object, derive: Callable[[str | None], str], default: str
) -> tuple[Any, str]:
    """The call id a tool call runs under and its operation key: the
    model's call id and the key ``derive(call_id)``, or the engine's own
    (``default`` and ``derive(None)``) without one. A blank, non-string or
    NUL-holding call id stays as given, under the engine's own key, so the
    toolset refuses it as bad input (``e2b_command_request_unbound``, nothing
    runs), answered as every refusal is rather than as an error the engine
    retries."""
    if call_id is None:
        return default, derive(None)
    if isinstance(call_id, str) and call_id.strip() and "\x00" not in call_id:
        return call_id, derive(call_id)
    return call_id, derive(None)


def locator(
    toolset: Toolset, owner: NativeOwner, name: str, call_id: str, operation_key: str
) -> dict[str, Any]:
    """What a heartbeat carries: where the call's task is, never its
    arguments (they may hold a secret) nor its output."""
    return {
        "sandrail": 1,
        "tool": name,
        "session_id": toolset.session_id,
        "operation_key": operation_key,
        "call_id": call_id,
        "task_id": task_id(toolset.session_id, owner, operation_key),
    }


def verdict(result: ToolResult, *, last_attempt: bool, attempt_lost: bool = False) -> Verdict:
    """The one rule of what the engine does with an answer.

    - ``ok``: returned.
    - ``uncertain``: a new attempt of the engine, with the same operation
      key, reconciles it and never launches again (C2), so it is retried
      (``"reconcile"``) while attempts are left, and returned (or raised as
      a failure that is not retried) on the last one: never retried
      without bound.
    - ``error`` when the engine's attempt itself was lost before anything
      was sent (``attempt_lost``: its lease lapsed): retried within the same
      bound, since nothing ran and the engine may still want the call.
    - any other ``error``, and ``approval_required``: a refusal
      (``"refuse"``): nothing ran, and running it again would only be
      refused again.
    """
    if result.status == "ok":
        return "return"
    if result.status == "uncertain" or (attempt_lost and result.status == "error"):
        return "return" if last_attempt else "reconcile"
    return "refuse"
