"""Which earlier call a repeat is: the one rule every entry point uses.

A model told that a call may have run is told to repeat it exactly; a
client without operation keys retries a call whose answer it lost. Either
way the repeat must run under the earlier call's key, so the sandbox's claim
answers it and nothing launches twice (C2). Two things decide it, both pure:

- :func:`one_call` and its text :func:`same_call`: what two calls must
  share to be one call (the tool and its arguments as the port reads them:
  its record's defaults filled in and its deadline as the port would set
  it, so key order, ``1`` versus ``1.0``, an empty env or a timeout left out
  make no difference, C3);
- :func:`repeat_scope`: where repeats of a call are matched (the calls that
  name their run match across runs and turns; any other key is its own);
- :func:`repeat_key`: the key a call found to repeat an unsettled earlier
  one runs under (the earlier call's, unless the two are two calls).

The toolset's ``reconcile_repeats`` matches by both; the MCP adapter derives
its fallback keys from :func:`one_call` (through ``Toolset.one_call``,
keyed with a secret of its own, as the arguments may hold env values).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._canonical import CanonicalJSONError, canonical_json
from ._definitions import MAX_TIMEOUT_SECONDS
from ._rules import filled_arguments
from ._snapshot import PortSettings
from ._tools import tool_record

__all__ = ["one_call", "repeat_key", "repeat_scope", "same_call", "settled_arguments"]


def one_call(tool: str, arguments: Mapping[str, Any], settings: PortSettings) -> dict[str, Any]:
    """``arguments`` (in the port's form) as one call of ``tool`` to a port
    with ``settings``: its record's defaults filled in
    (:func:`~sandrail.core._rules.filled_arguments`) and the deadline the
    port would use in place of one left out (``null``) or capped. Two calls
    are one call exactly when these are the same JSON. A deadline that is
    not a number is left as it is (the port refuses it anyway). Raises
    :class:`~sandrail.core.UnknownToolError` for a tool without a record."""
    record = tool_record(tool)
    if record.deadline is not None:
        try:
            argument, seconds = record.deadline(arguments, settings)
        except TypeError:
            pass  # not a number: the port refuses it anyway
        else:
            arguments = {**arguments, argument: seconds}
    return filled_arguments(record.digest_defaults, arguments)


def settled_arguments(
    tool: str, arguments: Mapping[str, Any], settings: PortSettings
) -> Mapping[str, Any]:
    """``arguments`` (in the port's form) without a deadline argument that
    changes nothing: the one of its record's
    :attr:`~sandrail.core.ToolRecord.deadline_arguments` that the call's
    deadline reads (``run_command``: ``timeout`` of a foreground launch,
    ``background_timeout`` of a background one) whose deadline, as the
    port would set it, is the one it sets when the argument is left out
    (``300`` or ``300.0`` where the default is 300, a value above the cap),
    so a call that spells its default and one that leaves it out are one
    launch (C3): one digest, one claim. Only a value the schema accepts (an
    integer from 1 to :data:`~sandrail.core.MAX_TIMEOUT_SECONDS`, or
    ``null``) is left out, and only where it belongs, so a call the port
    would refuse is still refused. Anything else is returned as it is.
    Raises :class:`~sandrail.core.UnknownToolError` for a tool without a
    record."""
    record = tool_record(tool)
    deadline = record.deadline
    if deadline is None:
        return arguments
    # The argument this call's deadline reads: the one the record's deadline
    # names when every deadline argument is left out (it reads no other).
    unset = {k: v for k, v in arguments.items() if k not in record.deadline_arguments}
    name = deadline(unset, settings)[0]
    if name not in arguments:
        return arguments
    value = arguments[name]
    if value is not None and not (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and 1 <= value <= MAX_TIMEOUT_SECONDS
        and value == int(value)
    ):
        return arguments
    without = {key: item for key, item in arguments.items() if key != name}
    if deadline(arguments, settings)[1] != deadline(without, settings)[1]:
        return arguments
    return without


def same_call(tool: str, arguments: Mapping[str, Any], settings: PortSettings) -> bytes | None:
    """The canonical text two calls of ``tool`` share exactly when they are
    one call (:func:`one_call`, with the tool): the launch digest's text
    (:func:`~sandrail.core.launch_digest` of the arguments with the port's
    deadline is its hash). ``None`` for arguments with no canonical form
    (the port refuses them anyway)."""
    try:
        return canonical_json({"tool": tool, "arguments": one_call(tool, arguments, settings)})
    except (CanonicalJSONError, TypeError, ValueError, RecursionError):
        return None


def repeat_scope(run_id: object, operation_key: object, call_id: object) -> str:
    """Where a call's repeats are matched: every call that names its run
    (``run_id`` given, or a ``f"{run}:{call_id}"`` key) matches in one scope,
    whatever the run: a model told to repeat an uncertain call exactly may do
    so on a later run or turn (a new pydantic-ai run id, a new
    ``Runner.run``), and that repeat must still be matched to the first call.
    A key of any other form is its own scope (a call that matches no other).
    Read as plain strings: a ``str`` subclass's own methods are never
    called."""
    run, key, call = (
        str.__str__(v) if isinstance(v, str) else None for v in (run_id, operation_key, call_id)
    )
    if run is not None:
        return "runs"
    if key is None:
        return "key"  # the port refuses a key that is not a string
    if call is not None and key.endswith(":" + call) and len(key) > len(call) + 1:
        return "runs"
    return "key:" + key


def repeat_key(
    operation_key: str,
    turn: str | None,
    earlier: Sequence[tuple[str, str | None, Mapping[str, str | None]]],
    *,
    launched: bool,
    rejected: Callable[[str], bool],
    ran_before: str | None = None,
) -> str:
    """The key a call under ``operation_key``, made in model ``turn``
    (``None``: not known), runs under, given the unsettled ``earlier`` calls
    it repeats exactly, oldest first: each its key, the turn that made it,
    and the repeats that already took it (each repeat's own key and turn).
    That is the newest earlier call left for it, so the sandbox's claim
    answers the repeat and nothing launches twice (C2); the one it took
    before (``ran_before``, or the one among ``earlier`` it took), when it
    is asked about or run again, even once that call was settled. It keeps
    its own key when:

    - ``launched``: its own key may already have launched (it reconciles
      there), or it is one of ``earlier`` (a retry under its own key);
    - no earlier call is left for it: one made in the same ``turn`` (the
      model made both at once, before it could read either result) or taken
      by another repeat of that turn (two repeats of one message take one
      earlier call each) is not, nor is one ``rejected`` (a person rejected
      it first and nothing ran under its key, so it is settled: a repeat in
      another turn is a new call and a new question; one whose rejection
      came after an approval, and so may have run, is not ``rejected``).

    So two identical unsettled calls are reconciled by two repeats, one
    each, whether the model repeats them in one message or in two turns.
    """
    if launched or any(key == operation_key for key, _, _ in earlier):
        return operation_key
    before = ran_before
    if before is None:
        before = next((key for key, _, taken in earlier if operation_key in taken), None)
    if before is not None:
        return operation_key if rejected(before) else before
    for key, made_in, taken in reversed(earlier):
        if turn is not None and (
            made_in == turn or any(t == turn for k, t in taken.items() if k != operation_key)
        ):
            continue
        if rejected(key):
            continue
        return key
    return operation_key
