"""Scripted process behaviour for the simulator: what a command prints, when,
and how it ends.

A :class:`Script` is a plain value. The simulator looks one up for every
launch (by command string, or by snippet source) and falls back to
:func:`emulate`, a tiny stand-in for a handful of shell builtins.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable
from typing import Literal

import attrs

__all__ = ["NOT_EMULATED", "NOT_EMULATED_EXIT_CODE", "Chunk", "Script", "Stream", "emulate"]

Stream = Literal["stdout", "stderr"]

_SEQ_LIMIT = 100_000

NOT_EMULATED = (
    "sandrail simulator: this command is not emulated and did not run (script it: "
    "Simulator(scripts={command: Script.prints(...)}); a snippet is keyed by its source, "
    "scripts={code: ...}, never by its command, which names a hash of its key)\n"
)
"""What a command the simulator does not emulate prints on stderr (the exit
code is :data:`NOT_EMULATED_EXIT_CODE`, a shell's "command not found"). It
never repeats the command: the command may hold an env value's name."""
NOT_EMULATED_EXIT_CODE = 127


def _finite_non_negative(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{attribute.name} must be a finite number >= 0, got {value!r}")


def _encodable(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    value.encode("utf-8")  # raises UnicodeEncodeError for lone surrogates


@attrs.frozen(kw_only=True)
class Chunk:
    """``text`` written to ``stream`` ``offset`` seconds after the launch."""

    offset: float = attrs.field(validator=_finite_non_negative)
    stream: Stream = attrs.field(validator=attrs.validators.in_(("stdout", "stderr")))
    text: str = attrs.field(validator=_encodable)


def _by_offset(chunks: Iterable[Chunk]) -> tuple[Chunk, ...]:
    # Stable: chunks at the same offset keep their written order, so the output
    # visible at any time is a prefix of the output visible later.
    return tuple(sorted(chunks, key=lambda chunk: chunk.offset))


@attrs.frozen(kw_only=True)
class Script:
    """How one launched command behaves, in virtual time.

    - ``chunks``: output over time (kept sorted by offset, stably).
    - ``duration``: seconds from launch to exit.
    - ``exit_code``: the code it exits with; ``None`` means it never exits on
      its own (it runs until canceled, its deadline, or its sandbox dies).
    - ``children``: subprocesses in its process group; they live exactly as
      long as the command (the launcher ends the group with its leader).

    A command that exits never prints after its exit: every chunk offset must
    be at most ``duration``.
    """

    chunks: tuple[Chunk, ...] = attrs.field(default=(), converter=_by_offset)
    duration: float = attrs.field(default=0.0, validator=_finite_non_negative)
    exit_code: int | None = 0
    children: int = attrs.field(default=0, validator=attrs.validators.ge(0))

    def __attrs_post_init__(self) -> None:
        if self.exit_code is not None:
            late = [chunk.offset for chunk in self.chunks if chunk.offset > self.duration]
            if late:
                raise ValueError(
                    f"a chunk at offset {late[0]} comes after the exit at {self.duration}"
                )

    @classmethod
    def prints(
        cls,
        stdout: str = "",
        *,
        stderr: str = "",
        exit_code: int | None = 0,
        duration: float = 0.0,
        children: int = 0,
    ) -> Script:
        """Print ``stdout`` then ``stderr`` at once, then exit after ``duration``."""
        return cls(
            chunks=_at_launch(stdout, stderr),
            duration=duration,
            exit_code=exit_code,
            children=children,
        )

    @classmethod
    def hangs(cls, stdout: str = "", *, stderr: str = "", children: int = 0) -> Script:
        """Print at once, then never exit on its own."""
        return cls(chunks=_at_launch(stdout, stderr), exit_code=None, children=children)


def _at_launch(stdout: str, stderr: str) -> tuple[Chunk, ...]:
    chunks = []
    if stdout:
        chunks.append(Chunk(offset=0.0, stream="stdout", text=stdout))
    if stderr:
        chunks.append(Chunk(offset=0.0, stream="stderr", text=stderr))
    return tuple(chunks)


def emulate(command: str) -> Script:
    """The behaviour of an unscripted command: a tiny, literal shell.

    The command is split with :func:`shlex.split` (no variable expansion, no
    pipes, no ``;`` or ``&&``) and its first word decides:

    - ``echo ARGS``: prints the arguments joined by spaces, then a newline;
    - ``true`` / ``false``: exit 0 / 1;
    - ``exit [N]``: exits ``N % 256`` (0 without ``N``);
    - ``sleep N``: exits 0 after ``N`` seconds (``inf`` / ``infinity``: never);
    - ``seq N``: prints ``1`` .. ``N``, one a line (``N`` at most 100 000);
    - a bad argument to ``exit``, ``sleep`` or ``seq``: exit 1 with a one-line
      message on stderr that does not repeat the argument;
    - anything else, and text ``shlex`` cannot split: :func:`not_emulated`
      (exit 127, :data:`NOT_EMULATED` on stderr), so that a test of a command
      the simulator cannot run fails visibly instead of passing on empty
      output.
    """
    try:
        argv = shlex.split(command)
    except ValueError:
        return not_emulated()
    if not argv:
        return not_emulated()
    name, args = argv[0], argv[1:]
    match name:
        case "echo":
            return Script.prints(" ".join(args) + "\n")
        case "true":
            return Script()
        case "false":
            return Script(exit_code=1)
        case "exit":
            if not args:
                return Script()
            code = _integer(args[0])
            return _invalid(name) if code is None else Script(exit_code=code % 256)
        case "sleep":
            seconds = _seconds(args[0]) if args else None
            if seconds is None:
                return _invalid(name)
            return Script.hangs() if math.isinf(seconds) else Script(duration=seconds)
        case "seq":
            count = _integer(args[0]) if args else None
            if count is None or not 0 <= count <= _SEQ_LIMIT:
                return _invalid(name)
            return Script.prints("".join(f"{n}\n" for n in range(1, count + 1)))
        case _:
            return not_emulated()


def not_emulated() -> Script:
    """The behaviour of a command :func:`emulate` does not know: exit 127 at
    once, with :data:`NOT_EMULATED` on stderr."""
    return Script.prints(stderr=NOT_EMULATED, exit_code=NOT_EMULATED_EXIT_CODE)


def _invalid(name: str) -> Script:
    return Script.prints(stderr=f"{name}: invalid argument\n", exit_code=1)


def _integer(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _seconds(text: str) -> float | None:
    try:
        seconds = float(text)
    except ValueError:
        return None
    return None if math.isnan(seconds) or seconds < 0 else seconds
