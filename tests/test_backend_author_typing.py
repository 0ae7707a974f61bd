"""A backend author's code, as the docs show it, passes ``mypy --strict``
with no ignore comment: the launcher's dispatch and cache, a transport,
both forms of ``BackendConformance.make_target`` and a marked ground truth."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

_ROOT = Path(__file__).resolve().parent.parent
_CHECKED = ("tests/typed_backend_example.py", "tests/toy_backend.py")


def test_a_backend_authors_code_type_checks_strictly_without_ignores() -> None:
    for name in _CHECKED:
        assert "type: ignore" not in (_ROOT / name).read_text(), name
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *_CHECKED],
        cwd=_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
