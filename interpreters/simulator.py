"""An in-memory E2B: sandboxes, task claims, scripted processes, a virtual clock,
and fault plans.

:class:`Simulator` is a plain synchronous interpreter: call it with a sandbox
effect, get that effect's outcome, or an :class:`EffectFailure` saying whether
the request may have reached the sandbox. It never reads the real clock and
never sleeps. Harness effects (``Authorize``, ``CheckAuthority``, ...) are the
port's to answer; given one, the simulator raises :class:`TypeError`.

Alongside, it keeps the ground truth tests judge results by: how many times
each task really launched (:attr:`Simulator.launches`), which processes are
alive, every effect received and every effect really applied.

Semantics
---------

- **Time.** ``clock`` starts at 0.0. Every effect but ``Wait`` takes
  ``latency`` (0.001 s) on arrival. ``Wait`` advances the clock to the
  command's end or ``timeout_seconds``, whichever is first, and wakes at once
  (an aborted failure) when the harness's cancel token has fired while the
  command still runs. :meth:`Simulator.advance` lets time pass between calls.
- **Sandboxes.** ``Ensure`` is idempotent per ``(session_id, owner_key)`` and
  names sandboxes ``sbx-1``, ``sbx-2``, ... in creation order. ``Inspect``
  reports ``absent``, ``ready``, or ``closed`` (the sandbox died). An effect
  naming an unknown sandbox fails ``NOT_SENT`` (``sandbox <id> not found``).
  Both answer ``backend="simulator"``, so every result says
  ``"backend": "simulator"`` and ``sandbox_status`` says ``"isolated": false``:
  nothing it reports ran anywhere.
- **Publish** writes the source with mode 0440, as the launcher does (root's,
  read through the user's group: no command can change it); the same source again is
  ``Published`` again, other source is ``StartRefused("publish_conflict")``;
  once the task is claimed, ``Published`` (its start answers from the claim).
  A path other than the task's own staging path
  (``/tmp/sandrail/code/<task id>.<suffix>``) fails ``NOT_SENT``, by the
  launcher's own rule (:func:`~sandrail.core.staged_suffix`), so a tool
  staging anywhere else fails here as it would on a launcher backend.
- **Start** answers a retry from its claim first (C2): a claimed task id
  with the same digest is ``Started(first_launch=False)`` with the first
  launch's state now, whatever the start's fence (a retry launches
  nothing). Every other start obeys the fence (C10): below the highest seen
  in the sandbox it is ``StartRefused("stale_fence")``; otherwise the fence
  becomes the highest (even when the claim then refuses). A claimed task
  id with another digest is ``StartRefused("conflict")``. An unclaimed one launches
  (``launches[task_id] += 1``) when the sandbox can prove it never held its
  claim: its ledger epoch is the start's ``claim_epoch`` or, without one,
  the start expects no claim; otherwise ``StartRefused("claim_lost")``
  (:func:`~sandrail.core.claim_verdict`, the rule of
  :mod:`sandrail.core._claim`).
  ``Ensure`` reports the ledger epoch, ``"<sandbox id>/ledger-<n>"``, where
  ``n`` counts the times its ledger was wiped. Env values stay in the task:
  no outcome, detail or exception carries them (C17).
- **The ledger** (the claims) can be lost: :meth:`Simulator.wipe_ledger`, or
  the ``LEDGER_WIPED`` fault, models a command deleting it; the processes run
  on unseen and the ledger starts a new epoch, so no start sent under an
  older one (a request delivered late, say) can launch there again.
- **Scripts.** A launch runs ``scripts[command]``; failing that, the
  ``scripts`` entry for the source of a file published in that sandbox whose
  path appears in the command (a snippet run); failing that, ``default``
  (a :class:`Script`, or a function of the command; by default
  :func:`emulate`, see there for the few commands it knows, and ``cp`` and
  ``cat`` over the sandbox's files: a copy is made when it launches). A
  command it does not know exits 127 and prints :data:`NOT_EMULATED` on
  stderr, so an offline test cannot pass by accident on a command that
  never ran.
- **Ends.** Past ``timeout_seconds`` a command's group is killed: status
  ``timed_out``, exit code 124. ``Cancel`` kills the group of a running
  command (``canceled``, 143) and answers ``CancelRequested`` with the state
  right after; children die with their leader (C18). A task id the sandbox
  never launched reads as status ``unknown`` (``Wait``, ``Read``, ``Cancel``).
- **Reads** return up to ``max_bytes`` (at least 4) per stream from the
  cursors, never ending inside a UTF-8 character; a cursor inside a character
  moves forward to the next boundary (the text is always an exact slice);
  a cursor past the end reads nothing and stays. The same cursor always reads
  the same text.

Fault table
-----------

Each :class:`Fault` strikes one occurrence of one effect type, and does what
its kind's row of :data:`FAULT_TABLE` says (the testing kit's
``FaultyBackend`` runs the same rows in front of any backend): its steps, in
order, before or after the effect is applied ("applied" means the sandbox
really did what the effect asks), then the failure the row raises, if any.
Here a step does this to the simulated world:

===================  ======================================================
step                 in the simulator
===================  ======================================================
``apply``            the effect is applied now
``hold``             the request is held, then applied in order by
                     :meth:`deliver_held` or at the start of the next effect
                     (``late_delivery``); a late Start obeys the claim,
                     digest and fence rules like any other
``hang``             the clock jumps to arrival + timeout (Wait: its own,
                     others ``hang_seconds``, 30 s); no jump once the
                     harness token has fired (the row then raises aborted)
``cancel``           ``harness.cancel_token.cancel()``
``lose_authority``   ``harness.authority_held = False``
``mutate_request``   ``harness.mutate_request()``
``kill``             the sandbox the effect addresses (for Inspect/Ensure:
                     the session's, if any) dies
``wipe``             a command deletes that sandbox's task claims
                     (:meth:`Simulator.wipe_ledger`)
===================  ======================================================

A dead sandbox's running tasks end with status ``unknown`` and no exit code
(ground truth only: their output can no longer be read). Every later effect
on it fails ``NOT_SENT "sandbox <id> is gone"``, ``Ensure`` for its session
included (the session's idempotency key stays bound to the dead sandbox, so a
new sandbox can never relaunch its tasks: C2); ``Inspect`` reports it
``closed``. A failure raised while applying the effect (an unknown sandbox,
say) wins over the fault's own failure.
"""

from __future__ import annotations

import functools
import itertools
import posixpath
import re
import shlex
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, Literal

from sandrail.core import (
    HARNESS_EFFECTS,
    SANDBOX_EFFECTS,
    Allow,
    Cancel,
    CancelRequested,
    CommandState,
    Delivery,
    Effect,
    EffectFailure,
    Ensure,
    Inspect,
    Outcome,
    OutputChunk,
    PolicyDecision,
    Publish,
    Published,
    Read,
    SandboxEffect,
    SandboxPhase,
    SandboxReady,
    SandboxState,
    Start,
    Started,
    StartRefused,
    ToolRequest,
    Wait,
    claim_verdict,
    staged_suffix,
)

from ._cancel import CancelToken
from ._sim_faults import (
    FAULT_TABLE,
    SANDBOX_EFFECT_NAMES,
    TRANSIENT_KINDS,
    Fault,
    FaultKind,
    FaultPlan,
    FaultRow,
    Raised,
    Step,
    deliver_held,
    harness_step,
    strike,
)
from ._sim_scripts import NOT_EMULATED, NOT_EMULATED_EXIT_CODE, Chunk, Script, Stream, emulate
from ._sim_world import SandboxFile, SimSandbox, SimTask, read_utf8

__all__ = [
    "FAULT_TABLE",
    "NOT_EMULATED",
    "NOT_EMULATED_EXIT_CODE",
    "SANDBOX_EFFECT_NAMES",
    "TRANSIENT_KINDS",
    "Chunk",
    "Fault",
    "FaultKind",
    "FaultPlan",
    "FaultRow",
    "LateDelivery",
    "Raised",
    "SandboxFile",
    "Script",
    "SimulatedHarness",
    "Simulator",
    "Step",
    "emulate",
]

_SNIPPET_MODE = 0o440
_COMMAND_UMASK = 0o077
"""The file mode creation mask a command runs under: the launcher's."""
_SHELL_SYNTAX = re.compile(r"[<>|;&$`*?\[\]{}()~#\n]")
"""What in a word of a file command the shell would act on (``#`` starts a
comment at a word's start; anywhere else it is refused too, to keep one rule)."""
_KNOWN_DIRECTORIES: Final = frozenset({"/", "/tmp", "/home", "/home/user", "/root"})
"""Directories every sandbox has, beside the parents of its files."""
_emulated = functools.lru_cache(maxsize=512)(emulate)
""":func:`emulate`, remembered: a script is a plain value of its command."""
_MIN_READ_BYTES = 4  # one UTF-8 character always fits
_UNKNOWN = CommandState(status="unknown")

LateDelivery = Literal["next_effect", "manual"]


class SimulatedHarness:
    """A harness whose abort, authority and request drift a fault plan can
    flip.

    Wire it into a port: ``authorize=harness.authorize``,
    ``assert_authority=harness.assert_authority``, and each request's
    ``cancel=harness.cancel_token`` (a new token after :meth:`reset`).
    """

    def __init__(self, *, decision: PolicyDecision | None = None) -> None:
        self.decision: PolicyDecision = Allow() if decision is None else decision
        self.cancel_token = CancelToken()
        self.authority_held = True
        self.drifted = False
        self.last_request: ToolRequest | None = None

    def authorize(self, request: ToolRequest) -> PolicyDecision:
        """Answer ``decision``. (A port hands its policy a copy of the request
        as the call will run it, so this is not the request to mutate.)"""
        return self.decision

    def assert_authority(self, request: ToolRequest) -> bool:
        """Whether the caller still holds its authority. Remembers ``request``
        (the live one: :meth:`mutate_request` changes what the port checks)."""
        self.last_request = request
        return self.authority_held

    def mutate_request(self) -> None:
        """Change the live request so the port sees drift (C9).

        Sets ``drifted``; if the last request ``assert_authority`` saw has a
        ``dict`` of arguments, also adds the key ``"__drift__"`` to it, so a
        digest of the live request changes. Other mappings are left alone: a
        port can consult ``drifted``.
        """
        self.drifted = True
        request = self.last_request
        if request is not None and isinstance(request.call.arguments, dict):
            request.call.arguments["__drift__"] = True

    def reset(self) -> None:
        """Start a new call: a fresh cancel token, authority held, no drift."""
        self.cancel_token = CancelToken()
        self.authority_held = True
        self.drifted = False
        self.last_request = None


class Simulator:
    """An in-memory E2B backend driven by a virtual clock (see the module doc).

    ``scripts`` maps a command string, or a snippet's source, to its
    :class:`Script`; ``default`` answers every other command. ``plan`` is the
    fault plan of the run; ``harness`` the :class:`SimulatedHarness` its
    faults act on (a fresh one if omitted). ``late_delivery`` chooses when
    held requests arrive: at the start of the next effect received
    (``"next_effect"``) or only on :meth:`deliver_held` (``"manual"``).
    """

    backend_label: Final = "simulator"
    """What this backend is, for what a harness shows its users; every
    result says it too."""
    boundary: Final = (
        "sandrail's in-memory simulator: no command really runs and nothing is isolated. "
        "It answers a few commands (echo, true, false, exit, sleep, seq) and the ones its "
        "harness scripted; any other command exits 127 with a 'not emulated' line on stderr."
    )
    """The boundary in words, which every ``Inspect`` answer states (with
    ``isolated=False``) and ``sandbox_status`` shows."""
    sandbox_description: Final = (
        "sandrail's in-memory simulator, where no command really runs "
        "(sandbox_status says what it emulates)"
    )
    """Where the commands run, in the words every tool description ends with
    ("This session's sandbox: ..."): a backend states its own, so that no
    description claims a sandbox the backend does not have (without one, a
    port says ``"the sandbox its harness provides"``)."""

    def __init__(
        self,
        *,
        scripts: Mapping[str, Script] | None = None,
        default: Script | Callable[[str], Script] = emulate,
        plan: FaultPlan | None = None,
        harness: SimulatedHarness | None = None,
        late_delivery: LateDelivery = "next_effect",
        latency: float = 0.001,
        hang_seconds: float = 30.0,
    ) -> None:
        self.scripts: Mapping[str, Script] = dict(scripts or {})
        self.default = default
        self.plan = FaultPlan() if plan is None else plan
        self.harness = SimulatedHarness() if harness is None else harness
        self.late_delivery: LateDelivery = late_delivery
        self.latency = latency
        self.hang_seconds = hang_seconds
        self.clock = 0.0
        self.effects_seen: list[SandboxEffect] = []
        """Every sandbox effect received, in order, failed ones included."""
        self.applied: list[SandboxEffect] = []
        """Every effect the sandbox really acted on, in order (held ones when delivered)."""
        self.held: list[SandboxEffect] = []
        """Requests delivered late that have not arrived yet."""
        self.late_deliveries: list[tuple[SandboxEffect, Outcome | EffectFailure]] = []
        """Held requests once delivered, with what applying them gave."""
        self.faults_fired: list[Fault] = []
        self._launches: Counter[str] = Counter()
        self._received: Counter[str] = Counter()
        self._sandboxes: dict[str, SimSandbox] = {}
        self._sessions: dict[tuple[str, str], str] = {}
        self._ids = itertools.count(1)
        # One effect at a time: a port may be driven from several threads
        # (or event loops) at once, and the world must stay consistent.
        self._lock = threading.RLock()

    # -- ground truth ------------------------------------------------------

    @property
    def launches(self) -> Mapping[str, int]:
        """Real launches per task id, ever, across sandboxes."""
        return MappingProxyType(self._launches)

    def live_processes(self, task_id: str) -> int:
        """Processes of the task still alive now (its leader and children)."""
        return sum(
            task.live_processes(self.clock)
            for box in self._sandboxes.values()
            for task in (*box.tasks.values(), *box.lost)
            if task.request.task_id == task_id
        )

    def task_state(self, sandbox_id: str, task_id: str) -> CommandState | None:
        """The task's true state now, or ``None`` if it never launched there."""
        box = self._sandboxes.get(sandbox_id)
        task = None if box is None else box.tasks.get(task_id)
        return None if task is None else task.state(self.clock)

    def files(self, sandbox_id: str) -> Mapping[str, SandboxFile]:
        """The files published in a sandbox (empty for an unknown one)."""
        box = self._sandboxes.get(sandbox_id)
        return MappingProxyType({} if box is None else box.files)

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass."""
        if seconds < 0:
            raise ValueError("time does not run backwards")
        with self._lock:
            self.clock += seconds

    def deliver_held(self) -> list[Outcome | EffectFailure]:
        """Apply every held request now, in order; return what each gave."""
        with self._lock:
            return self._deliver_held()

    def _deliver_held(self) -> list[Outcome | EffectFailure]:
        return deliver_held(self.held, self._apply, self.late_deliveries)

    # -- the interpreter -----------------------------------------------------

    def __call__(self, effect: Effect) -> Outcome:
        """Answer one sandbox effect, or raise :class:`EffectFailure`.

        Raises :class:`TypeError` for harness effects and non-effects.
        """
        if type(effect) not in _APPLY:
            if isinstance(effect, HARNESS_EFFECTS):
                raise TypeError(f"{type(effect).__name__} is a harness effect: the port answers it")
            if not isinstance(effect, SANDBOX_EFFECTS):
                raise TypeError(f"not a sandbox effect: {type(effect).__name__}")
        with self._lock:
            return self._receive(effect)  # type: ignore[arg-type]

    def _receive(self, effect: SandboxEffect) -> Outcome:
        if self.held and self.late_delivery == "next_effect":
            self._deliver_held()
        self.effects_seen.append(effect)
        if not isinstance(effect, Wait):
            self.clock += self.latency
        name = type(effect).__name__
        fault = self.plan.lookup(name, self._received[name])
        self._received[name] += 1
        if fault is None:
            return self._apply(effect)
        self.faults_fired.append(fault)
        return self._strike(effect, fault)

    def wipe_ledger(self, sandbox_id: str) -> None:
        """A command deletes the task claims of ``sandbox_id``
        (see :meth:`SimSandbox.wipe_ledger`)."""
        with self._lock:
            self._sandboxes[sandbox_id].wipe_ledger()

    def kill_sandbox(self, sandbox_id: str) -> None:
        """The provider kills ``sandbox_id``: its running tasks end with status
        ``unknown`` and every later effect on it fails (as under
        ``SANDBOX_DIES``). ``KeyError`` for a sandbox that never existed."""
        with self._lock:
            self._sandboxes[sandbox_id].die(self.clock)

    def _strike(self, effect: SandboxEffect, fault: Fault) -> Outcome:
        """Strike ``fault`` by its row of the fault table, each step done to
        this world (see :data:`FAULT_TABLE`)."""
        arrival = self.clock
        harness = self.harness

        def act(step: Step) -> None:
            if harness_step(harness, step):
                return
            if step == "hold":
                self.held.append(effect)
            elif step == "hang":
                if not harness.cancel_token.cancelled:
                    timeout = (
                        effect.timeout_seconds if isinstance(effect, Wait) else self.hang_seconds
                    )
                    self.clock = max(self.clock, arrival + timeout)
            else:
                box = self._addressed(effect)
                if box is not None and step == "kill":
                    box.die(self.clock)
                elif box is not None:
                    box.wipe_ledger()

        outcome: Outcome = strike(
            fault, lambda: self._apply(effect), act, lambda: harness.cancel_token.cancelled
        )
        return outcome

    def _addressed(self, effect: SandboxEffect) -> SimSandbox | None:
        if isinstance(effect, Inspect | Ensure):
            sandbox_id = self._sessions.get((effect.session_id, effect.owner_key))
            return None if sandbox_id is None else self._sandboxes[sandbox_id]
        return self._sandboxes.get(effect.sandbox_id)

    # -- applying effects --------------------------------------------------------

    def _apply(self, effect: SandboxEffect) -> Outcome:
        """Do what ``effect`` asks, now; record it as applied."""
        apply = _APPLY.get(type(effect))
        if apply is None:  # a subclass of an effect
            apply = next(method for kind, method in _APPLY.items() if isinstance(effect, kind))
        outcome: Outcome = apply(self, effect)
        self.applied.append(effect)
        return outcome

    def _box(self, sandbox_id: str) -> SimSandbox:
        box = self._sandboxes.get(sandbox_id)
        if box is None:
            raise EffectFailure(Delivery.NOT_SENT, f"sandbox {sandbox_id} not found")
        if box.dead:
            raise EffectFailure(Delivery.NOT_SENT, f"sandbox {sandbox_id} is gone")
        return box

    def _inspect(self, effect: Inspect) -> SandboxState:
        sandbox_id = self._sessions.get((effect.session_id, effect.owner_key))
        if sandbox_id is None:
            return self._state(None, "absent")
        return self._state(sandbox_id, "closed" if self._sandboxes[sandbox_id].dead else "ready")

    def _state(self, sandbox_id: str | None, phase: SandboxPhase) -> SandboxState:
        return SandboxState(
            sandbox_id=sandbox_id,
            phase=phase,
            backend=self.backend_label,
            isolated=False,
            boundary=self.boundary,
        )

    def _ensure(self, effect: Ensure) -> SandboxReady:
        key = (effect.session_id, effect.owner_key)
        sandbox_id = self._sessions.get(key)
        if sandbox_id is None:
            sandbox_id = f"sbx-{next(self._ids)}"
            self._sessions[key] = sandbox_id
            self._sandboxes[sandbox_id] = SimSandbox(sandbox_id=sandbox_id)
        box = self._box(sandbox_id)
        return SandboxReady(
            sandbox_id=box.sandbox_id, ledger_epoch=box.epoch_token, backend="simulator"
        )

    def _publish(self, effect: Publish) -> Published | StartRefused:
        staged_suffix(effect)  # the launcher's own rule: the task's staging path only
        box = self._box(effect.sandbox_id)
        if effect.task_id in box.tasks:
            return Published(path=effect.path)  # claimed: the start answers from the claim
        existing = box.files.get(effect.path)
        if existing is None:
            box.files[effect.path] = SandboxFile(source=effect.source, mode=_SNIPPET_MODE)
        elif existing.source != effect.source:
            return StartRefused(reason="publish_conflict")
        return Published(path=effect.path)

    def _start(self, effect: Start) -> Started | StartRefused:
        box = self._box(effect.sandbox_id)
        stale = False
        if effect.fence is not None:
            if box.highest_fence is not None and effect.fence < box.highest_fence:
                stale = True
            else:
                box.highest_fence = effect.fence
        task = box.tasks.get(effect.task_id)
        claimed = None if task is None else task.request.request_digest
        verdict = claim_verdict(effect, claimed, box.epoch_token)
        if task is not None and verdict == "deduplicated":
            # Whatever its fence: a retry of a claimed task launches nothing.
            return Started(task_id=effect.task_id, first_launch=False, state=task.state(self.clock))
        if stale:
            return StartRefused(reason="stale_fence")
        if verdict != "launch":
            return StartRefused(reason="conflict" if verdict == "conflict" else "claim_lost")
        task = SimTask(
            request=effect, script=self._script_for(box, effect.command), started_at=self.clock
        )
        box.tasks[effect.task_id] = task
        self._launches[effect.task_id] += 1
        return Started(task_id=effect.task_id, first_launch=True, state=task.state(self.clock))

    def _script_for(self, box: SimSandbox, command: str) -> Script:
        script = self.scripts.get(command)
        if script is not None:
            return script
        for path, file in box.files.items():
            if path in command and file.source in self.scripts:
                return self.scripts[file.source]
        if isinstance(self.default, Script):
            return self.default
        if self.default is emulate:
            on_files = _file_command(box, command)
            return _emulated(command) if on_files is None else on_files
        return self.default(command)

    def _task(self, sandbox_id: str, task_id: str) -> SimTask | None:
        return self._box(sandbox_id).tasks.get(task_id)

    def _wait(self, effect: Wait) -> CommandState:
        task = self._task(effect.sandbox_id, effect.task_id)
        if task is None:
            return _UNKNOWN
        if task.running(self.clock) and self.harness.cancel_token.cancelled:
            raise _aborted()
        until = min(task.ending()[0], self.clock + effect.timeout_seconds)
        self.clock = max(self.clock, until)
        return task.state(self.clock)

    def _read(self, effect: Read) -> OutputChunk:
        if effect.max_bytes < _MIN_READ_BYTES:
            raise ValueError(f"max_bytes must be at least {_MIN_READ_BYTES}")
        if effect.stdout_cursor < 0 or effect.stderr_cursor < 0:
            raise ValueError("cursors must be >= 0")
        task = self._task(effect.sandbox_id, effect.task_id)
        if task is None:
            return OutputChunk(
                stdout="",
                stderr="",
                next_stdout_cursor=effect.stdout_cursor,
                next_stderr_cursor=effect.stderr_cursor,
                more=False,
                state=_UNKNOWN,
            )
        stdout, next_stdout, more_stdout = self._slice(task, "stdout", effect.stdout_cursor, effect)
        stderr, next_stderr, more_stderr = self._slice(task, "stderr", effect.stderr_cursor, effect)
        return OutputChunk(
            stdout=stdout,
            stderr=stderr,
            next_stdout_cursor=next_stdout,
            next_stderr_cursor=next_stderr,
            more=more_stdout or more_stderr,
            state=task.state(self.clock),
        )

    def _slice(
        self, task: SimTask, stream: Stream, cursor: int, effect: Read
    ) -> tuple[str, int, bool]:
        data = task.output(self.clock, stream)
        text, next_cursor = read_utf8(data, cursor, effect.max_bytes)
        return text, next_cursor, len(data) > next_cursor

    def _cancel(self, effect: Cancel) -> CancelRequested:
        task = self._task(effect.sandbox_id, effect.task_id)
        if task is None:
            return CancelRequested(state=_UNKNOWN)
        task.kill(self.clock, "canceled")
        return CancelRequested(state=task.state(self.clock))


_APPLY: dict[type, Callable[[Simulator, Any], Outcome]] = {
    Inspect: Simulator._inspect,
    Ensure: Simulator._ensure,
    Publish: Simulator._publish,
    Start: Simulator._start,
    Wait: Simulator._wait,
    Read: Simulator._read,
    Cancel: Simulator._cancel,
}
"""How each sandbox effect is applied (a table, so a new effect type must be
added here: the simulator refuses what it cannot apply)."""


def _aborted() -> EffectFailure:
    return EffectFailure(Delivery.MAYBE_SENT, "aborted", aborted=True)


def _plain_path(path: str) -> bool:
    """Whether ``path`` names one file by one spelling: absolute, with no
    ``.`` or ``..`` step, no doubled or trailing ``/`` (so two operands are
    the same file exactly when they are the same text)."""
    return path.startswith("/") and not path.startswith("//") and posixpath.normpath(path) == path


def _is_directory(box: SimSandbox, path: str) -> bool:
    """Whether ``path`` is a directory the simulator knows of: one every
    sandbox has, or a parent of one of its files."""
    prefix = path + "/"
    return path in _KNOWN_DIRECTORIES or any(name.startswith(prefix) for name in box.files)


def _file_command(box: SimSandbox, command: str) -> Script | None:
    """The two commands :func:`emulate` leaves to the sandbox, because they
    act on its files (what a tool that stages a file runs), as GNU coreutils
    do them under the launcher's umask (077). ``cat [--] FILE...`` prints
    files. ``cp [--no-preserve=mode] [--] SRC DST`` copies a file when it
    launches: a new ``DST`` takes ``SRC``'s mode (or 0666 with
    ``--no-preserve=mode``) less the umask, an existing one keeps its mode,
    and one the user may not write (no owner write bit: a staged file, or
    a copy of one) is refused, as is a copy onto itself. A file the sandbox
    lacks exits 1 with one line on stderr. ``None`` for any other command,
    option or form, for shell syntax around them (a redirection, a pipe, an
    expansion, a comment), for a path that is not one absolute spelling
    (relative, a ``.`` or ``..`` step, a doubled or trailing ``/``) or that
    names a directory it knows of, and for text ``shlex`` cannot split,
    which :func:`emulate` then answers (not emulated). Its files have no
    directories and no owners: a path in a missing directory, or one only
    root may write, is written all the same (test those on a real shell)."""
    if not command.lstrip().startswith(("cp ", "cat ")):
        return None  # every other command, without splitting it (the hot path)
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    if not argv or argv[0] not in ("cp", "cat"):
        return None
    if any(_SHELL_SYNTAX.search(word) for word in argv):
        # A redirection, a pipe, a list, an expansion: the shell would act on
        # it, and the simulator cannot, so the command is not emulated (exit
        # 127), never run with the syntax taken for file names.
        return None
    name, operands = argv[0], argv[1:]
    fresh_mode = name == "cp" and operands[:1] == ["--no-preserve=mode"]
    if fresh_mode:
        operands = operands[1:]
    if operands[:1] == ["--"]:
        operands = operands[1:]
    if any(operand.startswith("-") for operand in operands):
        return None  # other options are not emulated
    if len(operands) != 2 if name == "cp" else not operands:
        return None  # nor cp's other forms, nor cat of its standard input
    if not all(_plain_path(operand) for operand in operands):
        return None  # a relative path, a "." or ".." step, a trailing "/"
    if any(_is_directory(box, operand) for operand in operands):
        return None  # into a directory, or a directory printed
    if name == "cat":
        # Each file in turn, and a line on stderr for each one it lacks.
        missing = [path for path in operands if path not in box.files]
        return Script.prints(
            "".join(box.files[path].source for path in operands if path in box.files),
            stderr="".join(f"cat: {path}: No such file or directory\n" for path in missing),
            exit_code=1 if missing else 0,
        )
    if operands[0] not in box.files:
        return Script.prints(
            stderr=f"cp: cannot stat '{operands[0]}': No such file or directory\n", exit_code=1
        )
    if operands[0] == operands[1]:
        return Script.prints(
            stderr=f"cp: '{operands[0]}' and '{operands[1]}' are the same file\n", exit_code=1
        )
    source, target = box.files[operands[0]], operands[1]
    existing = box.files.get(target)
    if existing is not None:
        if not existing.mode & 0o200:
            return Script.prints(
                stderr=f"cp: cannot create regular file '{target}': Permission denied\n",
                exit_code=1,
            )
        box.files[target] = SandboxFile(source=source.source, mode=existing.mode)
        return Script()
    mode = (0o666 if fresh_mode else source.mode) & ~_COMMAND_UMASK
    box.files[target] = SandboxFile(source=source.source, mode=mode)
    return Script()
