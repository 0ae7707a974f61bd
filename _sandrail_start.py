"""The ``sandrail`` command's first module: what must happen before the
library loads.

Loading ``sandrail`` and its command line takes a second or more on a busy
machine. A SIGINT in that time was a ``KeyboardInterrupt`` traceback (exit
130), a SIGTERM or SIGHUP a silent death (143, 129), where ``sandrail run
--help`` promises the ``error`` result and exit 1 while nothing may have
left. So the console script starts here, a
module of the standard library alone and outside the ``sandrail`` package
(importing any ``sandrail.*`` module loads the whole library first), and
for ``run`` and ``code`` notes those signals before anything else loads;
:mod:`sandrail.cli._interrupt` takes the note over as the call's abort.
The noting handler stays as the fallback afterwards: a signal after the
call has its result changes nothing (F). A signal the process inherited
as ignored (``nohup``) stays ignored.

Standard streams that are closed are opened on ``/dev/null`` first, so no
file the call opens (a ``--record`` database, a socket) takes descriptor
1 or 2, where a stray write meant for a terminal would land in it. Python
has already made ``sys.stdout`` ``None`` for a closed one: the result is
still reported unwritten (exit 5), never written to ``/dev/null``.

``python -m sandrail`` starts here too, but only after Python has loaded
the package's ``__init__``: the console script is the one without that gap.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Final

__all__ = ["EARLY", "NOTED_SIGNALS", "EarlySignals", "main"]

NOTED_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that abort a ``run`` or ``code`` call."""

_CALLS: Final = ("run", "code")


class EarlySignals:
    """A signal handler that only notes which signals came (a list append
    is safe in a Python-level handler, which runs between bytecodes)."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def __call__(self, signum: int, frame: object) -> None:
        self.received.append(signum)

    def take(self) -> list[int]:
        """The signals noted so far, forgotten once taken."""
        taken, self.received = self.received, []
        return taken


EARLY: Final = EarlySignals()
"""The one handler :func:`main` installs."""


def main() -> None:
    """Run the ``sandrail`` command line (``sandrail.cli.main``) after
    opening closed standard streams on ``/dev/null`` and, for ``run`` and
    ``code``, installing :data:`EARLY` for :data:`NOTED_SIGNALS`."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            # The lowest free descriptor: ``fd`` itself, as 0..fd-1 are open.
            os.open(os.devnull, os.O_RDWR)
    if sys.argv[1:2] and sys.argv[1] in _CALLS:
        for signum in NOTED_SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, EARLY)
    from sandrail.cli import main as command_line

    command_line()
