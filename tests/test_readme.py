"""The README's examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_python_examples_run(capsys: object) -> None:
    blocks = python_blocks()
    assert blocks, "the README has no python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {"__name__": "readme"})


def test_readme_quick_start_command_runs_on_the_simulator() -> None:
    text = README.read_text(encoding="utf-8")
    assert "sandrail run -- echo hello" in text
    done = subprocess.run(
        [sys.executable, "-m", "sandrail", "run", "--", "echo", "hello"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert '"stdout": "hello\\n"' in done.stdout
