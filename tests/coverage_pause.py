"""Run tests marked ``untraced`` with coverage paused.

A few property tests cost most of CI's time, and under ``--cov`` they cost
about twice what they cost untraced, yet every branch of ``sandrail.core``
they reach is also reached by a lighter test. Marking them ``untraced`` keeps
them proving what they prove, at full example counts, without paying for
measurement that adds nothing to the coverage report.

Strategy: pytest-cov has a ``no_cover`` marker for this, but under
pytest-xdist it does not pause anything. pytest-cov 7.1 starts two
``coverage.Coverage`` objects in each worker (one in
``pytest_load_initial_conftests``, one for the worker in
``pytest_sessionstart``). coverage keeps a stack of collectors, and
``Coverage.stop()`` on the current one pops it and *resumes the one below*,
so ``no_cover`` (which stops only the current one) swaps one tracer for the
other. This plugin stops every started ``Coverage``, newest first, through
coverage's public ``Coverage.current()``, and starts them again in the
opposite order afterwards, which rebuilds the same stack. Without pytest-cov
(or without ``--cov``) nothing is started and the pause does nothing.

Only the test call is paused; setup and teardown stay measured. Threads that
a paused test starts are not traced either (coverage also clears
``threading.settrace`` while paused).

``tests/test_coverage_pause.py`` proves in a real ``-n 1 --cov`` run that a
marked test runs with no trace function and leaves no lines in the report.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

__all__ = ["coverage_paused"]

MARKER = "untraced"


@contextlib.contextmanager
def coverage_paused() -> Iterator[None]:
    """Stop every started coverage measurement for the ``with`` body, then
    start them again in the order they were started.

    Failure behaviour: if the body raises, measurement is restarted all the
    same and the exception propagates. Without coverage installed, or with
    nothing started, it does nothing.
    """
    try:
        import coverage
    except ImportError:  # pragma: no cover - the test extra installs coverage
        yield
        return
    stopped: list[coverage.Coverage] = []
    while (current := coverage.Coverage.current()) is not None:
        current.stop()
        stopped.append(current)
    try:
        yield
    finally:
        for cov in reversed(stopped):
            cov.start()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Run the test's call phase with coverage paused when it is marked."""
    if item.get_closest_marker(MARKER) is None:
        return (yield)
    with coverage_paused():
        return (yield)
