"""The command line on the simulator."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandrail.cli import main


def invoke(
    *args: str, input: str | None = None, env: dict[str, str] | None = None
) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), input=input, env=env)
    return result.exit_code, result.output


def test_run_prints_the_tool_result_as_json() -> None:
    code, out = invoke("run", "--", "echo", "hello", "world")
    assert code == 0
    result = json.loads(out)
    assert result["status"] == "ok"
    assert result["content"]["stdout"] == "hello world\n"


def test_run_background_returns_a_task_ref() -> None:
    code, out = invoke("run", "--background", "--indent", "0", "--", "sleep", "5")
    assert code == 0
    result = json.loads(out)
    assert result["content"]["command_status"] == "running"
    assert result["background_command_ref"]["task_id"] == result["content"]["task_id"]


def test_c2_the_same_operation_key_names_the_same_task() -> None:
    first = json.loads(invoke("run", "--operation-key", "k1", "--", "true")[1])
    second = json.loads(invoke("run", "--operation-key", "k1", "--", "true")[1])
    assert first["content"]["task_id"] == second["content"]["task_id"]
    other = json.loads(invoke("run", "--", "true")[1])
    assert other["content"]["task_id"] != first["content"]["task_id"]


def test_exit_status_follows_the_result_status() -> None:
    code, out = invoke("run", "--env", "1BAD=x", "--", "env")
    assert code == 1
    assert json.loads(out)["content"]["error_type"] == "e2b_command_arguments_invalid"


def test_bad_env_syntax_is_a_usage_error() -> None:
    code, out = invoke("run", "--env", "=VALUE", "--", "env")
    assert code == 2
    assert "must be NAME=VALUE or NAME" in out


@pytest.mark.parametrize("pair", ["=hunter2hunter2", "DB_PASSWORD:hunter2hunter2"])
def test_c17_a_malformed_env_pair_is_a_usage_error_that_never_echoes_it(pair: str) -> None:
    code, out = invoke("run", "--env", "A=1", "--env", pair, "--", "echo", "hi")
    assert code == 2
    assert "--env #2 " in out
    assert "hunter2" not in out


@pytest.mark.parametrize("indent", ["17", "100000000000000000000", "-1"])
def test_an_indent_out_of_range_is_a_usage_error_before_anything_runs(indent: str) -> None:
    code, out = invoke("run", "--indent", indent, "--", "echo", "hi")
    assert code == 2
    assert "0<=x<=16" in out
    assert '"status"' not in out


def test_code_runs_a_file_and_stdin(tmp_path: Path) -> None:
    snippet = tmp_path / "s.py"
    snippet.write_text("print('hi')\n", encoding="utf-8")
    code, out = invoke("code", str(snippet))
    assert code == 0
    assert json.loads(out)["content"]["language"] == "python"
    code, out = invoke("code", "--language", "sh", "-", input="echo hi\n")
    assert code == 0
    assert json.loads(out)["content"]["language"] == "bash"


def test_code_with_an_unsupported_language_is_an_error(tmp_path: Path) -> None:
    snippet = tmp_path / "s.rb"
    snippet.write_text("puts 1\n", encoding="utf-8")
    code, out = invoke("code", "--language", "ruby", str(snippet))
    assert code == 1
    assert json.loads(out)["content"]["error_type"] == "unsupported_language"


def test_code_with_a_missing_file_is_a_clear_usage_error(tmp_path: Path) -> None:
    code, out = invoke("code", str(tmp_path / "nope.py"))
    assert code == 2
    assert "cannot read" in out


@pytest.mark.parametrize("command", ["run", "code"])
def test_e2b_backend_without_a_key_says_what_is_missing(command: str) -> None:
    args = ["--backend", "e2b", "--", "true"] if command == "run" else ["--backend", "e2b", "-"]
    code, out = invoke(command, *args, input="", env={"E2B_API_KEY": ""})
    assert code == 2
    assert "E2B_API_KEY" in out


def test_help_reads_well() -> None:
    code, out = invoke("--help")
    assert code == 0
    for command in ("run", "code", "replay"):
        assert command in out


@pytest.mark.parametrize("width", [80, 50])
def test_help_shows_every_command_summary_whole(width: int) -> None:
    """``sandrail --help`` lists each command with its summary (the first
    sentence of its help) whole, wrapped to the terminal, never cut."""
    done = CliRunner().invoke(main, ["--help"], terminal_width=width)
    assert done.exit_code == 0
    listing = done.output.split("Commands:", 1)[1]
    assert "..." not in listing
    flowing = " ".join(listing.split())
    assert sorted(main.commands) == [
        "code",
        "local-e2b",
        "mcp",
        "migrate-record",
        "replay",
        "run",
        "simulate",
        "uncertain",
    ]
    for name, command in main.commands.items():
        paragraph = " ".join(inspect.cleandoc(command.help or "").split("\n\n")[0].split())
        summary = paragraph.split(". ")[0].rstrip(".") + "."
        assert len(summary) > 20, name
        assert f"{name} {summary}" in flowing, (name, summary)


@pytest.mark.parametrize("where", ["/dev/zero", "missing-dir/owned.jsonl", "."])
def test_c2_a_record_that_cannot_be_one_is_a_usage_error_before_anything_runs(
    where: str, tmp_path: Path
) -> None:
    """``--record /dev/full`` read an endless file into
    memory until the kernel killed it; a record in a missing directory made
    every call uncertain. Both are usage errors (exit 2), nothing run."""
    path = where if where.startswith("/") else str(tmp_path / where)
    done = subprocess.run(
        [sys.executable, "-m", "sandrail", "run", "--record", path, "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "--record" in done.stderr
