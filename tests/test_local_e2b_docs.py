"""docs/howto/local-e2b.md: its Python examples run as written against a
local-e2b server (issue 16: the how-to for an offline E2B), and the help
text says what local-e2b does not do."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandrail._local_e2b_cli import local_e2b
from sandrail.local_e2b import serve

PAGE = Path(__file__).resolve().parent.parent / "docs" / "howto" / "local-e2b.md"


@pytest.mark.skipif(os.geteuid() != 0, reason="these tests assume real root (as CI)")
def test_issue16_the_how_to_python_examples_run_against_a_local_server() -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 3
    with serve() as server:
        outputs = []
        for block in blocks:
            done = subprocess.run(
                [sys.executable, "-c", block],
                env={**os.environ, **server.env},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            outputs.append(done.stdout)
    assert outputs[1] == "hello\n\n"  # print() of "hello\n"


def test_issue16_the_help_says_what_local_e2b_does_not_do() -> None:
    text = CliRunner().invoke(local_e2b, ["--help"]).output
    for limit in ("templates", "pause", "snapshots", "PTYs", "NOT a security boundary"):
        assert limit in text
