"""The judge: every call of a :class:`~sandrail.testing.World` held against
the contract (``docs/explanation/contract.md``) and the world's ground truth.

Every check names the contract line it enforces (or ``harness``: a
harness's own mistake, such as retrying an uncertain call under a new key)
and yields the violations it found (it never raises), so a campaign can
count them per line and a test can print them all. :func:`judge` runs them
once every held request has been delivered (C5 must hold even then), plus
the checks that look at the world as a whole (C2 over all tasks, C10 fence
marks, C17 across pages and recordings, C18 processes left alive after a
stop).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from sandrail.core import (
    SIDE_EFFECTS,
    TERMINAL_STATUSES,
    Delivery,
    EffectFailure,
    ErrorCode,
    StartRefused,
    ToolKind,
    canonical_json,
    launch_digest,
)

from ._calls import CallRecord, tool_kind
from ._record_faults import check_record_faults
from ._violation import Violation

if TYPE_CHECKING:
    from sandrail.core import ToolResult

    from ._world import World

__all__ = [
    "CHECKS",
    "CONTRACT_LINES",
    "HARNESS_LINE",
    "ContractViolationError",
    "Violation",
    "judge",
    "split_secrets",
]

CONTRACT_LINES = (
    "C2",
    "C3",
    "C4",
    "C5",
    "C6",
    "C7",
    "C9",
    "C10",
    "C11",
    "C12",
    "C13",
    "C14",
    "C17",
    "C18",
)
"""The lines the judge checks, in table order."""

LINE_SUMMARIES = {
    "C2": "at most one launch per task id",
    "C3": "same key, other arguments: conflict, nothing launched",
    "C4": "read/stop only this session's commands",
    "C5": "error: executed false, nothing ran, even late",
    "C6": "uncertain: full locator, never executed false",
    "C7": "ok launch: exactly one launch",
    "C9": "authority/drift: before dispatch error, after uncertain",
    "C10": "a stale fence never runs",
    "C11": "abort: before dispatch canceled, after uncertain",
    "C12": "every result within the byte budget",
    "C13": "identity fields byte-identical",
    "C14": "oversized identity refused before any effect",
    "C17": "env values never in results or recordings",
    "C18": "a stop ends the command's whole process group",
}
"""One line of plain words per contract line, for reports."""


class ContractViolationError(AssertionError):
    """Raised by :meth:`World.assert_contract`: lists every violation with the
    calls they concern, so a failing test says what broke and where."""

    def __init__(self, violations: Sequence[Violation], world: World | None = None) -> None:
        self.violations = tuple(violations)
        lines = [f"{len(self.violations)} contract violation(s):"]
        for violation in self.violations:
            lines.append(f"  {violation}")
            if world is not None and violation.call is not None:
                record = world.calls[violation.call - 1]
                lines.append(f"      {_describe(record)}")
        super().__init__("\n".join(lines))


def _describe(record: CallRecord) -> str:
    faults = ", ".join(f"{f.kind.value}@{f.effect}#{f.occurrence}" for f in record.faults)
    error = None if record.result is None else record.result.content.get("error_type")
    return (
        f"{record.tool} key={record.key!r}"
        + (f" [{record.label}]" if record.label else "")
        + f" -> {record.status}"
        + (f" {error}" if error else "")
        + (f"; faults: {faults}" if faults else "")
    )


Check = Callable[["World", CallRecord], Iterable[Violation]]


def _locator(record: CallRecord) -> dict[str, object]:
    request = record.request
    identity = request.identity
    locator = {} if identity is None else identity.locator()
    locator.update(
        session_id=request.session_id,
        operation_key=request.operation_key,
        call_id=request.call.call_id,
    )
    return locator


def _content(record: CallRecord) -> dict[str, object]:
    assert record.result is not None
    return dict(record.result.content)


_CANONICAL: weakref.WeakKeyDictionary[CallRecord, tuple[object, bytes]] = (
    weakref.WeakKeyDictionary()
)


def _canonical_content(record: CallRecord) -> bytes:
    """The canonical JSON of the record's content, made once per result (C12
    and C17 both read it)."""
    assert record.result is not None
    kept = _CANONICAL.get(record)
    if kept is not None and kept[0] is record.result:
        return kept[1]
    text = canonical_json(_content(record))
    _CANONICAL[record] = (record.result, text)
    return text


def _same_json(left: object, right: object) -> bool:
    """Whether two JSON values have the same canonical form (two strings are
    compared as they are: their canonical forms are equal exactly when they are)."""
    if type(left) is str and type(right) is str:
        return left == right
    return canonical_json(left) == canonical_json(right)


def check_c2_one_launch(world: World, record: CallRecord) -> Iterable[Violation]:
    """C2: a call launches at most once, and only the task its key derives."""
    total = sum(record.launched.values())
    if total > 1:
        yield Violation("C2", record.number, f"one call launched {total} times")
    stray = set(record.launched) - ({record.task} if record.launches else set())
    if stray:
        yield Violation(
            "C2", record.number, f"launched task(s) its operation key does not derive: {stray}"
        )


def check_c3_conflict(world: World, record: CallRecord) -> Iterable[Violation]:
    """C3: same key, other arguments: never ok, nothing launched; once the
    sandbox refused the claim, ``error`` ``operation_conflict`` (unless the
    harness lost authority, drifted or aborted meanwhile: C9 and C11 rule)."""
    if not record.conflict:
        return
    assert record.result is not None
    if record.result.status == "ok" or record.launched:
        yield Violation("C3", record.number, f"conflict gave {record.result.status}, launched")
        return
    refused = any(
        isinstance(answer, StartRefused) and answer.reason in ("conflict", "publish_conflict")
        for _, answer in record.effects
    )
    code = _content(record).get("error_type")
    # Lost authority, drift or an abort during the call: C9 and C11 decide
    # then (whoever caused them: a fault, or the harness's own callbacks).
    flipped = record.aborted or record.drifted or record.authority_lost or code in _GUARD_CODES
    if refused and not flipped and code != ErrorCode.OPERATION_CONFLICT.value:
        yield Violation("C3", record.number, f"the sandbox refused the claim, yet {code!r}")


_GUARD_CODES = frozenset(
    code.value
    for code in (
        ErrorCode.CANCELED,
        ErrorCode.ABORTED,
        ErrorCode.AUTHORITY_UNPROVEN,
        ErrorCode.AUTHORITY_LOST,
        ErrorCode.REQUEST_DRIFTED,
    )
)


def check_c4_foreign_task(world: World, record: CallRecord) -> Iterable[Violation]:
    """C4: read/stop of a task this session never launched: error, no sandbox call."""
    if not record.foreign:
        return
    assert record.result is not None
    if record.result.status != "error" or record.effects:
        yield Violation(
            "C4",
            record.number,
            f"another session's task: {record.result.status} after "
            f"{len(record.effects)} sandbox effect(s)",
        )


def check_c5_error_ran_nothing(world: World, record: CallRecord) -> Iterable[Violation]:
    """C5: an error says executed false and launched nothing, held requests included."""
    assert record.result is not None
    if record.result.status != "error":
        return
    content = _content(record)
    if content.get("executed") is not False:
        yield Violation("C5", record.number, "error without executed: false")
    if record.launched:
        yield Violation("C5", record.number, f"error, yet launched {dict(record.launched)}")


def check_c6_uncertain_locator(world: World, record: CallRecord) -> Iterable[Violation]:
    """C6: uncertain carries the full locator and never executed: false."""
    assert record.result is not None
    if record.result.status != "uncertain":
        return
    content = _content(record)
    missing = [key for key in _locator(record) if key not in content]
    if missing:
        yield Violation("C6", record.number, f"uncertain without locator fields {missing}")
    if "executed" in content and content["executed"] is not True:
        yield Violation("C6", record.number, "uncertain says executed: false")
    if "task_id" in content and record.task is not None and content["task_id"] != record.task:
        yield Violation("C6", record.number, "uncertain names another task")


def check_c6_a_launched_task_is_never_nothing_ran(
    world: World, record: CallRecord
) -> Iterable[Violation]:
    """C6: a launch call whose task had already launched (an earlier call of
    its key started it) never answers that the sandbox could not be reached
    and nothing ran: the task may be running or done, so such a call is
    ``uncertain`` ("nothing ran, may be retried" after a sandbox looked
    gone would invite a second launch under a new key)."""
    assert record.result is not None
    if record.result.status != "error" or record.launched_before == 0:
        return
    if not record.launches:
        return
    if _content(record).get("error_type") == ErrorCode.SANDBOX_UNAVAILABLE.value:
        yield Violation(
            "C6",
            record.number,
            f"says nothing ran, yet its task had launched {record.launched_before} time(s)",
        )


def check_c6_unknown_side_effect_is_uncertain(
    world: World, record: CallRecord
) -> Iterable[Violation]:
    """C6: a side effect (ensure, publish, start, cancel) whose request may
    have reached the sandbox without an answer makes the call uncertain,
    never an error that says nothing ran."""
    assert record.result is not None
    if record.result.status != "error":
        return
    for effect, answer in record.effects:
        if (
            isinstance(effect, SIDE_EFFECTS)
            and isinstance(answer, EffectFailure)
            and answer.delivery is Delivery.MAYBE_SENT
        ):
            yield Violation(
                "C6",
                record.number,
                f"error after a {type(effect).__name__} that may have reached the sandbox",
            )
            return
    for effect in record.reached_unanswered:
        if isinstance(effect, SIDE_EFFECTS):
            # The backend said the request never left; the world saw it arrive.
            yield Violation(
                "C6",
                record.number,
                f"error after a {type(effect).__name__} that reached the sandbox "
                "(its failure claimed it was not sent)",
            )
            return


def check_c7_ok_launch(world: World, record: CallRecord) -> Iterable[Violation]:
    """C7: ok for a launch means exactly one launch happened; and an ok that
    says ``deduplicated: false`` (this call's start launched the task) is
    one whose call the task launched in (a result that reconciled with an
    earlier launch must say so; the other way round it may err, when the
    network delivered one start twice, see the ledger page)."""
    assert record.result is not None
    if record.result.status != "ok" or not record.launches or record.task is None:
        return
    count = world.truth.launches.get(record.task, 0)
    if count != 1:
        yield Violation("C7", record.number, f"ok, but the task launched {count} times")
    if (
        record.result.content.get("deduplicated") is False
        and not record.concurrent
        and record.launched[record.task] == 0
    ):
        yield Violation(
            "C7",
            record.number,
            "ok and deduplicated: false, but the task did not launch during this call "
            f"(it had launched {record.launched_before} time(s) before it)",
        )


def _answered_uncertain_before(world: World, record: CallRecord) -> bool:
    """Whether an earlier call of ``record``'s task answered ``uncertain``:
    the port was told its start may have arrived, and nothing since can
    tell it otherwise (the sandbox that would know may be gone)."""
    if record.task is None:
        return False
    return any(
        earlier.task == record.task
        and earlier.result is not None
        and earlier.result.status == "uncertain"
        for earlier in world.calls[: record.number - 1]
    )


def check_c9_c11_authority(world: World, record: CallRecord) -> Iterable[Violation]:
    """C9, C11: lost authority, drift or abort seen during a call: after a
    dispatch ``uncertain``, before it ``error``."""
    if record.concurrent or not (record.aborted or record.drifted or record.authority_lost):
        return
    assert record.result is not None
    line = "C11" if record.aborted else "C9"
    wanted = "uncertain" if record.dispatched else "error"
    # C6 over C9 and C11: a launch call whose task may have launched (an
    # earlier call of its key started it, or answered uncertain: a start that
    # may have arrived) may not say that nothing ran, so before its own
    # dispatch it answers error or uncertain, never ok.
    if (
        not record.dispatched
        and record.launches
        and record.result.status == "uncertain"
        and (record.launched_before or _answered_uncertain_before(world, record))
    ):
        return
    if record.result.status != wanted:
        seen = "abort" if record.aborted else ("drift" if record.drifted else "authority lost")
        when = "after" if record.dispatched else "before"
        yield Violation(
            line, record.number, f"{seen} {when} dispatch gave {record.result.status}, not {wanted}"
        )


def check_c12_budget(world: World, record: CallRecord) -> Iterable[Violation]:
    """C12: the canonical JSON of the content fits the budget (unless the
    runtime governs results)."""
    if record.governed:
        return
    size = len(_canonical_content(record))
    if size > record.budget:
        yield Violation("C12", record.number, f"{size} bytes > budget {record.budget}")


def check_c13_identity_intact(world: World, record: CallRecord) -> Iterable[Violation]:
    """C13: every identity field a result carries is byte-identical to the request."""
    content = _content(record)
    for key, value in _locator(record).items():
        if key in content and not _same_json(content[key], value):
            yield Violation("C13", record.number, f"identity field {key} changed")


def check_c14_admission(world: World, record: CallRecord) -> Iterable[Violation]:
    """C14: an identity too big for the budget is refused before any effect."""
    if not record.oversized or record.governed:
        return
    content = _content(record)
    assert record.result is not None
    refused = (
        record.result.status == "error"
        and content.get("error_type") == ErrorCode.BUDGET_BELOW_MINIMUM_IDENTITY.value
    )
    if not refused or record.effects:
        yield Violation(
            "C14",
            record.number,
            f"oversized identity: {record.result.status} after {len(record.effects)} effect(s)",
        )


def check_c17_env_secret(world: World, record: CallRecord) -> Iterable[Violation]:
    """C17: no secret of the world (an env value its calls pass) appears in a result."""
    text = _canonical_content(record).decode("utf-8")
    for secret in world.secrets:
        if secret in text:
            yield Violation("C17", record.number, "an environment value appears in the result")
            return


CHECKS: tuple[Check, ...] = (
    check_c2_one_launch,
    check_c3_conflict,
    check_c4_foreign_task,
    check_c5_error_ran_nothing,
    check_c6_uncertain_locator,
    check_c6_a_launched_task_is_never_nothing_ran,
    check_c6_unknown_side_effect_is_uncertain,
    check_c7_ok_launch,
    check_c9_c11_authority,
    check_c12_budget,
    check_c13_identity_intact,
    check_c14_admission,
    check_c17_env_secret,
    check_record_faults,
)
"""The per-call checks, each named after its contract line."""


# -- C17 across pages: a secret split over two reads is still shown -------------------

_STREAMS = ("stdout", "stderr")

Page = tuple[str, int, str, int]
"""One page of a stream: (task, cursor it starts at, text, cursor after it)."""


def split_secrets(pages: Iterable[Page], secret: str) -> list[tuple[int, int]]:
    """Runs of consecutive pages of one stream (each starts where the one
    before ended) whose texts together contain ``secret`` (C17: not even in
    pieces), as (start, end) cursors of the run's first page."""
    pages = list(pages)
    by_start: dict[tuple[str, int], list[Page]] = {}
    for page in pages:
        by_start.setdefault((page[0], page[1]), []).append(page)
    found: list[tuple[int, int]] = []
    for first in pages:
        task, start, text, end = first
        runs = [(text, end)]
        while runs:
            joined, at = runs.pop()
            if secret in joined:
                found.append((start, end))
                break
            if len(joined) > len(text) + len(secret):
                continue  # longer than any piece the secret could be in
            runs.extend(
                (joined + following[2], following[3])
                for following in by_start.get((task, at), ())
                if following[3] != at
            )
    return found


def _result_pages(world: World, stream: str) -> list[Page]:
    pages: list[Page] = []
    for record in world.calls:
        result = record.result
        if record.tool != "read_command_output" or result is None or result.status != "ok":
            continue
        content = result.content
        arguments = record.request.call.arguments
        start = arguments.get(f"{stream}_cursor", 0)
        text = content.get(stream)
        cursor = content.get(f"{stream}_cursor")
        if isinstance(text, str) and isinstance(cursor, int) and record.task is not None:
            pages.append((record.task, start, text, cursor))
    return pages


def _cassette_pages(text: str, stream: str) -> list[Page]:
    pages: list[Page] = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        effect, outcome = record.get("effect"), record.get("outcome")
        if not isinstance(effect, dict) or not isinstance(outcome, dict):
            continue
        if effect.get("type") != "Read" or outcome.get("type") != "OutputChunk":
            continue
        pages.append(
            (
                str(effect.get("task_id")),
                effect.get(f"{stream}_cursor", 0),
                str(outcome.get(stream, "")),
                outcome.get(f"next_{stream}_cursor", 0),
            )
        )
    return pages


def _world_checks(world: World) -> Iterable[Violation]:
    twice = {task: n for task, n in world.truth.launches.items() if n > 1}
    if twice:
        yield Violation("C2", None, f"tasks launched more than once: {twice}")
    for record, fence, mark in world.stale_launches:
        number = None if record is None else record.number
        yield Violation("C10", number, f"fence {fence} launched after fence {mark}")
    for record in world.calls:
        result = record.result
        if record.tool != "stop_command" or result is None or result.status != "ok":
            continue
        if result.content.get("command_status") in TERMINAL_STATUSES and record.task:
            alive = world.truth.live_processes(record.task)
            if alive:
                yield Violation(
                    "C18", record.number, f"stopped, yet {alive} process(es) of the task live"
                )
    for secret in world.secrets:
        for stream in _STREAMS:
            for start, end in split_secrets(_result_pages(world, stream), secret):
                yield Violation(
                    "C17",
                    None,
                    f"an environment value is split across {stream} pages at {start} and {end}",
                )
    for path in world.recordings:
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        for secret in world.secrets:
            if secret in text:
                yield Violation("C17", None, f"an environment value is in {path}")
            elif any(split_secrets(_cassette_pages(text, stream), secret) for stream in _STREAMS):
                yield Violation(
                    "C17", None, f"an environment value is in {path}, split across reads"
                )


def judge(world: World, *, deliver_held: bool = True, harness: bool = True) -> list[Violation]:
    """Every violation in ``world``: per call, then the world as a whole,
    then (unless ``harness`` is false) the harness's own
    (:func:`check_harness_retries`).

    With ``deliver_held`` (the default), requests still held for late
    delivery arrive first, so an ``error`` whose request lands late is
    caught (C5). A stateful test judging after every step passes ``False``
    and judges once more at the end. ``harness=False`` is for calls that are
    no harness's: a random schedule's, which reuses commands under any key
    on purpose."""
    world.check_watched()
    if deliver_held:
        world.deliver_held()
    found: list[Violation] = []
    for record in world.calls:
        if record.result is None:
            continue
        for check in CHECKS:
            found.extend(check(world, record))
    found.extend(_world_checks(world))
    if harness:
        found.extend(check_harness_retries(world))
    return found


HARNESS_LINE = "harness"
"""The line of a harness's own mistakes the contract cannot absorb: the
port keeps its promises, the harness broke the one it must keep."""


def check_harness_retries(world: World) -> Iterable[Violation]:
    """A call answered ``uncertain``, then made again (the same tool and the
    same launch, C3's digest) under another operation key, in any session of
    the world, before anything settled the first: a harness violation. The
    first may have run, and a new key (or a new session) is a new task: the
    command may run twice, and C2 cannot see it (each task launched once).
    Retry with the same key, or read the task.

    Settled: a later call *of the first's task* (the same session, key and
    launch; or a read or stop naming its task) answered ``ok``, or
    ``error`` saying it never started. Nothing else tells what became of
    it: a conflict under its key (other arguments, or the identical ones
    answered as a conflict), a refusal, an error or a second ``uncertain``
    leave it open. Once settled, the same command again is a new call of
    its own."""
    open_calls: dict[tuple[str, str], CallRecord] = {}
    first: CallRecord | None
    for record in world.calls:
        result = record.result
        if result is None:
            continue
        key = record.key if isinstance(record.key, str) else None
        digest = _launch_of(record)
        if _settles(result):
            for launch, first in list(open_calls.items()):
                if _same_task(first, record, key, digest):
                    del open_calls[launch]
        if digest is None or key is None:
            continue
        launch = (record.tool, digest)
        first = open_calls.get(launch)
        if first is not None and (first.session_id, first.key) != (record.session_id, key):
            where = "" if first.session_id == record.session_id else " in another session"
            yield Violation(
                HARNESS_LINE,
                record.number,
                f"retried call {first.number}, answered uncertain under operation key "
                f"{first.key!r}, under a new key {key!r}{where}: its command may run twice. "
                "Retry an uncertain call with the same operation key, in its session "
                "(or read its task).",
            )
        if result.status == "uncertain":
            open_calls.setdefault(launch, record)


def _launch_of(record: CallRecord) -> str | None:
    """The launch digest of a launch tool's call, None for any other call
    (or arguments with no digest)."""
    if tool_kind(record.tool) is not ToolKind.LAUNCHES:
        return None
    if record.one_call is not None:
        return record.one_call  # as the port reads it: a spelled-out default is the same call
    try:
        return launch_digest(record.tool, record.request.call.arguments)
    except Exception:
        return None


def _settles(result: ToolResult) -> bool:
    """Whether ``result`` tells what became of its task: ``ok``, or the
    error that says it never started."""
    if result.status == "ok":
        return True
    error = result.content.get("error_type")
    return result.status == "error" and error == ErrorCode.COMMAND_NOT_STARTED.value


def _same_task(first: CallRecord, later: CallRecord, key: str | None, digest: str | None) -> bool:
    """Whether ``later`` is a call of ``first``'s task: the same launch under
    the same key in the same session, or a read or stop naming its task."""
    if digest is not None:
        return (
            later.session_id == first.session_id
            and key == first.key
            and digest == _launch_of(first)
        )
    return later.task is not None and later.task == first.task
