"""The port a harness embeds: ``command_tools(...)`` and ``code_tools(...)``.

A port binds one session and one owner to a backend (any interpreter of the
sandbox effects) and the harness's callbacks. ``execute`` / ``execute_sync``
run one request through the pure tool program and return a
:class:`~sandrail.core.ToolResult` for every input: a malformed request, a
callback that raises or an interpreter bug all become results, and so does
an ``asyncio.CancelledError`` a backend raises when nobody cancelled the
call (an SDK's own task cancelled: a backend failure). What passes through:
a :class:`~sandrail.core.FatalInterpreterError` (a replay divergence), the
caller's own cancellation of ``await execute(...)``, and
``KeyboardInterrupt``/``SystemExit`` (the process is being stopped: never
turned into a result).

The parts: the options a port is built with in :mod:`sandrail._options`,
the port's side of one call (its interpreter) in :mod:`sandrail._port_call`,
the values it masks in :mod:`sandrail._masks`, the artifacts a call writes
in :mod:`sandrail._artifact_calls`.

Strategy: the two entry points differ in one line, the driver
(:func:`~sandrail.interpreters._drivers.drive` or its async twin), and in
which backends they can run: whether a backend is asynchronous is decided by
:func:`~sandrail.interpreters._drivers.is_asynchronous` alone, and
``execute_sync`` runs an asynchronous one on a private event loop.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from typing import Any, Literal, Unpack

from sandrail._artifact_calls import ArtifactStore, ArtifactWriter, StreamingArtifactStore
from sandrail._masks import Masks, masks_for
from sandrail._options import (
    AuthorityCallback,
    AuthorizeCallback,
    PortOptions,
    RememberOwnedCallback,
    ResolveOwnedCallback,
    given_options,
    owned_callbacks,
    port_settings,
)
from sandrail._ownership import OwnershipRecord
from sandrail._port_call import Binding, Honour, Ledger, PortCall
from sandrail._telemetry import Telemetry
from sandrail.core import (
    AgentOwner,
    Allow,
    ErrorCode,
    FatalInterpreterError,
    OwnedCommand,
    PortSettings,
    ToolDefinition,
    ToolRequest,
    ToolResult,
    code_tool_definitions,
    command_tool_definitions,
    error_result,
)
from sandrail.interpreters._drivers import drive, drive_async, is_asynchronous

__all__ = [
    "ALLOW",
    "ArtifactStore",
    "ArtifactWriter",
    "AuthorityCallback",
    "AuthorizeCallback",
    "PortOptions",
    "RememberOwnedCallback",
    "ResolveOwnedCallback",
    "StreamingArtifactStore",
    "ToolGroup",
    "ToolPort",
    "build_port",
    "code_tools",
    "command_tools",
]

ALLOW = Allow()
"""The policy decision that lets a call go ahead."""

ToolGroup = Literal["command", "code"]


class ToolPort:
    """Tools bound to one session, one owner and one backend.

    Build it with :func:`command_tools` or :func:`code_tools`. ``masks``:
    what the session masks and showed, shared with other ports (a
    toolset's); by default the session's on this backend object
    (:func:`~sandrail._masks.masks_for`), which every port of the session on
    that backend shares. ``redact`` is added to it.
    """

    def __init__(
        self,
        *,
        settings: PortSettings,
        backend: Callable[[Any], Any],
        authorize: AuthorizeCallback,
        assert_authority: AuthorityCallback,
        resolve_owned_command: ResolveOwnedCallback | None,
        artifacts: ArtifactStore | None,
        redact: frozenset[str] = frozenset(),
        remember_owned_command: RememberOwnedCallback | None = None,
        masks: Masks | None = None,
        answers: OwnershipRecord | None = None,
        telemetry: Telemetry | None = None,
        honour: Honour | None = None,
    ) -> None:
        if masks is None:
            masks = masks_for(backend, settings.session_id)
        masks.learn(redact)
        self._backend = backend
        self._binding = Binding(
            settings=settings,
            backend=backend,
            authorize=authorize,
            assert_authority=assert_authority,
            resolve_owned=resolve_owned_command,
            remember_owned=remember_owned_command,
            artifacts=artifacts,
            ledger=Ledger(),
            masks=masks,
            answers=answers,
            telemetry=telemetry if telemetry is not None else Telemetry(),
            honour=honour,
        )

    @property
    def definitions(self) -> tuple[ToolDefinition, ...]:
        """The tool definitions to offer the model; requests must carry one of these."""
        return self._binding.settings.definitions

    @property
    def settings(self) -> PortSettings:
        """The port's settings: session, owner, budget and the other options it
        was built with."""
        return self._binding.settings

    @property
    def masked_values(self) -> frozenset[str]:
        """The values this port's session masks now (env values it passed,
        ``redact=``): what a :class:`~sandrail.interpreters.replay.Recorder`
        on this port also cuts out of its cassette, and what no digest it
        writes may depend on (C17). Held in memory only."""
        return self._binding.masks.secrets

    def definition(self, name: str) -> ToolDefinition:
        """The definition of tool ``name``; ``KeyError`` if this port has none."""
        found = self._binding.settings.definition(name)
        if found is None:
            raise KeyError(f"this port has no tool named {name!r}")
        return found

    @property
    def owned_commands(self) -> Mapping[str, OwnedCommand]:
        """The default ledger: commands this port launched, by task id (C4)."""
        return self._binding.ledger.snapshot()

    def execute_sync(self, request: ToolRequest) -> ToolResult:
        """Run one call to its result, blocking. Never raises (see module doc).

        With an asynchronous backend (see
        :func:`~sandrail.interpreters._drivers.is_asynchronous`) this runs
        :meth:`execute` on a private event loop; it refuses to do so inside a
        running loop (``e2b_command_sync_contract_invalid``, nothing sent),
        where ``await port.execute(...)`` is the right call.
        """
        if is_asynchronous(self._backend):
            return self._execute_on_own_loop(request)
        call = PortCall(self._binding, request, asynchronous=False)
        try:
            with call:
                call.result = drive(call.program(), call.trace.step(call.interpret))
            return call.finish()
        finally:
            call.abort_artifacts()
            _release_layer(call.finishing)
            call.trace.abandon("no_result")  # nothing when the call ended with one

    async def execute(self, request: ToolRequest) -> ToolResult:
        """Run one call to its result. Never raises (see module doc)."""
        call = PortCall(self._binding, request, asynchronous=True)
        try:
            with call:
                program = call.program()
                call.result = await drive_async(
                    program, call.trace.step_async(call.interpret_async)
                )
            return await call.finish_async()
        finally:
            call.abort_artifacts()
            _release_layer(call.finishing)
            call.trace.abandon("no_result")  # nothing when the call ended with one

    def _execute_on_own_loop(self, request: ToolRequest) -> ToolResult:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.execute(request))
        return error_result(
            ErrorCode.SYNC_CONTRACT_INVALID,
            instruction="execute_sync was called inside an event loop; await execute().",
        )


# ---------------------------------------------------------------------------
# Construction


def command_tools(**options: Unpack[PortOptions]) -> ToolPort:
    """The command tools: ``sandbox_status``, ``run_command``,
    ``read_command_output`` and ``stop_command``. Keyword options (the
    first five required):

    - ``backend``: the interpreter of sandbox effects (``Simulator()``,
      ``E2BBackend(...)``, a ``Replayer``, or a ``Recorder`` around one).
    - ``session_id``: the session every request must name.
    - ``owner``: ``AgentOwner(agent_id=...)`` or ``NativeOwner(scope=...)``.
    - ``authorize(request)``: ``ALLOW``, ``ApprovalRequired(...)`` or
      ``Deny(...)``; may be async (then use ``await port.execute``).
    - ``assert_authority(request)``: ``True`` while the caller holds its
      lease; synchronous and fast, asked before and after every step.
    - ``max_output_bytes``: every result's byte budget (C12); default
      24,000, at least 256.
    - ``artifacts``: optional store for results cut to fit the budget.
    - ``resolve_owned_command(request, task_id)``: optional durable ownership
      lookup; by default the port's own ledger of what it launched.
    - ``remember_owned_command(request, owned)``: optional; called with each
      ownership record the port makes (before a start is sent, with
      ``launched=True``), for the harness to keep durably and answer from
      ``resolve_owned_command`` after a restart, or to share between the
      command and code ports of one session. With both, a retry after a
      restart expects the claim its first start may have made, so even a
      sandbox whose ledger was deleted never launches it twice (C2).
    - ``foreground_timeout_seconds``, ``background_timeout_seconds``: the
      default (and, in the foreground, the longest) in-sandbox deadline of
      a command; default 300, at most 86,400.
    - ``allow_internet_access``: whether a sandbox this port creates may
      reach the internet, as ``sandbox_status`` reports it. A backend that
      creates sandboxes states its own (``E2BBackend(allow_internet_access=...)``):
      the port reports that one, and refuses a different value here
      (``ValueError``); for any other backend, default ``False``.
    - ``record``: a durable ownership record (``sandrail.records.SQLiteRecord``
      or ``PostgresRecord``) in place of the two callbacks: the port
      remembers and resolves through it, and notes each task's last answer
      there for operators (``sandrail uncertain``). A record (or
      ``remember_owned_command``) that cannot be written means the start
      never leaves (``error``, ``executed: false``); one that cannot be read
      means ``uncertain``, never a launch.
    - ``tracer_provider`` / ``meter_provider``: where the call's span and the
      ``gen_ai.execute_tool.duration`` histogram go (OpenTelemetry; default:
      the global providers, if opentelemetry-api is installed; giving one
      without it raises ``ImportError`` with the install hint).
    - ``redact``: values to mask in all output from the start (C17), e.g.
      the env values a restarted harness passed to this session's commands
      before its restart. The port also masks every env value it passes
      itself, and so does every port on the same backend object and
      session, for as long as that backend lives (a port per request
      forgets nothing). Values must be at least
      ``MIN_REDACTED_LENGTH`` (8) characters: a shorter one would mask
      ordinary text.

    Raises ``TypeError`` or ``ValueError`` at once for a port that could not
    work (an unknown or missing option, a callback that is not callable, a
    budget below 256 bytes, a timeout out of range, a backend whose
    ``backend_label`` or ``sandbox_description`` is not one results and tool
    descriptions can carry, see ``docs/reference/toolset.md``); after construction,
    ``execute`` never raises.
    """
    return build_port("command", given_options(options, "command_tools"))


def code_tools(**options: Unpack[PortOptions]) -> ToolPort:
    """The snippet tool: ``run_code`` for a native owner, ``sandbox_run_code``
    for an agent owner. Same options and rules as :func:`command_tools`."""
    return build_port("code", given_options(options, "code_tools"))


def build_port(
    group: ToolGroup,
    options: PortOptions,
    *,
    masks: Masks | None = None,
    answers: OwnershipRecord | None = None,
    port_type: Callable[..., ToolPort] = ToolPort,
    honour: Honour | None = None,
) -> ToolPort:
    """A port of tool ``group`` with ``options`` (defaults filled in, see
    :func:`~sandrail._options.given_options`), checked as
    :func:`command_tools` says. For the package's own builders: a toolset
    passes the ``masks`` its ports share and the record its ports note
    answers in (``answers``: it turned ``record=`` into the callbacks it
    shares) and what ``honour``-s a person's approval, the testing kit its own
    ``port_type`` (called with :class:`ToolPort`'s keywords)."""
    if group == "command":
        settings, secrets = port_settings(
            options, "sandrail.command-tools/v1", _command_definitions
        )
    else:
        agent = isinstance(options["owner"], AgentOwner)
        settings, secrets = port_settings(
            options,
            "sandrail.code-tools/v1",
            lambda foreground, sandbox: _code_definitions(foreground, agent, sandbox),
        )
    remember, resolve = owned_callbacks(options)
    record = options["record"]
    return port_type(
        settings=settings,
        backend=options["backend"],
        authorize=options["authorize"],
        assert_authority=options["assert_authority"],
        resolve_owned_command=resolve,
        remember_owned_command=remember,
        artifacts=options["artifacts"],
        redact=secrets,
        masks=masks,
        answers=record if record is not None else answers,
        telemetry=Telemetry(options["tracer_provider"], options["meter_provider"]),
        honour=honour,
    )


# Ports with the same settings share their definition objects (they are
# immutable): anything keyed by a definition then finds it by identity,
# instead of comparing whole schemas on every call.


@functools.lru_cache(maxsize=256)
def _command_definitions(
    foreground_timeout_seconds: int, sandbox: str
) -> tuple[ToolDefinition, ...]:
    return command_tool_definitions(foreground_timeout_seconds, sandbox=sandbox)


@functools.lru_cache(maxsize=256)
def _code_definitions(
    foreground_timeout_seconds: int, agent_owner: bool, sandbox: str
) -> tuple[ToolDefinition, ...]:
    return code_tool_definitions(
        foreground_timeout_seconds, agent_owner=agent_owner, sandbox=sandbox
    )


def _release_layer(layer: object) -> None:
    """Tell a recording layer its call is over even when it ended without a
    result (a fatal error, an interrupt): a recorder counts the call as
    running until then, and refuses to close under it."""
    try:
        close = getattr(layer, "close", None)
        if callable(close):
            close()
    except FatalInterpreterError:
        raise
    except Exception:
        pass  # the call is over whatever the layer makes of it
