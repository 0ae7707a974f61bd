"""Every example in examples/ runs offline as written, the
approval example of each framework included."""

from __future__ import annotations

import runpy
from pathlib import Path

import mcp.client.stdio  # noqa: F401
import pytest

# The MCP SDK's stdio client binds ``sys.stderr`` as a default argument when it
# is first imported. Imported here, at collection (before any test captures
# output), it keeps the real one; imported first inside an example run under
# ``capfd`` (approval_mcp.py), it would keep that test's capture, closed after it.

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

EXPECTED = {
    "anthropic_messages.py": ["tool_result: hello", "final: The sandbox said hello."],
    "mcp_stdio.py": [
        "tools: sandbox_status, run_command",
        "ok 'hello\\n' False",
        "ok 'hello\\n' True",
    ],
    "openai_agents_tools.py": ["tool output: hello", "final: The sandbox said hello."],
    "pydantic_ai_tools.py": ["run_command -> True", "sandbox_status -> True"],
    "approval_anthropic.py": [
        "asking a person about: run_command",
        "tool_result: ok",
        "final: The sandbox said: deploying",
    ],
    "approval_mcp.py": [
        "asked: The agent asks to run run_command",
        "on sandrail's in-memory simulator",
        "approved and ran: ok deploying",
    ],
    "approval_openai_agents.py": [
        "asking a person about: run_command",
        "resumed: ok deduplicated: False",
        "resumed again: ok deduplicated: True",
        "final: Deployed.",
    ],
    "approval_pydantic_ai.py": [
        "asking a person about: run_command",
        "approved and ran: ok deploying",
    ],
}


KIT_EXAMPLES = ("test_my_backend.py", "test_my_harness.py")
"""Test files for pytest, run by tests/test_testing_kit.py."""

SHARED = ("_approval_setup.py",)
"""Modules the examples import (not run alone): fewer repeated lines."""


def test_every_example_is_checked() -> None:
    names = sorted(path.name for path in EXAMPLES.glob("*.py"))
    assert names == sorted([*EXPECTED, *KIT_EXAMPLES, *SHARED])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(
    name: str, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # As `python examples/NAME` runs it: its own folder first on the path.
    monkeypatch.syspath_prepend(str(EXAMPLES))
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    printed = capfd.readouterr().out
    for line in EXPECTED[name]:
        assert line in printed
