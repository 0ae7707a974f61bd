"""What every sandrail adapter is built on, so that an adapter is glue.

An adapter does three things: it lists a :class:`~sandrail.Toolset`'s tools
in its framework's terms, hands each tool call the framework gives it to the
toolset, and sends the model exactly ``result.to_json()``. Everything else
an adapter must get right is here, in public names, the same for every
framework (the four sandrail ships and those written elsewhere)::

    from sandrail.adapters.kit import Adapter, ModelCall

    adapter = Adapter(toolset, framework="my-framework", profile="openai-strict",
                      timeout_seconds=timeout_seconds)   # ValueError for bad settings

    async def on_tool_call(name, arguments_json, run_id, call_id):
        call = adapter.call_of(name, arguments_json, call_id=call_id, run_id=run_id)
        if not isinstance(call, ModelCall):      # a refusal: nothing ran
            return call.to_json()
        result = await adapter.run(call)
        if result.needs_approval:                # a person must decide first
            ...                                  # the framework's human-in-the-loop
        return result.to_json()                  # what the model reads

- **The operation key** (:meth:`Adapter.call_of`): ``f"{run_id}:{call_id}"``
  from what the framework keeps stable for the call (its run or thread, and
  the model's tool-call id). A framework that gives no such value, or a
  blank one, gets a refusal (``e2b_command_operation_key_required``, naming
  what was missing), never a made-up key: a shared stand-in would make the
  calls of different runs one call, a fresh one would let a retry launch
  twice. :func:`run_id_of` joins several identity parts (a thread and a
  checkpoint namespace) into one run id without ambiguity;
  :func:`check_run_id` checks a run id the harness configures.
- **The arguments** (:meth:`Adapter.call_of`): a model's JSON text is parsed
  here (``NaN`` and ``Infinity`` are not JSON), a mapping is copied as plain
  data (a framework's object may raise when read), and whatever is not a
  JSON object is refused within the budget, naming the field, never quoted
  whole and never a traceback.
- **Repeats and timeouts** (:meth:`Adapter.run`): every call runs with
  ``reconcile_repeats`` under its run (a model's retry of an unsettled call
  reconciles it instead of launching again) and with the adapter's
  ``timeout_seconds`` as its deadline, after which the model reads the
  ``canceled`` or ``uncertain`` result, never "timed out". Validate a
  timeout early with :func:`check_timeout`.
- **Approval** (the round trip of ``docs/howto/approval.md``): when the
  harness's policy answers ``ApprovalRequired``, :meth:`Adapter.run`
  returns the ``approval_required`` result and nothing runs; the adapter
  hands the question to its framework's human-in-the-loop (showing the
  call with :func:`shown_arguments`, env values masked), and once a person
  decided, runs the same :class:`ModelCall` with ``approved=True`` or
  answers it with :meth:`Adapter.reject`. :meth:`Adapter.asks_a_person`
  asks the policy first without running anything, for frameworks that
  decide before the call (a ``needs_approval`` hook).
- **Refusals** (:meth:`Adapter.refusal`): an ``error`` result (nothing ran)
  for what the adapter itself refuses, within the budget.
- **The framework's import** (:func:`require`): imported when used, or an
  ``ImportError`` naming the extra to install.

None of these raises for anything a model sends; they raise ``TypeError``
or ``ValueError`` only for the harness's own settings, when they are given.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final, TypedDict

import attrs

from sandrail._approval import asks_a_person as _asks_a_person
from sandrail._toolset import Toolset
from sandrail._toolset import check_timeout as _check_timeout
from sandrail._toolset import refusal as _refusal
from sandrail.adapters import require
from sandrail.core import (
    PROFILES,
    ArgumentProblem,
    CanonicalJSONError,
    ErrorCode,
    Profile,
    Redactions,
    ToolResult,
    arguments_rejection,
    canonical_json,
    mask_text,
    redaction_secrets,
)

__all__ = [
    "Adapter",
    "ModelCall",
    "Profile",
    "check_run_id",
    "check_timeout",
    "parsed_arguments",
    "require",
    "run_id_of",
    "shown_arguments",
]

_SHOWN_CHARACTERS: Final = 1_500
_MASK: Final = "<redacted>"


def check_timeout(timeout_seconds: object) -> float | None:
    """``timeout_seconds`` as a float, or ``None`` for ``None``. Raises
    ``ValueError`` unless it is a positive number of at most
    :data:`~sandrail.MAX_CALL_TIMEOUT_SECONDS` (a year)."""
    return _check_timeout(timeout_seconds)


def check_run_id(run_id: object, *, name: str = "run_id") -> str | None:
    """A run id the harness configures (``run_id=`` of an adapter), as a
    plain ``str``, or ``None`` for ``None``. Raises ``TypeError`` for a
    value that is not a string and ``ValueError`` for a blank one (a key of
    nothing would make different calls one); ``name`` is the setting the
    message names."""
    if run_id is None:
        return None
    if not isinstance(run_id, str):
        raise TypeError(f"{name} must be a non-blank string, got {type(run_id).__name__}")
    plain = str.__str__(run_id)
    if not plain.strip():
        raise ValueError(f"{name} must be a non-blank string")
    return plain


def run_id_of(*parts: object) -> str | None:
    """One run id from several parts of a framework's stable identity (a
    thread id and a checkpoint namespace, an invocation id and an agent
    name), or ``None`` when a part is not a non-blank string (the call then
    has no safe key: pass ``None`` on to :meth:`Adapter.call_of`, which
    refuses it).

    The parts are joined by ``:``, each with ``%`` and ``:`` percent-escaped,
    so different parts never give the same run id (``("a:b", "c")`` and
    ``("a", "b:c")`` differ) and a part without either character is kept as
    it is: ``run_id_of("thread-1")`` is ``"thread-1"``."""
    plain: list[str] = []
    for part in parts:
        if not isinstance(part, str) or not str.__str__(part).strip():
            return None
        plain.append(urllib.parse.quote(str.__str__(part), safe=_SAFE))
    return ":".join(plain) if plain else None


# Every printable ASCII character but `%` and `:` (and space, kept as is).
_SAFE: Final = "".join(chr(c) for c in range(32, 127) if chr(c) not in "%:")


def shown_arguments(arguments: object, *, toolset: Toolset | None = None) -> str:
    """What a person deciding about a call is shown of its arguments: their
    canonical JSON with every env value replaced by ``<redacted>``, wherever
    it appears (an env value written into the command or ``cwd`` too, C17),
    and, given the ``toolset`` the call runs on, every value its session
    masks in results (an env value an earlier call passed, a ``redact=``
    value: :meth:`~sandrail.Toolset.masked`), cut to about 1,500 characters
    (the middle elided). Takes the arguments in any profile's shape (``env``
    as a mapping or as ``{name, value}`` entries); never raises."""
    if not isinstance(arguments, Mapping):
        return "(arguments that are not an object)"
    try:
        masked = dict(arguments)
    except Exception:
        return "(arguments that cannot be shown)"
    env = masked.get("env")
    if isinstance(env, Mapping):
        masked["env"] = dict.fromkeys(env, _MASK)
    elif isinstance(env, list):  # a strict profile's {name, value} entries
        masked["env"] = [
            {"name": entry.get("name"), "value": _MASK} if isinstance(entry, Mapping) else _MASK
            for entry in env
        ]
    try:
        text = canonical_json(masked).decode("utf-8")
    except (CanonicalJSONError, TypeError, ValueError, RecursionError):
        return "(arguments that cannot be shown)"
    secrets = _env_values(env)
    if secrets:
        # Masked in the JSON text, escaped as JSON writes it, and as given.
        escaped = {canonical_json(value).decode("utf-8")[1:-1] for value in secrets}
        text = mask_text(text, Redactions(secrets | escaped))
    if toolset is not None:
        text = toolset.masked(text)
    if len(text) > _SHOWN_CHARACTERS:
        half = _SHOWN_CHARACTERS // 2
        text = f"{text[:half]} […{len(text) - 2 * half} characters…] {text[-half:]}"
    return text


def _env_values(env: object) -> frozenset[str]:
    """The values of an ``env`` argument (a mapping, or a strict profile's
    ``{name, value}`` list) that results mask (C17)."""
    if isinstance(env, list):
        env = {
            str(index): entry.get("value")
            for index, entry in enumerate(env)
            if isinstance(entry, Mapping)
        }
    try:
        return redaction_secrets(env)
    except Exception:
        return frozenset()


@attrs.frozen(kw_only=True)
class ModelCall:
    """One tool call a model made, ready for the toolset: what
    :meth:`Adapter.call_of` builds, and what :meth:`Adapter.run`,
    :meth:`Adapter.reject` and :meth:`Adapter.asks_a_person` take. Every
    field is plain data; a framework that saves state between an approval
    question and its answer saves its own call (its id, name and
    arguments), from which the same ``ModelCall`` is built again."""

    name: str
    """The tool's name as the model wrote it (an unknown one is refused
    when the call runs: ``e2b_command_tool_unbound``)."""
    arguments: object
    """The arguments, parsed, in the adapter's profile's shape."""
    call_id: str
    """The model's id for the tool call."""
    run_id: str | None
    """The run the call belongs to: what its framework keeps stable across
    a retry, a resume and a restart. ``None`` for a key the client sent
    itself (MCP's ``_meta``): a retry is then the client's to make under
    the same key, and repeats are not matched to earlier calls."""
    operation_key: str
    """The call's retry identity (C2): ``f"{run_id}:{call_id}"``, or the
    key the client sent."""
    turn: str | None = None
    """The model turn (the model message) that made the call, where the
    framework names it: two identical calls of one turn are two calls, never
    one a repeat of the other (see :class:`~sandrail.Toolset`). ``None``:
    not known."""


class Adapter:
    """A framework adapter's link to one :class:`~sandrail.Toolset`: the
    settings every call of the adapter shares, and the steps of a call.

    ``framework`` names the framework in refusals ("pydantic-ai gave this
    tool call no tool_call_id"). ``profile`` is the schema profile the tools
    are listed in, and the shape the model's arguments come back in.
    ``timeout_seconds`` is each call's deadline (see the module doc). Raises
    ``TypeError`` when ``toolset`` is not a :class:`~sandrail.Toolset` and
    ``ValueError`` for an unknown ``profile`` or a ``timeout_seconds`` that
    is not a positive number of at most
    :data:`~sandrail.MAX_CALL_TIMEOUT_SECONDS`."""

    def __init__(
        self,
        toolset: Toolset,
        *,
        framework: str,
        profile: Profile = "full",
        timeout_seconds: float | None = None,
    ) -> None:
        if not isinstance(toolset, Toolset):
            raise TypeError(f"an adapter takes a sandrail.Toolset, got {type(toolset).__name__}")
        if not isinstance(profile, str) or profile not in PROFILES:
            raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
        self._toolset = toolset
        self._framework = framework
        self._profile: Profile = profile
        self._timeout_seconds = check_timeout(timeout_seconds)

    @property
    def toolset(self) -> Toolset:
        """The toolset every call runs on."""
        return self._toolset

    @property
    def profile(self) -> Profile:
        """The schema profile of the tools and of the arguments."""
        return self._profile

    @property
    def timeout_seconds(self) -> float | None:
        """Each call's deadline, in seconds (``None``: none)."""
        return self._timeout_seconds

    def schemas(self) -> dict[str, dict[str, Any]]:
        """Every tool's parameters schema in :attr:`profile`, by name in the
        toolset's order: fresh plain dicts to hand the framework (with
        ``toolset.definition(name)`` for the description and annotations)."""
        return {name: self._toolset.schema(name, self._profile) for name in self._toolset.names}

    def call_of(
        self,
        name: object,
        arguments: object,
        *,
        call_id: object,
        run_id: object = None,
        operation_key: object = None,
        turn: object = None,
    ) -> ModelCall | ToolResult:
        """The :class:`ModelCall` for one tool call of the framework, or the
        refusal the model reads instead (nothing ran):

        - the key: from ``run_id`` and ``call_id`` (see :class:`ModelCall`),
          which must be non-blank strings; or, for a framework whose client
          sends its own key (MCP), ``operation_key`` as given, with
          ``call_id``. Else ``e2b_command_operation_key_required``, naming
          what the framework did not give;
        - ``arguments``: JSON text (``str``, ``bytes``) is parsed, and text
          that is not JSON is refused (``arguments: must be a JSON object``);
          a mapping is copied as plain data, and one that raises when read
          is refused; anything else is passed on, and refused when it runs
          if it is not an object.
        - ``turn``: the model turn that made the call (the id of the model
          message, see :attr:`ModelCall.turn`), kept when it is a non-blank
          string, else not known.

        Every value is read as plain data (a ``str`` subclass's own methods
        are never called); never raises."""
        call = _plain_text(call_id)
        run = _plain_text(run_id)
        key = _plain_text(operation_key)
        given = (("operation key", key),) if operation_key is not None else (("run id", run),)
        missing = [
            what
            for what, value in (*given, ("tool call id", call))
            if value is None or not value.strip()
        ]
        if missing:
            return self.refusal(
                ErrorCode.OPERATION_KEY_REQUIRED,
                f"No safe operation key for this call ({self._framework} gave it no "
                f"{' and no '.join(missing)}); nothing ran.",
            )
        assert call is not None
        parsed = _parsed(arguments)
        if isinstance(parsed, ArgumentProblem):
            return self.arguments_refusal(parsed.path, parsed.reason)
        if key is None:  # the key of the documented rule, run and call
            assert run is not None
            key = self._toolset.operation_key(call, run_id=run)
        else:  # the client's own key: its retry is its own to make
            run = None
        return ModelCall(
            name=_plain_text(name) or "",
            arguments=parsed,
            call_id=call,
            run_id=run,
            operation_key=key,
            turn=_turn(turn) if run is not None else None,
        )

    async def run(
        self,
        call: ModelCall,
        *,
        approved: bool = False,
        edited: bool = False,
        cancel: object | None = None,
    ) -> ToolResult:
        """Run ``call`` on the toolset and return its result (send the model
        ``result.to_json()``). ``cancel``: the harness's abort signal, if
        any. Never raises but for the caller's own cancellation (the result
        is then in ``toolset.abandoned``).

        ``approved=True``: a person approved the call the toolset asked them
        about under this key. The approval is bound to that call (see
        :meth:`~sandrail.Toolset.call`): a call with another tool or other
        arguments under its key is refused (``approval_mismatch``), one a
        person rejected first stays rejected, and one nobody was asked
        about here (another process without the same durable record) is
        asked about again: the result is ``approval_required`` once more, so
        hand it to the framework's human-in-the-loop as the first time.
        Nothing runs in any of them. ``edited=True`` (with ``approved``):
        the arguments are the person's own, written when approving (an
        edit of the call asked about), and the approval covers them.

        A key stays bound to the first call asked about under it: a later
        run of another call under it (the framework's saved state edited
        before the answer) answers ``approval_mismatch`` instead of
        ``approval_required``, so the adapter asks nobody, and the model
        reads it: a framework that hands a re-run step the answer saved for
        its first question never approves the changed call with it."""
        options = self._options(call, approved, edited, cancel)
        return await self._toolset.call(*_named(call), **options)

    def run_sync(
        self,
        call: ModelCall,
        *,
        approved: bool = False,
        edited: bool = False,
        cancel: object | None = None,
    ) -> ToolResult:
        """:meth:`run` for code without an event loop (with an asynchronous
        backend inside a running loop it refuses: see
        :meth:`~sandrail.Toolset.call_sync`)."""
        return self._toolset.call_sync(
            *_named(call), **self._options(call, approved, edited, cancel)
        )

    def _options(
        self, call: ModelCall, approved: bool, edited: bool, cancel: object | None
    ) -> _CallOptions:
        """The keyword arguments of the toolset's ``call`` (and
        ``call_sync``) for ``call``: repeats are matched under its run (a
        client's own key has none, and is its own)."""
        return _CallOptions(
            call_id=call.call_id,
            operation_key=call.operation_key,
            profile=self._profile,
            cancel=cancel,
            timeout_seconds=self._timeout_seconds,
            reconcile_repeats=call.run_id is not None,
            run_id=call.run_id,
            approved=approved,
            edited=edited,
            turn=call.turn,
        )

    async def asks_a_person(self, call: ModelCall) -> bool:
        """Whether the harness's policy answers ``ApprovalRequired`` for
        ``call`` (asked, nothing run): a framework that decides before the
        call whether to ask a person asks this. ``False`` for ``ALLOW``,
        ``Deny`` (never asks anyone: the call reads ``policy_denied``),
        invalid arguments and a policy that fails (the call itself then
        reports why), and a call whose key already launched it (it
        reconciles). A policy that does not answer within
        :attr:`timeout_seconds` asks nobody either: the call then meets the
        same deadline and runs nothing."""
        asked = self._toolset.ask_policy(
            call.name,
            call.arguments,
            call_id=call.call_id,
            operation_key=call.operation_key,
            profile=self._profile,
            reconcile_repeats=call.run_id is not None,
            run_id=call.run_id,
            turn=call.turn,
        )
        try:
            decision = await asyncio.wait_for(asked, self._timeout_seconds)
        except TimeoutError:
            return False
        return _asks_a_person(decision)

    def asked(self, call: ModelCall, *, shown_as: str | None = None) -> bool:
        """Whether a person has already been asked about ``call`` (see
        :meth:`~sandrail.Toolset.asked`; ``shown_as``: the place the
        framework hands its answer back from, where answers go by
        position): ask it before running a call your framework may pause
        for a person, and if the framework hands that pause an answer at
        once while this was ``False``, the answer is another question's:
        answer :meth:`unasked` instead, nothing run."""
        return self._toolset.asked(
            call.name,
            call.arguments,
            call_id=call.call_id,
            operation_key=call.operation_key,
            profile=self._profile,
            reconcile_repeats=call.run_id is not None,
            run_id=call.run_id,
            shown_as=shown_as,
            turn=call.turn,
        )

    def asking(self, call: ModelCall, *, shown_as: str | None = None) -> None:
        """Your framework has put ``call``'s question to a person (it paused
        for the answer; ``shown_as``: in that place): keep the question (see
        :meth:`~sandrail.Toolset.asking`), so that :meth:`asked` is true for
        it once the answer comes."""
        self._toolset.asking(
            call.name,
            call.arguments,
            call_id=call.call_id,
            operation_key=call.operation_key,
            profile=self._profile,
            shown_as=shown_as,
        )

    def unasked(self) -> ToolResult:
        """What the model reads when a framework handed a person's answer to
        a call nobody was shown (the saved run changed after the question:
        the call's arguments, or what its key is made of): ``error``,
        ``approval_mismatch``, ``executed: false``; nothing ran, and the call
        is asked about afresh when the model makes it again."""
        return self.refusal(
            ErrorCode.APPROVAL_MISMATCH,
            "Nothing ran: the answer given was a person's answer to another call (the saved "
            "run changed after the question was shown), and nobody was asked about this one. "
            "Make the call again to ask about it, or ask the user what to do.",
        )

    def approve(self, call: ModelCall) -> ToolResult | None:
        """Keep a person's approval of ``call``, given through the framework's
        own gate, which runs the call afterwards without ``approved=True``
        (a ``HumanInTheLoopMiddleware``): ``None`` when it stands (run the
        call), else what the model reads instead, nothing run: the rejection
        a person made first, or ``approval_mismatch`` when an approval of
        another call under its key came first (see
        :meth:`~sandrail.Toolset.approve`)."""
        return self._toolset.approve(
            call.name,
            call.arguments,
            call_id=call.call_id,
            operation_key=call.operation_key,
            profile=self._profile,
        )

    def reject(self, call: ModelCall | None, reason: str | None = None) -> ToolResult:
        """What the model reads when a person rejected ``call``: ``error``,
        ``approval_rejected``, ``executed: false``, what to do instead and
        ``reason`` when given (env values masked, C17), within the budget.
        When the call's key already launched this very call (approved on one
        copy of a saved run, rejected on another), it is ``uncertain`` with
        the task's locator instead, never "nothing ran" (C5, C6). ``None``
        (the call cannot be told): the plain rejection."""
        if call is None:
            return self._toolset.rejection(reason)
        return self._toolset.rejection(
            reason,
            name=call.name,
            call_id=call.call_id,
            operation_key=call.operation_key,
            arguments=call.arguments,
            profile=self._profile,
        )

    def refusal(self, code: ErrorCode, instruction: str) -> ToolResult:
        """An ``error`` result (``executed: false``) with ``error_type``
        ``code`` and ``instruction`` (what the model can do instead), within
        the toolset's budget: what an adapter answers for what it refuses
        itself."""
        return _refusal(code, instruction, self._toolset.max_output_bytes)

    def arguments_refusal(self, path: str, reason: str) -> ToolResult:
        """An ``e2b_command_arguments_invalid`` refusal naming the field
        ``path`` and ``reason`` (``"arguments"``, ``"must be a JSON
        object"``), as the port names a schema problem, within the budget."""
        problem = ArgumentProblem(path, reason)
        content = arguments_rejection([problem], self._toolset.max_output_bytes)
        return ToolResult(status="error", content=content)


def parsed_arguments(arguments: object) -> dict[str, Any] | None:
    """``arguments`` as a plain JSON object, as :meth:`Adapter.call_of`
    reads them (JSON text parsed, a mapping copied), or ``None`` when they
    are not one: for a framework that validates arguments before the tool
    is called, and must hand the rest on as sent. Never raises."""
    parsed = _parsed(arguments)
    if isinstance(parsed, dict) and all(type(key) is str for key in parsed):
        return parsed
    return None


class _CallOptions(TypedDict):
    """The keyword arguments of :meth:`~sandrail.Toolset.call` an adapter passes."""

    call_id: str
    operation_key: str
    profile: Profile
    cancel: object | None
    timeout_seconds: float | None
    reconcile_repeats: bool
    run_id: str | None
    approved: bool
    edited: bool
    turn: str | None


def _named(call: ModelCall) -> tuple[str, object]:
    return call.name, call.arguments


def _turn(value: object) -> str | None:
    """A framework's turn id as a plain non-blank ``str``, else ``None``."""
    plain = _plain_text(value)
    return plain if plain is not None and plain.strip() else None


def _plain_text(value: object) -> str | None:
    """``value`` as a plain ``str`` (never calling a subclass's methods), or
    ``None`` when it is not a string."""
    return str.__str__(value) if isinstance(value, str) else None


def _parsed(arguments: object) -> object:
    """The model's arguments as plain data (see :meth:`Adapter.call_of`),
    or the :class:`~sandrail.core.ArgumentProblem` that refuses them."""
    if isinstance(arguments, (str, bytes, bytearray)):

        def refuse(constant: str) -> float:
            raise ValueError(constant)

        text = str.__str__(arguments) if isinstance(arguments, str) else bytes(arguments)
        try:
            return json.loads(text, parse_constant=refuse)
        except (ValueError, TypeError, RecursionError):
            return ArgumentProblem("arguments", "must be a JSON object (the text is not JSON)")
    if not isinstance(arguments, Mapping):
        return arguments
    try:
        return {_plain_text(key) or key: arguments[key] for key in list(arguments.keys())}
    except Exception:
        return ArgumentProblem("arguments", "must be a JSON object (it could not be read)")
