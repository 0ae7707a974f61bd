"""``sandrail local-e2b --help`` says what local-e2b does not do (issue
16). The how-to page's examples run in ``tests/test_docs.py``."""

from __future__ import annotations

from click.testing import CliRunner

from sandrail.cli.local_e2b import local_e2b


def test_the_help_says_what_local_e2b_does_not_do() -> None:
    text = CliRunner().invoke(local_e2b, ["--help"]).output
    for limit in ("templates", "pause", "snapshots", "PTYs", "NOT a security boundary"):
        assert limit in text
