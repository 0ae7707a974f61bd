"""The one object a harness embeds: every sandrail tool behind one call.

A :class:`Toolset` binds a session, an owner and its identity, the harness's
policy and authority callbacks and a backend, and builds the command and code
ports on them. ``await toolset.call(name, arguments, call_id=...,
operation_key=...)`` runs one tool call through the port and returns its
:class:`~sandrail.core.ToolResult`; ``result.to_json()`` is the text to send
the model. The framework adapters in :mod:`sandrail.adapters` are thin glue
around this one method.

Operation keys. The operation key is a call's retry identity: a call retried
with the same key never launches twice and returns the state of the first
launch (C2); a call with a new key is a new call. Derive it from the agent
run and the tool call: ``f"{run_id}:{call_id}"`` (what
:meth:`Toolset.operation_key` builds), where the run id is stable for as long
as the same logical run may be retried (across process restarts, if runs
resume) and the call id is the model's id for the tool call. Never use a
value a framework reuses across runs on its own: a test model that numbers
its calls from 1 in every run, for one, would make the second run's calls
retries of the first run's, so nothing new would run.

Timeouts. ``timeout_seconds=`` is the call's own deadline: when it passes,
the call is aborted as a :class:`~sandrail.CancelToken` abort is (the port
finishes at once: its waits wake on abort) and the result is *returned*:
``canceled`` if nothing was sent, else ``uncertain`` with the full locator.
This is the timeout to give a model's tool calls. A framework's own tool
timeout cancels the await instead, and the framework then tells the model
only that the tool timed out: the locator never reaches it.

Cancellation. A framework that cancels the await of :meth:`Toolset.call`
(``asyncio.wait_for`` timing out, a task cancelled, an MCP client's cancel)
gets the effect of a :class:`~sandrail.CancelToken` abort: the call's token
fires, the port finishes at once, the result is kept in
:attr:`Toolset.abandoned`, and then the cancellation goes on to the caller.
Aborted before anything was sent, the call ran nothing (``canceled``); after,
it is ``uncertain`` and the next call with the same operation key reconciles
it, never launching a second time.

Repeats of unsettled calls. A model cannot choose its operation key: its
retry of a call is a new tool call with a new call id, hence a new key. So a
call made with ``reconcile_repeats=True`` (the adapters do) that repeats an
earlier call exactly (same tool, same arguments in canonical form) runs
under that earlier call's operation key while the earlier call is
*unsettled*: its result was ``uncertain`` or ``approval_required``, or it
never reached the model (its await was cancelled). The repeat then
reconciles instead of launching a second time, even if the model never saw
the locator. Repeats match only within one run: the run id the call passes
(``run_id=``; by default the part of its operation key before
``:{call_id}``), so a later run's identical call is always a new call,
never an earlier run's result. Arguments match as the port reads them (a
``timeout`` of ``null`` is the default it stands for). Once a result of
the earlier call's own task (``ok``, or an ``error`` naming its
``task_id``) was returned for that key, the next identical call is a new
call and runs anew; a refusal that ran nothing (a budget too small for the
repeat's identity, say) leaves it unsettled. Two identical calls in flight
at once are two calls. The record lives in this object (the most recent
1024 unsettled calls): a new process starts empty.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal

from sandrail._port import (
    ArtifactStore,
    AuthorityCallback,
    AuthorizeCallback,
    RememberOwnedCallback,
    ResolveOwnedCallback,
    ToolPort,
    code_tools,
    command_tools,
)
from sandrail.core import (
    DEFAULT_MAX_OUTPUT_BYTES,
    AgentIdentity,
    AgentOwner,
    ArgumentProblem,
    CanonicalJSONError,
    ErrorCode,
    NativeIdentity,
    OwnedCommand,
    Owner,
    OwnerIdentity,
    Redactions,
    ToolCall,
    ToolDefinition,
    ToolRequest,
    ToolResult,
    arguments_rejection,
    bound_result,
    error_result,
    launch_digest,
    mask_text,
    minimum_output_bytes,
    redaction_secrets,
)
from sandrail.core._profiles import Profile, canonical_arguments, tool_schema
from sandrail.interpreters._cancel import CancelToken
from sandrail.records._protocol import OwnershipRecord

__all__ = ["MAX_CALL_TIMEOUT_SECONDS", "Toolset", "check_timeout", "refusal"]

ToolGroup = Literal["command", "code"]
IdentitySource = OwnerIdentity | Callable[[], OwnerIdentity]
_Repeat = tuple[str, str]  # (the run, the launch digest): what repeats match on

_ABANDONED_KEPT: Final = 1024
_UNSETTLED_KEPT: Final = 1024
_SETTLED: Final = frozenset({"ok", "error"})

MAX_CALL_TIMEOUT_SECONDS: Final = 86_400 * 366
"""The longest ``timeout_seconds`` a call takes (a year): longer ones are a
harness bug (and past ``threading.TIMEOUT_MAX`` no timer can wait them)."""


def refusal(code: ErrorCode, instruction: str, max_output_bytes: int) -> ToolResult:
    """An ``error`` result (nothing ran) with ``instruction``, within the budget."""
    return bound_result(error_result(code, instruction=instruction), max_output_bytes)


class Toolset:
    """Every sandrail tool for one session and owner, behind one call.

    - ``backend``, ``session_id``, ``owner``, ``authorize``,
      ``assert_authority`` and the optional settings are those of
      :func:`sandrail.command_tools`; both ports share them. A
      :class:`~sandrail.interpreters.replay.Recorder` backend records one
      port: the toolset attaches it itself, so give it one tool group
      (``tools=("command",)`` or ``("code",)``) and a recorder not yet
      attached (``ValueError`` otherwise).
    - ``identity``: what each request states about its caller. For an
      :class:`~sandrail.AgentOwner` it defaults to the matching
      :class:`~sandrail.AgentIdentity`; a native owner must pass a
      :class:`~sandrail.NativeIdentity`, or a function returning the current
      one (its ``turn_id`` and fence change as the run goes on).
    - ``tools``: ``("command", "code")`` by default; the code tool is
      ``run_code`` for a native owner and ``sandbox_run_code`` for an agent.
    - ``run_id``: the run part of :meth:`operation_key`; a fresh random one
      by default. Give the harness's own run id when runs resume after a
      restart.

    Keep one toolset for as long as its session lives: its ports share one
    ownership record of the commands they launched, which
    ``read_command_output`` and ``stop_command`` check (C4) and which makes a
    retry through either port expect the claim its first start may have made
    (C2). A second toolset for the same session, or one after a restart,
    reaches them only through a durable record: pass
    ``remember_owned_command`` and ``resolve_owned_command`` (see the README's
    "Retries, restarts and threads"), or ``record=`` (a
    :mod:`sandrail.records` store). ``redact`` are values to mask from the
    start (a restarted harness's env values). ``tracer_provider`` and
    ``meter_provider``: see :func:`~sandrail.command_tools`.

    Raises ``TypeError`` or ``ValueError`` at once for a toolset that could
    not work, a ``max_output_bytes`` too small for the full identity of its
    tools' results included (the message names the minimum); after
    construction :meth:`call` never raises but for cancellation (see the
    module doc).
    """

    def __init__(
        self,
        *,
        backend: Callable[[Any], Any],
        session_id: str,
        owner: Owner,
        authorize: AuthorizeCallback,
        assert_authority: AuthorityCallback,
        identity: IdentitySource | None = None,
        tools: Iterable[ToolGroup] = ("command", "code"),
        run_id: str | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        artifacts: ArtifactStore | None = None,
        resolve_owned_command: ResolveOwnedCallback | None = None,
        remember_owned_command: RememberOwnedCallback | None = None,
        foreground_timeout_seconds: int = 300,
        background_timeout_seconds: int = 300,
        allow_internet_access: bool = False,
        redact: Iterable[str] = (),
        record: OwnershipRecord | None = None,
        tracer_provider: Any = None,
        meter_provider: Any = None,
    ) -> None:
        groups = tuple(tools)
        if not groups or any(group not in ("command", "code") for group in groups):
            raise ValueError('tools must name "command", "code" or both')
        recorder = _recorder(backend, groups)
        if identity is None:
            if not isinstance(owner, AgentOwner):
                raise TypeError(
                    "a native owner needs identity=NativeIdentity(...) "
                    "(or a function returning the current one)"
                )
            identity = AgentIdentity(agent_id=owner.agent_id)
        elif not callable(identity) and not isinstance(identity, (AgentIdentity, NativeIdentity)):
            raise TypeError("identity must be an AgentIdentity, a NativeIdentity or a function")
        if run_id is not None and (not isinstance(run_id, str) or not run_id.strip()):
            raise ValueError("run_id must be a non-blank string")
        self._identity = identity
        self._run_id = run_id if run_id is not None else uuid.uuid4().hex
        self._max_output_bytes = max_output_bytes
        self._ports: dict[str, ToolPort] = {}
        self._abandoned: OrderedDict[str, ToolResult] = OrderedDict()
        if record is not None:  # the ports share it as they share the callbacks
            if remember_owned_command is not None or resolve_owned_command is not None:
                raise TypeError(
                    "give record= or the remember_owned_command/resolve_owned_command pair, "
                    "not both"
                )
            remember_owned_command, resolve_owned_command = record.remember, record.resolve
        remember, resolve = _shared_record(remember_owned_command, resolve_owned_command)
        secrets = tuple(redact) if not isinstance(redact, str) else redact
        shared_masks = None
        for group in dict.fromkeys(groups):
            factory = command_tools if group == "command" else code_tools
            port = factory(
                backend=backend,
                session_id=session_id,
                owner=owner,
                authorize=authorize,
                assert_authority=assert_authority,
                max_output_bytes=max_output_bytes,
                artifacts=artifacts,
                resolve_owned_command=resolve,
                remember_owned_command=remember,
                foreground_timeout_seconds=foreground_timeout_seconds,
                background_timeout_seconds=background_timeout_seconds,
                allow_internet_access=allow_internet_access,
                redact=secrets,
                tracer_provider=tracer_provider,
                meter_provider=meter_provider,
            )
            port._answers = record  # each task's last answer, for operators
            # One memory of values to mask for all the toolset's ports (C17).
            port._masks = masks = shared_masks if shared_masks is not None else port._masks
            shared_masks = masks
            for definition in port.definitions:
                self._ports[definition.name] = port
        self._session_id = session_id
        self._asynchronous = _answers_with_awaitables(backend)
        self._unsettled: OrderedDict[_Repeat, tuple[str, Mapping[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()
        needed, tool = self._needed()
        if max_output_bytes < needed:
            raise ValueError(
                f"max_output_bytes={max_output_bytes} is too small for this toolset: every "
                f"{tool} result carries the call's full identity, which needs at least {needed} "
                "bytes with one-character call ids and operation keys (longer ones need as "
                f"many more). Use at least {needed}; the default is {DEFAULT_MAX_OUTPUT_BYTES}."
            )
        if recorder is not None:  # last: a toolset refused above attaches nothing
            recorder.attach(next(iter(self._ports.values())))  # writes the header

    # -- what the model is offered -------------------------------------------

    @property
    def names(self) -> tuple[str, ...]:
        """The tool names, in a stable order."""
        return tuple(self._ports)

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def max_output_bytes(self) -> int:
        """The byte budget of every result's :meth:`~sandrail.ToolResult.to_json`."""
        return self._max_output_bytes

    def minimum_output_bytes(self, *, call_id: str = "c", operation_key: str = "k") -> int:
        """The smallest ``max_output_bytes`` with which every tool here admits
        a call with ``call_id`` and ``operation_key`` (C14: a result always
        carries the call's full identity, never cut). Below it such calls are
        refused (``e2b_command_budget_below_minimum_identity``); the default
        one-character ids give the floor no call can go below. A native
        identity given as a function is measured at its shortest."""
        return self._needed(call_id, operation_key)[0]

    def _needed(self, call_id: str = "c", operation_key: str = "k") -> tuple[int, str]:
        fixed = None if callable(self._identity) else self._identity
        return max(
            (
                minimum_output_bytes(
                    port.settings, name, fixed, call_id=call_id, operation_key=operation_key
                ),
                name,
            )
            for name, port in self._ports.items()
        )

    @property
    def run_id(self) -> str:
        """The run part of :meth:`operation_key` when none is given."""
        return self._run_id

    def definition(self, name: str) -> ToolDefinition:
        """The definition of tool ``name``; ``KeyError`` if there is none."""
        port = self._ports.get(name)
        if port is None:
            raise KeyError(f"this toolset has no tool named {name!r}; it has {list(self._ports)}")
        return port.definition(name)

    def schema(self, name: str, profile: Profile = "full") -> dict[str, Any]:
        """The parameters schema of tool ``name`` in ``profile`` (``full``,
        ``openai-strict`` or ``anthropic-strict``): a fresh plain dict to hand
        a framework. Arguments the model builds from it go back through
        :meth:`call` with the same ``profile``."""
        return tool_schema(self.definition(name), profile)

    def operation_key(self, call_id: str, *, run_id: str | None = None) -> str:
        """``f"{run_id}:{call_id}"``, the documented operation-key rule (see
        the module doc), with this toolset's :attr:`run_id` by default.
        Raises ``ValueError`` for a blank or non-string ``call_id`` or
        ``run_id`` (a key of nothing would make different calls one)."""
        if not isinstance(call_id, str) or not call_id.strip():
            raise ValueError("call_id must be a non-blank string")
        if run_id is not None and (not isinstance(run_id, str) or not run_id.strip()):
            raise ValueError("run_id must be a non-blank string")
        return f"{self._run_id if run_id is None else run_id}:{call_id}"

    @property
    def abandoned(self) -> Mapping[str, ToolResult]:
        """Results of calls whose caller cancelled the await, by the
        operation key the caller passed (the most recent 1024): what the port
        recorded when it stopped. (A repeat that ran under an earlier call's
        key, see the module doc, names that key in its content.)"""
        with self._lock:
            return dict(self._abandoned)

    # -- calls -------------------------------------------------------------------

    async def call(
        self,
        name: str,
        arguments: object,
        *,
        call_id: str,
        operation_key: str,
        profile: Profile = "full",
        cancel: object | None = None,
        timeout_seconds: float | None = None,
        reconcile_repeats: bool = False,
        run_id: str | None = None,
    ) -> ToolResult:
        """Run one tool call and return its result; never raises but for the
        caller's own cancellation (after which the result is in
        :attr:`abandoned`) and a ``ValueError`` for an unknown ``profile``, a
        ``timeout_seconds`` that is not a positive number of at most
        :data:`MAX_CALL_TIMEOUT_SECONDS` or a ``run_id`` that is not a
        non-blank string (harness bugs, not a model's).

        ``arguments`` are the model's, in the shape of ``profile``'s schema;
        ``cancel`` is an optional abort signal of the harness (anything with a
        bool ``cancelled``, like :class:`~sandrail.CancelToken``);
        ``timeout_seconds`` is the call's deadline, after which it is aborted
        and its ``canceled`` or ``uncertain`` result returned;
        ``reconcile_repeats`` runs an exact repeat of an unsettled call of
        the same run under that call's operation key (see the module doc);
        ``run_id`` names that run (by default the part of ``operation_key``
        before ``:{call_id}``; a key of another form matches no other call).
        """
        deadline = check_timeout(timeout_seconds)
        _check_run_id(run_id)
        prepared = self._prepare(
            name, arguments, call_id, operation_key, profile, cancel, reconcile_repeats, run_id
        )
        if isinstance(prepared, ToolResult):
            return prepared
        port, request, token, repeat = prepared
        task = asyncio.ensure_future(port.execute(request))
        try:
            if deadline is not None:
                await asyncio.wait({task}, timeout=deadline)
                if not task.done():
                    token.cancel()  # the port finishes at once (C11)
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            token.cancel()
            result = await _outlast_cancellation(task)
            with self._lock:
                # Under the key the caller knows (a repeat may have run
                # under an earlier call's: the content names that one).
                self._abandoned[operation_key] = result
                self._abandoned.move_to_end(operation_key)
                while len(self._abandoned) > _ABANDONED_KEPT:
                    self._abandoned.popitem(last=False)
            self._record(repeat, request, result, returned=False)
            raise
        self._record(repeat, request, result, returned=True)
        return result

    def call_sync(
        self,
        name: str,
        arguments: object,
        *,
        call_id: str,
        operation_key: str,
        profile: Profile = "full",
        cancel: object | None = None,
        timeout_seconds: float | None = None,
        reconcile_repeats: bool = False,
        run_id: str | None = None,
    ) -> ToolResult:
        """:meth:`call` for code without an event loop; never raises but for
        the same harness bugs. With an asynchronous backend (one that declares
        ``asynchronous = True``, or an ``async`` function) it runs the call on
        a private event loop; inside a running loop it refuses
        (``e2b_command_sync_contract_invalid``, nothing ran): await
        :meth:`call` there. With a synchronous backend the deadline is seen
        at the port's next check (a blocking backend call is not interrupted).
        """
        deadline = check_timeout(timeout_seconds)
        _check_run_id(run_id)
        prepared = self._prepare(
            name, arguments, call_id, operation_key, profile, cancel, reconcile_repeats, run_id
        )
        if isinstance(prepared, ToolResult):
            return prepared
        port, request, token, repeat = prepared
        if self._asynchronous:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                result = asyncio.run(_run_async(port, request, token, deadline))
            else:
                return refusal(
                    ErrorCode.SYNC_CONTRACT_INVALID,
                    "call_sync was called inside a running event loop with an asynchronous "
                    "backend; nothing ran. Await toolset.call(...) there.",
                    self._max_output_bytes,
                )
        else:
            timer = None if deadline is None else threading.Timer(deadline, token.cancel)
            if timer is not None:
                timer.daemon = True
                timer.start()
            try:
                result = port.execute_sync(request)
            finally:
                if timer is not None:
                    timer.cancel()
        self._record(repeat, request, result, returned=True)
        return result

    def _prepare(
        self,
        name: str,
        arguments: object,
        call_id: str,
        operation_key: str,
        profile: Profile,
        cancel: object | None,
        reconcile_repeats: bool,
        run_id: str | None,
    ) -> ToolResult | tuple[ToolPort, ToolRequest, CancelToken, _Repeat | None]:
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
            problems = _masked(converted, port, arguments)
            content = arguments_rejection(problems, self._max_output_bytes)
            return ToolResult(status="error", content=content)
        token = CancelToken()
        try:
            identity = self._identity() if callable(self._identity) else self._identity
        except Exception:
            return error_result(
                ErrorCode.HARNESS_CALLBACK_FAILED,
                instruction="The harness's identity function failed; nothing ran.",
            )
        repeat = None
        if reconcile_repeats:
            digest = _repeat_digest(name, _as_the_port_reads(port, name, converted))
            if digest is not None:
                repeat = (_run_of(run_id, operation_key, call_id), digest)
        if repeat is not None:
            with self._lock:
                earlier = self._unsettled.get(repeat)
            if earlier is not None:
                # The earlier call's key and arguments: the same launch to
                # the port, however this repeat spelled its defaults.
                operation_key, converted = earlier
        request = ToolRequest(
            call=ToolCall(name=name, call_id=call_id, arguments=converted),
            operation_key=operation_key,
            session_id=self._session_id,
            definition=definition,
            identity=identity,
            cancel=token if cancel is None else _Either(cancel, token),
        )
        return port, request, token, repeat

    def _record(
        self, repeat: _Repeat | None, request: ToolRequest, result: ToolResult, *, returned: bool
    ) -> None:
        """Keep or drop the call as unsettled (see the module doc)."""
        if repeat is None:
            return
        key = request.operation_key
        with self._lock:
            if returned and result.status in _SETTLED:
                earlier = self._unsettled.get(repeat)
                if earlier is not None and earlier[0] == key and _of_its_task(result):
                    del self._unsettled[repeat]
                return
            self._unsettled[repeat] = (key, request.call.arguments)
            self._unsettled.move_to_end(repeat)
            while len(self._unsettled) > _UNSETTLED_KEPT:
                self._unsettled.popitem(last=False)


async def _run_async(
    port: ToolPort, request: ToolRequest, token: CancelToken, deadline: float | None
) -> ToolResult:
    task = asyncio.ensure_future(port.execute(request))
    if deadline is not None:
        await asyncio.wait({task}, timeout=deadline)
        if not task.done():
            token.cancel()
    return await task


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


def _check_run_id(run_id: object) -> None:
    if run_id is not None and (not isinstance(run_id, str) or not str.__str__(run_id).strip()):
        raise ValueError("run_id must be a non-blank string")


def _run_of(run_id: object, operation_key: object, call_id: object) -> str:
    """The run a call belongs to, for matching repeats (see the module doc):
    ``run_id`` when given, else the run part of a ``f"{run}:{call_id}"``
    key, else the key itself (a call that matches no other). Read as plain
    strings: a ``str`` subclass's own methods are never called."""
    run, key, call = (
        str.__str__(v) if isinstance(v, str) else None for v in (run_id, operation_key, call_id)
    )
    if run is not None:
        return "run:" + run
    if key is None:
        return "key"  # the port refuses a key that is not a string
    if call is not None and key.endswith(":" + call) and len(key) > len(call) + 1:
        return "run:" + key[: -len(call) - 1]
    return "key:" + key


def _as_the_port_reads(
    port: ToolPort, name: str, arguments: Mapping[str, Any]
) -> Mapping[str, Any]:
    """``arguments`` with the timeouts the port would use in place of the
    ones left out (``null``) or capped: what repeat matching compares."""
    if name not in ("run_command", "run_code", "sandbox_run_code"):
        return arguments
    settings = port.settings
    filled = dict(arguments)
    try:
        if name == "run_command" and filled.get("background") is True:
            wanted = filled.get("background_timeout") or settings.background_timeout_seconds
            filled["background_timeout"] = wanted
        else:
            wanted = filled.get("timeout") or settings.foreground_timeout_seconds
            filled["timeout"] = min(wanted, settings.foreground_timeout_seconds)
    except TypeError:
        return arguments  # not a number: the port refuses it anyway
    return filled


def _of_its_task(result: ToolResult) -> bool:
    """Whether ``result`` is its key's task's own outcome (``ok``, or an
    ``error`` naming its ``task_id``), not a refusal that ran nothing."""
    if result.status == "ok":
        return True
    task = result.content.get("task_id")
    return isinstance(task, str) and bool(task)


def _repeat_digest(name: str, arguments: Mapping[str, Any]) -> str | None:
    """What makes two calls one call's repeat: what the port deems the same
    launch (C3: the tool and its canonical arguments with defaults filled in,
    so key order, 1 versus 1.0 or an empty env make no difference)."""
    try:
        return launch_digest(name, arguments)
    except (CanonicalJSONError, TypeError, ValueError, RecursionError):
        return None  # the port refuses such arguments anyway


def _masked(
    problems: Iterable[ArgumentProblem], port: ToolPort, arguments: object
) -> list[ArgumentProblem]:
    """``problems`` with the session's and this call's env values masked:
    a model may write a value into a field name it gets back (C17). Masked
    before the budget fits them (a mask can be longer than the value)."""
    secrets = set(port._masks.secrets)
    env = arguments.get("env") if isinstance(arguments, Mapping) else None
    if isinstance(env, list):  # the strict profiles' {name, value} entries
        env = {
            str(index): entry.get("value")
            for index, entry in enumerate(env)
            if isinstance(entry, Mapping)
        }
    secrets |= redaction_secrets(env)
    if not secrets:
        return list(problems)
    redactions = Redactions(secrets)
    return [
        ArgumentProblem(mask_text(problem.path, redactions), mask_text(problem.reason, redactions))
        for problem in problems
    ]


def _recorder(backend: object, groups: tuple[str, ...]) -> Any:
    """``backend`` when it is a :class:`~sandrail.interpreters.replay.Recorder`
    this toolset can attach (one tool group, not yet attached), else ``None``
    for any other backend; ``ValueError`` naming what to do otherwise."""
    from sandrail.interpreters.replay import Recorder

    if not isinstance(backend, Recorder):
        return None
    if len(set(groups)) != 1:
        raise ValueError(
            'a Recorder records one port, and tools=("command", "code") builds two: give '
            'this toolset tools=("command",) or tools=("code",) (one Recorder per toolset)'
        )
    if backend._settings is not None:
        raise ValueError(
            "this Recorder already records a port: give the toolset a new Recorder, "
            "which the toolset attaches itself"
        )
    return backend


def _answers_with_awaitables(backend: object) -> bool:
    """Whether ``backend`` is asynchronous: it says so (``asynchronous =
    True``) or it is an ``async`` function (or object whose ``__call__`` is)."""
    try:
        if getattr(backend, "asynchronous", False) is True:
            return True
    except Exception:
        return False  # a backend that cannot be read is the port's to refuse
    if inspect.iscoroutinefunction(backend):
        return True
    call = next((vars(k)["__call__"] for k in type(backend).__mro__ if "__call__" in vars(k)), None)
    return inspect.iscoroutinefunction(call)


class _Either:
    """An abort signal that fires when the harness's own signal or the
    toolset's token does (the toolset's fires when the await is cancelled)."""

    def __init__(self, harness: object, own: CancelToken) -> None:
        self._harness = harness
        self._own = own

    @property
    def cancelled(self) -> bool:
        if self._own.cancelled:
            return True
        try:
            return getattr(self._harness, "cancelled", False) is True
        except Exception:
            return True  # a signal that cannot be read may have fired

    def add_callback(self, callback: Callable[[], object]) -> Callable[[], None]:
        removers = [self._own.add_callback(callback)]
        add = getattr(self._harness, "add_callback", None)
        if callable(add):
            removers.append(add(callback))

        def remove() -> None:
            for remover in removers:
                if callable(remover):
                    remover()

        return remove


async def _outlast_cancellation(task: asyncio.Future[ToolResult]) -> ToolResult:
    """Wait for the port's result although the caller is being cancelled.

    The token has fired, so the port finishes at once; a framework that keeps
    re-delivering the cancellation (anyio's cancel scopes do) is outwaited.
    """
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                return task.result()


def _shared_record(
    remember: RememberOwnedCallback | None, resolve: ResolveOwnedCallback | None
) -> tuple[RememberOwnedCallback, ResolveOwnedCallback]:
    """One ownership record for the ports of a toolset (they share task ids),
    written through to the harness's durable one when it gives one."""
    record: dict[str, OwnedCommand] = {}
    lock = threading.Lock()

    def remember_here(request: ToolRequest, owned: OwnedCommand) -> OwnedCommand:
        stored = remember(request, owned) if remember is not None else None
        # A record that settles races answers with its row (issue 17).
        kept = stored if isinstance(stored, OwnedCommand) else owned
        with lock:
            record[owned.task_id] = kept
        return kept

    def resolve_here(request: ToolRequest, task: str) -> OwnedCommand | None:
        found = resolve(request, task) if resolve is not None else None
        if isinstance(found, OwnedCommand):
            return found
        with lock:
            return record.get(task)

    return remember_here, resolve_here
