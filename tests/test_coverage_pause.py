"""The ``untraced`` marker really pauses coverage under pytest-xdist
(CI under 8 minutes without proving less).

pytest-cov's own ``no_cover`` marker does not pause under xdist (see
``tests/coverage_pause.py``), so this runs a real ``pytest -n 1 --cov`` on a
small project and checks, from inside the marked test and from the coverage
report, that nothing was traced while it ran, while the unmarked test next to
it was measured as usual. If pytest-cov or coverage change how they start
measurement, this fails instead of CI silently measuring (or slowing) again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

MEASURED = """\
def reached_by_the_marked_test():
    return "paused"


def reached_by_the_plain_test():
    return "measured"
"""

TESTS = """\
import sys
import threading

import pytest

import measured


@pytest.mark.untraced
def test_marked():
    assert sys.gettrace() is None
    assert threading.gettrace() is None
    assert measured.reached_by_the_marked_test() == "paused"


def test_plain():
    assert sys.gettrace() is not None
    assert measured.reached_by_the_plain_test() == "measured"
"""

INI = """\
[pytest]
markers =
    untraced: runs with coverage paused
"""


def test_untraced_tests_run_with_coverage_paused_under_xdist(tmp_path: Path) -> None:
    """Under ``-n 1 --cov`` a test marked ``untraced`` runs with no trace
    function (main thread and new threads) and its lines are not measured;
    the unmarked test is traced and measured, so the pause is restored."""
    (tmp_path / "measured.py").write_text(MEASURED)
    (tmp_path / "test_pause.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text(INI)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COV_", "COVERAGE_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(tmp_path)])
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.coverage_pause",
            "-p",
            "no:cacheprovider",
            "-n",
            "1",
            "--cov=measured",
            "--cov-branch",
            "--cov-report=json:cov.json",
            "test_pause.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout, run.stdout

    report = json.loads((tmp_path / "cov.json").read_text())
    executed = set(report["files"]["measured.py"]["executed_lines"])
    # Line 2 is the marked test's function body, line 6 the plain test's.
    assert 6 in executed, report["files"]["measured.py"]
    assert 2 not in executed, report["files"]["measured.py"]
