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
the locator. Repeats match across runs: a model following an uncertain
result's instruction may repeat the call on a later run or turn (a new
pydantic-ai run id, a new ``Runner.run``, a new Anthropic ``run_id``), and
that repeat is still the first call's (only a call whose key is not of the
form ``f"{run}:{call_id}"``, and that passes no ``run_id=``, matches no
other). So while an earlier identical call is unsettled, a later run's
identical call reconciles it rather than launching anew. Arguments match
as the port reads them (a ``timeout`` of ``null`` is the default it stands
for). Once a result of
the earlier call's own task (``ok``, or an ``error`` naming its
``task_id``) was returned for that key, the next identical call is a new
call and runs anew, and so is one after a person rejected the earlier call
while nothing ran under its key (:meth:`Toolset.rejection`: a new call and a
new question, never answered with that rejection; a rejection after an
approval, which may have run, leaves it unsettled); any other refusal that
ran nothing (a budget too small for the repeat's identity, say) leaves it
unsettled. Which key a repeat runs under is the core's rule
(:func:`~sandrail.core.repeat_key`). Two identical calls in flight
at once are two calls, and so are two identical calls of one model turn
(``turn=``: the model made both at once, before it could read either
result), whatever order they run in: each keeps its own key, so a person's
approval of one and rejection of the other are two decisions. Of several
identical unsettled calls, a repeat takes the newest that no call of its
own turn has taken yet: two uncertain calls repeated, in one message or
two turns, are reconciled one each, never a third launch. A repeat asked
about or run again (a framework re-running its tool call) runs under the
key it ran under before, even once that earlier call was settled. The record
lives in this object (the most recent 1024 unsettled calls): a new process
starts empty.

The parts of a toolset have modules of their own, the bases of
:class:`Toolset`: what every entry point does before a call runs and what
the ownership record knows of launches is :mod:`sandrail._toolset_requests`;
what it answers a framework's human in the loop is
:mod:`sandrail._toolset_approvals`. This module holds the object itself: its
construction, what it offers the model, and how a call runs and waits.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Unpack

from sandrail._approval import Approvals
from sandrail._decisions import Decisions
from sandrail._launched import shared_record
from sandrail._masks import masks_for
from sandrail._options import (
    AuthorityCallback,
    AuthorizeCallback,
    Defaulted,
    PortOptions,
    check_owner,
    given_options,
    owned_callbacks,
)
from sandrail._port import ToolGroup, ToolPort, build_port
from sandrail._repeats import of_its_task
from sandrail._toolset_approvals import ToolsetApprovals
from sandrail._toolset_backend import attachable_recorder, label_of, sandbox_description_of
from sandrail._toolset_requests import (
    _UNSETTLED_OF_A_CALL,
    MAX_CALL_TIMEOUT_SECONDS,
    IdentitySource,
    _Prepared,
    _Repeat,
    _Unsettled,
    check_timeout,
)
from sandrail.core import (
    DEFAULT_MAX_OUTPUT_BYTES,
    AgentIdentity,
    AgentOwner,
    ErrorCode,
    NativeIdentity,
    Owner,
    Profile,
    Redactions,
    ToolDefinition,
    ToolRequest,
    ToolResult,
    bound_result,
    canonical_json,
    error_result,
    mask_text,
    minimum_output_bytes,
    one_call,
    tool_schema,
)
from sandrail.interpreters._drivers import is_asynchronous

__all__ = ["MAX_CALL_TIMEOUT_SECONDS", "Toolset", "check_timeout", "refusal"]


_ABANDONED_KEPT: Final = 1024
_UNSETTLED_KEPT: Final = 1024
_SETTLED: Final = frozenset({"ok", "error"})


def refusal(code: ErrorCode, instruction: str, max_output_bytes: int) -> ToolResult:
    """An ``error`` result (nothing ran) with ``instruction``, within the budget."""
    return bound_result(error_result(code, instruction=instruction), max_output_bytes)


class Toolset(ToolsetApprovals):
    """Every sandrail tool for one session and owner, behind one call.

    - ``backend``, ``session_id``, ``owner``, ``authorize``,
      ``assert_authority`` (required) and the optional settings
      (``**options``: ``max_output_bytes``, ``record``, ``redact``,
      ``artifacts``, the timeouts, ``tracer_provider``, ...) are those of
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
    reaches them only through a durable record: ``record=`` (a
    :mod:`sandrail.records` store; see the how-to "Durable ownership records
    and a fleet of workers", ``docs/howto/records-and-fleet.md``), or the
    ``remember_owned_command`` and ``resolve_owned_command`` pair.
    ``redact`` are values to mask from the start (a restarted harness's env
    values). ``tracer_provider`` and
    ``meter_provider``: see :func:`~sandrail.command_tools`.

    Raises ``TypeError`` or ``ValueError`` at once for a toolset that could
    not work, a ``max_output_bytes`` too small for the full identity of its
    tools' results included (the message names the minimum); after
    construction :meth:`call` never raises but for cancellation (see the
    module doc).
    """

    _port_type: Callable[..., ToolPort] = ToolPort
    """What builds the ports (:func:`~sandrail._port.build_port`'s
    ``port_type``): the testing kit's world builds ports it watches."""

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
        **options: Unpack[Defaulted],
    ) -> None:
        required: PortOptions = {
            "backend": backend,
            "session_id": session_id,
            "owner": owner,
            "authorize": authorize,
            "assert_authority": assert_authority,
        }
        given = given_options({**required, **options}, "Toolset", ("identity", "tools", "run_id"))
        groups = tuple(tools)
        if not groups or any(group not in ("command", "code") for group in groups):
            raise ValueError('tools must name "command", "code" or both')
        recorder = attachable_recorder(given["backend"], groups)
        check_owner(owner)  # before the identity it implies: say what owner takes
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
        self._backend_label = label_of(given["backend"])  # refuses a label results cannot carry
        self._sandbox_description = sandbox_description_of(given["backend"])
        self._run_id = run_id if run_id is not None else uuid.uuid4().hex
        self._max_output_bytes = max_output_bytes = given["max_output_bytes"]
        self._ports: dict[str, ToolPort] = {}
        self._abandoned: OrderedDict[str, ToolResult] = OrderedDict()
        # The ports share one record, as they share the callbacks (record=
        # stands for its pair of them).
        remember, resolve = shared_record(*owned_callbacks(given))
        self._resolve = resolve
        self._owner = given["owner"]
        # What a person was asked about and decided, in the same record.
        self._decisions = Decisions(
            remember,
            resolve,
            given["session_id"],
            given["owner"],
            lambda: self._masks.secrets,  # set below, before any call
        )
        self._approvals = Approvals(given["authorize"], self._launched_alike, self._decisions)
        redact = given["redact"]
        shared: PortOptions = {
            **given,
            "authorize": given["authorize"],
            "record": None,
            "resolve_owned_command": resolve,
            "remember_owned_command": remember,
            "redact": tuple(redact) if not isinstance(redact, str) else redact,
        }
        # One memory of values to mask for all the toolset's ports (C17):
        # the session's on its backend, which other ports of it share too.
        self._masks = masks_for(given["backend"], given["session_id"])
        for group in dict.fromkeys(groups):
            port = build_port(
                group,
                shared,
                masks=self._masks,
                answers=given["record"],
                port_type=self._port_type,
                honour=self._approvals.honoured,
            )
            for definition in port.definitions:
                self._ports[definition.name] = port
        self._session_id = given["session_id"]
        self._asynchronous = is_asynchronous(given["backend"])
        self._unsettled: OrderedDict[_Repeat, list[_Unsettled]] = OrderedDict()
        self._ran_as: OrderedDict[tuple[_Repeat, str], _Unsettled] = OrderedDict()
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
    def masked_values(self) -> frozenset[str]:
        """The values the toolset's session masks now (env values it passed,
        ``redact=``): what an adapter must keep out of anything it derives
        and shows, such as an MCP fallback key (C17). In memory only."""
        return self._masks.secrets

    @property
    def names(self) -> tuple[str, ...]:
        """The tool names, in a stable order."""
        return tuple(self._ports)

    @property
    def session_id(self) -> str:
        """The session every tool of this toolset belongs to."""
        return self._session_id

    @property
    def backend_label(self) -> str | None:
        """What the backend says it is (``"e2b"``, ``"simulator"``; ``None``
        for a backend that does not say): what a harness tells its users the
        tools run on. Every result names it too (``"backend"``). Checked when
        the toolset is made: a label that is not 1 to
        :data:`~sandrail.core.MAX_BACKEND_LABEL_CHARS` characters of ``a-z``,
        ``0-9`` and ``-`` (beginning with a letter), the longest results are
        sized for, is refused with a ``TypeError`` or ``ValueError``."""
        return self._backend_label

    @property
    def sandbox_description(self) -> str:
        """Where the tools' commands run, in the backend's words (its
        ``sandbox_description``; ``"the sandbox its harness provides"`` for a
        backend that states none): what every tool description ends with,
        and what a harness can tell its users too."""
        return self._sandbox_description

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

    def one_call(
        self, name: str, arguments: object, profile: Profile = "full"
    ) -> dict[str, Any] | None:
        """Tool ``name``'s ``arguments`` (in ``profile``'s shape) as one call
        to this toolset: the core's :func:`~sandrail.core.one_call` of them in
        the port's form, the same JSON for two calls exactly when they are
        one (what an exact repeat is matched by, here with
        ``reconcile_repeats`` and by the MCP adapter's fallback keys).
        ``None`` when the call would run nothing: no such tool, or arguments
        the toolset refuses before the port sees them (not an object, a
        strict profile's its schema refuses)."""
        port = self._ports.get(name) if isinstance(name, str) else None
        if port is None:
            return None
        converted = self._converted(port.definition(name), profile, arguments)
        if isinstance(converted, ToolResult):
            return None
        return one_call(name, converted, port.settings)

    def masked(self, text: str) -> str:
        """``text`` with every value this toolset's session masks in results
        (C17) replaced by ``<redacted>``: the env values its calls passed so
        far and the ``redact=`` values, as given and as JSON text escapes
        them. What a person is shown about a call (an adapter's approval
        question) goes through it, so a value the session masks is no
        clearer there than in a result. Never raises (a ``text`` that is not
        a ``str`` comes back as it is)."""
        secrets = self._masks.secrets
        if not secrets or not isinstance(text, str):
            return text
        escaped = set()
        for value in secrets:
            try:
                escaped.add(canonical_json(value).decode("utf-8")[1:-1])
            except Exception:
                continue
        return mask_text(text, Redactions(secrets | escaped))

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
        approved: bool = False,
        edited: bool = False,
        turn: str | None = None,
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
        before ``:{call_id}``; a key of another form matches no other call);
        ``turn`` names the model turn (the model message) that made the
        call, when the framework knows it: a call never repeats an earlier
        call of the same turn (the model made both at once, before it could
        read either result), so two identical calls of one message are two
        calls, each with its own key, question and decision.
        ``approved=True`` answers the question this toolset asked a person
        about this very call (a result ``approval_required``, or
        :meth:`ask_policy` answering ``ApprovalRequired``): a policy answer
        of ``ApprovalRequired`` for it is then taken as ``ALLOW``; ``Deny``
        stays final, and the call runs under its own operation key, so a
        replayed approval launches at most once (C2). The approval covers
        the call asked about and nothing else: another tool or other
        arguments under its key are refused (``approval_mismatch``), a call
        a person rejected first stays rejected (``approval_rejected``), and
        a call nobody asked about under its key here (another process
        without the same durable ``record=``) is asked about again; nothing
        runs in any of them (``docs/howto/approval.md``). ``edited=True``
        (with ``approved``): the person wrote these arguments when approving
        (an edit of the call asked about), so the approval covers them as
        they are, and is the decision that stands for the key.

        A key stays bound to the first call asked about under it: when the
        policy asks for a person about another tool or other arguments under
        an asked key (a saved run edited before the answer, and the step
        re-run on resume), nobody is asked; the result is
        ``approval_mismatch`` (``approval_rejected`` where a person rejected
        the key first), and nothing runs.
        """
        admitted = self._admitted(
            (name, arguments, call_id, operation_key, profile, cancel, timeout_seconds),
            (reconcile_repeats, run_id, approved, edited, turn),
        )
        if isinstance(admitted, ToolResult):
            return admitted
        prepared, approved = admitted
        with self._approvals.approved(prepared.request, approved):
            return await self._call(prepared, operation_key)

    def _admitted(
        self,
        call: tuple[str, object, str, str, Profile, object | None, float | None],
        settings: tuple[bool, str | None, bool, bool, str | None],
    ) -> ToolResult | tuple[_Prepared, bool]:
        """What both entry points do before the call runs (their arguments,
        as given): the prepared request and whether it runs as approved, or
        the result that answers it with nothing run."""
        reconcile_repeats, run_id, approved, edited, turn = settings
        prepared = self._prepare(*call, reconcile_repeats, run_id, turn)
        if isinstance(prepared, ToolResult):
            return prepared
        refused, approved = self._approval_of(prepared, approved, edited)
        return refused if refused is not None else (prepared, approved)

    async def _call(self, prepared: _Prepared, operation_key: str) -> ToolResult:
        task = asyncio.ensure_future(prepared.port.execute(prepared.request))
        try:
            result = await _by_deadline(task, prepared)
        except asyncio.CancelledError:
            prepared.token.cancel()
            result = await _outlast_cancellation(task)
            # Under the key the caller knows (a repeat may have run under an
            # earlier call's: the content names that one).
            self._abandon(operation_key, result)
            self._record(
                prepared.repeat, prepared.request, result, returned=False, turn=prepared.turn
            )
            raise
        return self._finished(prepared, result)

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
        approved: bool = False,
        edited: bool = False,
        turn: str | None = None,
    ) -> ToolResult:
        """:meth:`call` for code without an event loop; never raises but for
        the same harness bugs. With an asynchronous backend (one that declares
        ``asynchronous = True``, or an ``async`` function) it runs the call on
        a private event loop; inside a running loop it refuses
        (``e2b_command_sync_contract_invalid``, nothing ran): await
        :meth:`call` there. With a synchronous backend the deadline is seen
        at the port's next check (a blocking backend call is not interrupted).
        """
        admitted = self._admitted(
            (name, arguments, call_id, operation_key, profile, cancel, timeout_seconds),
            (reconcile_repeats, run_id, approved, edited, turn),
        )
        if isinstance(admitted, ToolResult):
            return admitted
        prepared, approved = admitted
        with self._approvals.approved(prepared.request, approved):
            return self._call_sync(prepared)

    def _call_sync(self, prepared: _Prepared) -> ToolResult:
        if not self._asynchronous:
            result = _blocking(prepared)
        elif _loop_running():
            return refusal(
                ErrorCode.SYNC_CONTRACT_INVALID,
                "call_sync was called inside a running event loop with an asynchronous "
                "backend; nothing ran. Await toolset.call(...) there.",
                self._max_output_bytes,
            )
        else:
            result = asyncio.run(_on_own_loop(prepared))
        return self._finished(prepared, result)

    def _finished(self, prepared: _Prepared, result: ToolResult) -> ToolResult:
        """What both entry points do with a call's result: answer a refusal
        of a launched key for its launch, keep the question a person is now
        asked (or answer the one that stands under its key instead), and
        keep the call as unsettled or settled."""
        result = self._after_launch(prepared.request, result)
        if result.needs_approval:
            result = self._asked(prepared.request, result)
        self._record(prepared.repeat, prepared.request, result, returned=True, turn=prepared.turn)
        return result

    def _abandon(self, operation_key: str, result: ToolResult) -> None:
        """Keep the result of a call whose caller cancelled the await."""
        with self._lock:
            self._abandoned[operation_key] = result
            self._abandoned.move_to_end(operation_key)
            while len(self._abandoned) > _ABANDONED_KEPT:
                self._abandoned.popitem(last=False)

    def _record(
        self,
        repeat: _Repeat | None,
        request: ToolRequest,
        result: ToolResult,
        *,
        returned: bool,
        turn: str | None = None,
    ) -> None:
        """Keep or drop the call as unsettled (see the module doc), with
        the model ``turn`` that made it."""
        if repeat is None:
            return
        key = request.operation_key
        with self._lock:
            held = self._unsettled.get(repeat, [])
            mine = [call for call in held if call.key == key]
            if returned and result.status in _SETTLED:
                if mine and of_its_task(result):
                    held.remove(mine[0])
                    if not held:
                        del self._unsettled[repeat]
                return
            if not mine:
                held.append(_Unsettled(key, request.call.arguments, turn, {}))
                del held[:-_UNSETTLED_OF_A_CALL]
            self._unsettled[repeat] = held
            self._unsettled.move_to_end(repeat)
            while len(self._unsettled) > _UNSETTLED_KEPT:
                self._unsettled.popitem(last=False)


# Strategy: the two entry points share everything but how they wait. An
# awaited call waits on the event loop and outlasts its caller's
# cancellation (the module doc); a blocking call waits in the port, on a
# private loop for an asynchronous backend (as :meth:`ToolPort.execute_sync`
# would) or with a timer thread that fires the abort for a synchronous one.


async def _by_deadline(task: asyncio.Future[ToolResult], prepared: _Prepared) -> ToolResult:
    """The call's result; at its deadline it is aborted first (the port
    finishes at once: its waits wake on abort, C11)."""
    if prepared.deadline is not None:
        await asyncio.wait({task}, timeout=prepared.deadline)
        if not task.done():
            prepared.token.cancel()
    return await asyncio.shield(task)


async def _on_own_loop(prepared: _Prepared) -> ToolResult:
    return await _by_deadline(
        asyncio.ensure_future(prepared.port.execute(prepared.request)), prepared
    )


def _blocking(prepared: _Prepared) -> ToolResult:
    """Run a call on a synchronous backend; the deadline is seen at the
    port's next check (a blocking backend call is not interrupted)."""
    deadline = prepared.deadline
    timer = None if deadline is None else threading.Timer(deadline, prepared.token.cancel)
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        return prepared.port.execute_sync(prepared.request)
    finally:
        if timer is not None:
            timer.cancel()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


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
