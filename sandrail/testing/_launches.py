"""What a world's calls launched, counted as the harness sees it.

The judge counts launches per task id (C2), which is what sandrail
promises. A harness can still launch one thing twice: by retrying under a
new operation key, it makes a new task id. These counts are by what was
launched instead: a command by its text, a snippet by its source (its
command, ``python /tmp/sandrail/code/<hash>.py``, names a hash of its task
id, so two keys would make two different commands of one snippet).

They also say which launches ran nothing: the simulator answers a command
it neither emulates nor has a script for with exit 127 and a "not emulated"
line, a result whose ``status`` is still ``ok``. :class:`Unscripted`
watches the simulator's ``default`` for that answer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from sandrail.core import Publish, Start
from sandrail.interpreters.simulator import (
    NOT_EMULATED,
    NOT_EMULATED_EXIT_CODE,
    Script,
    emulate,
)

from ._calls import CallRecord

if TYPE_CHECKING:
    from ._world import World

__all__ = [
    "Unscripted",
    "launched",
    "launched_commands",
    "unscripted",
    "unscripted_launches",
    "unscripted_message",
]

_NOT_EMULATED = Script.prints(stderr=NOT_EMULATED, exit_code=NOT_EMULATED_EXIT_CODE)


class Unscripted:
    """A simulator ``default`` that answers as ``default`` does and notes
    each command it answers with the "not emulated" script."""

    def __init__(self, default: Callable[[str], Script] = emulate) -> None:
        self.default = default
        self.commands: set[str] = set()

    def __call__(self, command: str) -> Script:
        script = self.default(command)
        if script == _NOT_EMULATED:
            self.commands.add(command)
        return script


def launched(world: World) -> Iterator[tuple[CallRecord, Start, int, str]]:
    """Each launch the world's calls caused: the call, its ``Start``, how
    many times it launched and what it launched (the command text, or the
    snippet's source)."""
    for record in world.calls:
        for effect, _ in record.effects:
            count = record.launched.get(effect.task_id, 0) if isinstance(effect, Start) else 0
            if isinstance(effect, Start) and count:
                yield record, effect, count, _launched_text(record, effect)
                break


def launched_commands(world: World) -> Counter[str]:
    """Command text (a snippet: its source) -> how many times the world's
    calls launched it, whatever the task ids."""
    found: Counter[str] = Counter()
    for _, _, count, text in launched(world):
        found[text] += count
    return found


def unscripted_launches(world: World) -> list[tuple[CallRecord, str]]:
    """The calls that launched something the simulator does not emulate,
    with what they launched (a command's text, a snippet's source)."""
    watch = world.unscripted_watch
    if watch is None:
        return []
    return [
        (record, text)
        for record, start, _, text in launched(world)
        if start.command in watch.commands
    ]


def unscripted(world: World) -> list[str]:
    """What :func:`unscripted_launches` found, in call order, once each."""
    return list(dict.fromkeys(text for _, text in unscripted_launches(world)))


def _launched_text(record: CallRecord, start: Start) -> str:
    """What ``start`` launched: the source of the snippet the call published
    for its task (the simulator's scripts are keyed by it), else its command."""
    for effect, _ in record.effects:
        if isinstance(effect, Publish) and effect.task_id == start.task_id:
            return effect.source
    return start.command


def unscripted_message(text: str) -> str:
    shown = text if len(text) <= 60 else text[:57] + "..."
    return (
        f"launched {shown!r}, which the simulator neither emulates nor has a script for: "
        "it ran nothing and exited 127 (the call's status is still ok). Script it, keyed "
        "by the command or the snippet's source: World.simulated(scripts={text: "
        'Script.prints(...)}), or pass unscripted="allow"'
    )
