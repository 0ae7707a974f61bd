"""The documentation (README.md and the site in docs/): every code
block runs, the README's two commands are what CI and a fresh clone need,
and the reference pages agree with the code they describe.

- Python blocks run in page order, one namespace per page, in a fresh
  working directory; a function a page defines named ``test_*`` is then
  called, as pytest would (a how-to's test must pass, not only compile).
- Shell blocks: every line that starts with ``sandrail`` runs (offline:
  the simulator, a recording); other lines (``pip install``, ``export``)
  are instructions for the reader and are not run.
- A block that must not run says so on its first line, visibly to the
  reader: ``# not run: <why>``. The convention is checked to stay rare.
- JSON blocks parse.

The checks that need the site built (``mkdocs build --strict``: links,
anchors, every docstring rendering, no resource from another host) run in
CI's docs step, not here: this module needs only the test extra.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.postgres_server import private_server

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(path for path in DOCS.rglob("*.md") if "_hooks" not in path.parts)
README = ROOT / "README.md"
RUN_PAGES = [README, *PAGES]
"""Every page whose blocks run: the README and the site's pages."""

_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.M | re.S,
)
_NOT_RUN = re.compile(r"^#\s*not run:\s*(?P<reason>.*\S)?\s*$")

RUN_LANGUAGES = {"python", "bash"}
"""Blocks in these languages run."""
SHOWN_LANGUAGES = {"json", "yaml", "toml", "text", "mermaid"}
"""Blocks in these languages are shown, not run (JSON is parsed)."""

MAX_NOT_RUN_SHARE = 0.2
"""At most this share of the runnable blocks may be marked ``# not run:``."""


class Block:
    """One fenced code block of a page."""

    def __init__(self, page: Path, line: int, lang: str, body: str) -> None:
        self.page = page
        self.line = line
        self.lang = lang
        self.body = body

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def not_run_reason(self) -> str | None:
        """The reason a ``# not run:`` first line gives ("" when it gives
        none); None for a block that runs."""
        first = self.body.lstrip("\n").split("\n", 1)[0]
        match = _NOT_RUN.match(first.strip())
        if match is None:
            return None
        return match.group("reason") or ""


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        indent = match.group("indent")
        body = "".join(
            line[len(indent) :] if line.startswith(indent) else line
            for line in match.group("body").splitlines(keepends=True)
        )
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(page, line, match.group("lang"), body))
    return found


ALL_BLOCKS = [block for page in RUN_PAGES for block in blocks(page)]


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@contextlib.contextmanager
def _working_directory(path: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


# -- the blocks run ----------------------------------------------------------------


def test_docs_have_pages_and_blocks() -> None:
    """The checks below look at something (a moved docs/ would pass them all)."""
    assert len(PAGES) >= 20
    assert sum(block.lang == "python" for block in ALL_BLOCKS) >= 10


NEEDS_POSTGRES = {"dbos.md": "DBOS_SYSTEM_DATABASE_URL"}
"""Pages whose blocks need a PostgreSQL server (one of their own is started),
and the variable that names its database to them."""

PYTHON_PAGES = sorted(
    {block.page for block in ALL_BLOCKS if block.lang == "python" and block.not_run_reason is None}
)


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=_page_id)
def test_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Python block of the page runs, in order, in one
    namespace; then every ``test_*`` function the page defines passes."""
    for name in ("E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DOMAIN"):
        monkeypatch.delenv(name, raising=False)
    namespace: dict[str, Any] = {"__name__": f"docs.{page.stem.lower()}"}
    with contextlib.ExitStack() as services, _working_directory(tmp_path):
        if page.name in NEEDS_POSTGRES:
            server = services.enter_context(private_server())
            monkeypatch.setenv(NEEDS_POSTGRES[page.name], server.url(server.fresh_database()))
        for block in blocks(page):
            if block.lang != "python" or block.not_run_reason is not None:
                continue
            code = compile("\n" * (block.line) + block.body, str(page), "exec")
            exec(code, namespace)
        tests = [value for key, value in namespace.items() if key.startswith("test_")]
        for test in tests:
            if callable(test):
                test()


def _shell_lines(block: Block) -> list[str]:
    """The ``sandrail ...`` lines of a shell block, continuation lines joined."""
    joined = block.body.replace("\\\n", " ")
    lines = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line.startswith("sandrail ") or line == "sandrail":
            lines.append(line)
    return lines


SHELL_BLOCKS = [
    block
    for block in ALL_BLOCKS
    if block.lang == "bash" and block.not_run_reason is None and _shell_lines(block)
]


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=lambda block: block.where)
def test_shell_blocks_sandrail_lines_run(block: Block, tmp_path: Path) -> None:
    """Every ``sandrail`` command of a shell block exits 0, run
    by bash in a fresh directory, in order (a line may use a file an
    earlier one wrote). Offline: no E2B variables reach it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    shutil.copytree(ROOT / "tests" / "golden", tmp_path / "tests" / "golden")
    for line in _shell_lines(block):
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, (
            f"{block.where}: {line!r} exited {done.returncode}:\n{done.stderr}"
        )


def test_json_blocks_parse() -> None:
    """A configuration a reader copies is valid JSON."""
    broken = []
    for block in ALL_BLOCKS:
        if block.lang == "json":
            try:
                json.loads(block.body)
            except ValueError as exc:
                broken.append(f"{block.where}: {exc}")
    assert not broken


def test_every_block_names_a_known_language() -> None:
    """A block without a language (or an unknown one) would be
    neither run nor checked; none hides that way."""
    unknown = [
        f"{block.where} ({block.lang or 'no language'})"
        for block in ALL_BLOCKS
        if block.lang not in RUN_LANGUAGES | SHOWN_LANGUAGES
    ]
    assert not unknown


def test_not_run_blocks_are_rare_and_say_why() -> None:
    """The ``# not run:`` convention is used sparingly, each time
    with a reason, and only on blocks that would otherwise run."""
    runnable = [block for block in ALL_BLOCKS if block.lang in RUN_LANGUAGES]
    marked = [block for block in runnable if block.not_run_reason is not None]
    assert all(len(block.not_run_reason or "") >= 10 for block in marked), [
        block.where for block in marked
    ]
    assert len(marked) <= MAX_NOT_RUN_SHARE * len(runnable), [block.where for block in marked]
    shown = [b.where for b in ALL_BLOCKS if b.lang in SHOWN_LANGUAGES and b.not_run_reason]
    assert not shown


def test_not_run_convention_is_recognised() -> None:
    """The marker the reader sees is the one the tests skip on, and nothing
    else is skipped (a regression guard for the parser above)."""
    page = DOCS / "tutorial.md"
    block = Block(page, 1, "python", "# not run: needs an E2B API key\nimport os\n")
    assert block.not_run_reason == "needs an E2B API key"
    assert Block(page, 1, "python", "# not running this is fine\n").not_run_reason is None
    assert Block(page, 1, "python", "x = 1  # not run: here\n").not_run_reason is None


# -- the reference agrees with the code --------------------------------------------

PUBLIC_MODULES = (
    "sandrail",
    "sandrail.interpreters.simulator",
    "sandrail.interpreters.e2b",
    "sandrail.interpreters.launcher",
    "sandrail.interpreters.replay",
    "sandrail.interpreters.artifacts",
    "sandrail.records",
    "sandrail.testing",
    "sandrail.testing.conformance",
    "sandrail.testing.strategies",
    "sandrail.adapters",
    "sandrail.adapters.mcp",
    "sandrail.adapters.openai_agents",
    "sandrail.adapters.pydantic_ai",
    "sandrail.adapters.anthropic",
    "sandrail.adapters.langchain",
    "sandrail.adapters.deepagents",
    "sandrail.adapters.google_adk",
    "sandrail.adapters.kit",
    "sandrail.integrations",
    "sandrail.integrations.temporal",
    "sandrail.integrations.dbos",
    "sandrail.local_e2b",
)
"""The modules whose ``__all__`` is sandrail's public surface."""

_DIRECTIVE = re.compile(
    r"^::: (?P<path>[\w.]+)[ \t]*\n(?P<options>(?:[ \t]+.*\n|\n(?=[ \t]))*)", re.M
)


def _documented() -> dict[str, list[str] | None]:
    """Each ``::: path`` of the reference, with its ``members:`` list if any."""
    found: dict[str, list[str] | None] = {}
    for page in (DOCS / "reference").glob("*.md"):
        for match in _DIRECTIVE.finditer(page.read_text(encoding="utf-8")):
            options = match.group("options")
            members = re.findall(r"^\s+- (\w+)\s*$", options, re.M)
            found[match.group("path")] = members or None
    return found


def _resolve(path: str) -> Any:
    try:
        return importlib.import_module(path)
    except ImportError:
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)


def test_reference_documents_every_public_name() -> None:
    """The API reference covers every public name: each name in
    the ``__all__`` of a public module is rendered by a ``::: path``
    directive, as itself or as the same object under another public path."""
    documented = _documented()
    covered: list[Any] = []
    for path, members in documented.items():
        target = _resolve(path)
        covered.append(target)
        names = members if members is not None else getattr(target, "__all__", ())
        if isinstance(target, type(sys)) and path in PUBLIC_MODULES:
            covered.extend(getattr(target, name) for name in names)
    missing = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            if name.startswith("__"):
                continue
            value = getattr(module, name)
            if not any(value is seen for seen in covered):
                missing.append(f"{module_name}.{name}")
    assert not missing


def _public_modules_in(package: str) -> set[str]:
    """Every module of ``package``, at any depth, whose path has no part
    beginning with ``_``."""
    found = set()
    for info in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.add(info.name)
    return found


def test_every_public_module_is_held_to_the_reference() -> None:
    """A new public module (an adapter, an integration, an interpreter) is
    among those whose names the reference must cover, without being listed
    by hand first. The command line has its own page (its commands are
    checked there), and the core's names are documented where a harness
    meets them."""
    found = _public_modules_in("sandrail") | _public_modules_in("sandrail.interpreters")
    found -= {name for name in found if name == "sandrail.cli" or name.startswith("sandrail.cli.")}
    assert found <= set(PUBLIC_MODULES), sorted(found - set(PUBLIC_MODULES))


def test_reference_directives_name_public_paths() -> None:
    """The reference names public paths only (``sandrail.Toolset``,
    never a private module), so moving private modules cannot break it."""
    private = [
        path for path in _documented() if any(part.startswith("_") for part in path.split("."))
    ]
    assert not private


def test_the_toolset_reference_lists_every_public_member() -> None:
    """The Toolset reference lists its members (some are defined on its
    private bases, and the list keeps them in the order a reader meets
    them), so a public member missing from the list would go unseen."""
    import sandrail

    listed = _documented()["sandrail.Toolset"]
    public = {
        name
        for klass in sandrail.Toolset.__mro__[:-1]
        for name in vars(klass)
        if not name.startswith("_")
    }
    assert listed is not None
    assert sorted(public - set(listed)) == []
    assert sorted(set(listed) - public) == []


def _table_codes(page: Path) -> list[str]:
    return re.findall(r"^\| `([a-z0-9_]+)` \|", page.read_text(encoding="utf-8"), re.M)


def test_error_codes_page_lists_every_error_code_once() -> None:
    """The error-code table and ``sandrail.ErrorCode`` are equal."""
    from sandrail import ErrorCode

    listed = _table_codes(DOCS / "reference" / "errors.md")
    statuses = {"ok", "error", "uncertain", "approval_required"}
    codes = [code for code in listed if code not in statuses | {"error_type"}]
    assert len(codes) == len(set(codes))
    assert set(codes) == {code.value for code in ErrorCode}


def test_statuses_table_lists_every_status() -> None:
    """The status table names exactly the statuses a result has."""
    import typing

    from sandrail.core import Status

    listed = set(_table_codes(DOCS / "reference" / "errors.md"))
    assert set(typing.get_args(Status)) <= listed


def test_cli_page_states_every_commands_exit_status() -> None:
    """Every command has an exit-status row, and where the
    command's own help states its exit status, the row says the same."""
    from sandrail.cli import main

    text = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| (`[^|]+`) \| (.+) \|$", text, re.M))
    by_command = {
        name.strip("` "): statuses for names, statuses in rows.items() for name in names.split(",")
    }
    assert set(by_command) == set(main.commands)
    for name, command in main.commands.items():
        stated = re.search(r"Exit status: (.*?)\.?$", command.help or "", re.M | re.S)
        if stated is None:
            continue
        for number, meaning in re.findall(r"(\d) ([^,;]+)", stated.group(1)):
            assert f"{number} " in by_command[name], (name, number, meaning)
    group_help = " ".join((main.help or "").split())
    for number in re.findall(
        r"(\d) (?:ok|error|bad usage|uncertain|approval required)", group_help
    ):
        assert f"{number} " in by_command["run"]


def test_explanation_cites_test_files_that_exist() -> None:
    """Every ``tests/...`` path the pages cite as proof exists, and
    every contract line cited as tested by ``test_cN_*`` has such tests."""
    text = "\n".join(page.read_text(encoding="utf-8") for page in PAGES)
    cited = set(re.findall(r"`(tests/[\w/]+\.py)`", text))
    assert cited
    assert sorted(path for path in cited if not (ROOT / path).is_file()) == []
    families = set(re.findall(r"`test_(c\d+)_\*`", text))
    sources = "\n".join(path.read_text(encoding="utf-8") for path in (ROOT / "tests").glob("*.py"))
    assert sorted(f for f in families if f"def test_{f}_" not in sources) == []


def test_every_page_is_in_the_navigation() -> None:
    """A page outside the navigation would be found by no reader;
    a page the navigation names must exist."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config[config.index("\nnav:") :]
    named = set(re.findall(r":\s*([\w/.-]+\.md)\s*$", nav, re.M))
    pages = {str(page.relative_to(DOCS)) for page in PAGES}
    assert named == pages


def test_shell_lines_run_the_installed_command_line() -> None:
    """The shell-block runner finds ``sandrail`` (a runner that found
    nothing would pass every block)."""
    assert SHELL_BLOCKS
    assert shutil.which("sandrail", path=str(Path(sys.executable).parent)) is not None


# -- the README's front page ------------------------------------------------------------

README_MAX_LINES = 150


def _readme_commands() -> list[str]:
    """The README's one-line commands that start from a fresh clone."""
    return [
        block.body.strip()
        for block in blocks(README)
        if block.lang == "bash" and block.body.startswith("python3 -m venv .venv && ")
    ]


def test_readme_is_a_front_page() -> None:
    """The README is a front page of at most 150 lines."""
    assert len(README.read_text(encoding="utf-8").splitlines()) <= README_MAX_LINES


def test_readme_first_command_installs_only_the_package_and_runs_the_campaign() -> None:
    """The first command sets up a fresh clone with no extra (what
    ``sandrail simulate`` needs) and runs the campaign on the simulator."""
    first, _ = _readme_commands()
    steps = [step.strip() for step in first.split("&&")]
    assert steps == [
        "python3 -m venv .venv",
        ". .venv/bin/activate",
        "pip install -e .",
        "sandrail simulate",
    ]


def _ci_test_command() -> str:
    """The test command ``.ci/run`` runs, rebuilt from the lines it executes
    (the ``export`` of the hypothesis profile, then the ``pytest`` line)."""
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    (profile,) = re.findall(r"^export HYPOTHESIS_PROFILE=(\w+)$", script, re.M)
    (pytest_line,) = re.findall(r"^python -m pytest\b.*$", script, re.M)
    return f"HYPOTHESIS_PROFILE={profile} {pytest_line.strip()}"


def test_readme_second_command_runs_exactly_what_ci_runs() -> None:
    """The second command installs the test extra and runs exactly
    the test command of ``.ci/run`` (and ``.ci/run`` installs that extra)."""
    _, second = _readme_commands()
    steps = [step.strip() for step in second.split("&&")]
    assert steps == [
        "python3 -m venv .venv",
        ". .venv/bin/activate",
        "pip install -e '.[test]'",
        _ci_test_command(),
    ]
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^pip install --quiet -e '\.\[test\]'$", script, re.M)


def test_ci_test_command_is_read_from_the_lines_ci_executes() -> None:
    """The parser above reads what ``.ci/run`` runs today (a parser that
    found another line would let the README drift)."""
    assert _ci_test_command() == "HYPOTHESIS_PROFILE=ci python -m pytest -n auto --cov"


_TEST_ONLY_IMPORTS = """
import importlib.abc, sys
EXTRAS_ONLY = {blocked!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in EXTRAS_ONLY:
            raise ImportError(f"No module named {{name!r}} (an extra's, blocked)")
sys.meta_path.insert(0, Block())
from sandrail.cli import main
main(["simulate", "--schedules", "4", "--shard", "0/60", "--workers", "1", "--json"])
"""
EXTRAS_ONLY_MODULES = (
    "hypothesis",
    "hypothesis_jsonschema",
    "pytest",
    "_pytest",
    "rfc8785",
    "e2b",
    "uvicorn",
    "h11",
    "multipart",
    "python_multipart",
    "inotify_simple",
    "mcp",
    "agents",
    "pydantic_ai",
    "anthropic",
    "psycopg",
    "psycopg_pool",
    "opentelemetry",
)
"""Top-level modules only an extra installs (the README's first command
installs none)."""


def test_readme_first_command_needs_no_extra() -> None:
    """``sandrail simulate`` runs with no module of any extra
    importable, as after ``pip install -e .`` (a small shard of the
    campaign, in a process of its own; its worker is forked and keeps the
    block)."""
    code = _TEST_ONLY_IMPORTS.format(blocked=set(EXTRAS_ONLY_MODULES))
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] is True
    assert report["plans"] > 0
    assert set(report["violations"].values()) == {0}


def test_readme_run_command_runs_on_the_simulator() -> None:
    """The command-line call the README's example names works."""
    assert "`sandrail run -- echo hello`" in README.read_text(encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "sandrail", "run", "--", "echo", "hello"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["content"]["stdout"] == "hello\n"


_NAMED_EXAMPLE = re.compile(r"(\[)?`(examples/[\w.]+\.py)`(?:\]\(([^)]+)\))?")


def test_pages_link_the_example_files_they_name() -> None:
    """A page that names an example file links it, and the link reaches the
    file in the built site (docs/_hooks/examples.py serves ``examples/``
    there): the reader can open the whole program the page shows part of."""
    problems = []
    for page in PAGES:
        for match in _NAMED_EXAMPLE.finditer(page.read_text(encoding="utf-8")):
            name, target = match.group(2), match.group(3)
            if not (ROOT / name).is_file():
                problems.append(f"{page.name}: {name} does not exist")
            elif target is None:
                problems.append(f"{page.name}: {name} is named, not linked")
            elif (page.parent / target).resolve() != (DOCS / name).resolve():
                problems.append(f"{page.name}: the link to {name} is {target}")
    assert problems == []


def test_readme_links_name_files_that_exist() -> None:
    """The README's relative links (into docs/, read on GitHub or
    in a clone) name files that exist."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    local = [link for link in links if "://" not in link]
    assert local
    assert sorted(link for link in local if not (ROOT / link).exists()) == []


def test_readme_names_the_mermaid_release_the_build_uses() -> None:
    """The README's command to serve the site fetches the Mermaid
    release the build hook expects."""
    hook = (DOCS / "_hooks" / "offline.py").read_text(encoding="utf-8")
    (version,) = re.findall(r'^MERMAID_VERSION = "(.+)"$', hook, re.M)
    assert f"npm install --no-save mermaid@{version} " in README.read_text(encoding="utf-8")


_UNWRITTEN = re.compile(r"\b(TODO|TBD|FIXME|to be written|placeholder|coming soon)\b", re.I)


def test_no_page_is_left_unwritten() -> None:
    """No page of the README or the site says it is still to be
    written."""
    unwritten = [
        f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
        for page in RUN_PAGES
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if _UNWRITTEN.search(line)
    ]
    assert unwritten == []


def _library_sources() -> str:
    return "\n".join(
        path.read_text(encoding="utf-8")
        for folder in ("sandrail", "core", "interpreters")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if "local_e2b" not in path.parts or folder == "sandrail"
    )


def test_docstrings_name_only_pages_and_readme_sections_that_exist() -> None:
    """The Toolset reference pointed at the README's "Retries, restarts and
    threads", a section long gone: every ``docs/...md`` page a docstring
    names exists, and every README section it names is a heading there."""
    sources = _library_sources()
    pages = set(re.findall(r"``(docs/[\w/.-]+\.md)", sources))
    assert pages
    assert sorted(page for page in pages if not (ROOT / page).is_file()) == []
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    headings = {line.lstrip("#").strip() for line in readme.splitlines() if line.startswith("#")}
    named = re.findall(r"README's\s+\"([^\"]+)\"", sources.replace("\n    ", " "))
    assert sorted(section for section in named if section not in headings) == []


def test_the_toolset_signature_names_its_five_required_arguments() -> None:
    """The reference renders the signature: every example passes these five,
    and they used to hide in ``**options``."""
    import inspect

    import sandrail

    parameters = inspect.signature(sandrail.Toolset).parameters
    for name in ("backend", "session_id", "owner", "authorize", "assert_authority"):
        assert parameters[name].default is inspect.Parameter.empty, name
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY


EXPLAINED_FOLDERS = ("sandrail", "core", "interpreters", "tests", "benchmarks", "examples", ".ci")
"""The folders whose code, comments and tests must explain themselves."""

_UNEXPLAINED = re.compile(
    "|".join(
        (
            # A design document the repository does not hold, or its sections.
            "DESIGN" + r"(?:\.md|\s*\u00a7)",
            "\u00a7" + r"\s*\d",
            # An issue number, in prose ("issue N", "Issue #N", "issue-N") or in a
            # name ("test_issueN_..."); an upstream tracker's URL (".../issues/N")
            # is fine.
            r"(?<![A-Za-z])[Ii]ssue[ _-]?#?\d+",
            # A bare "#N" where it stands for an issue or a pull request: a merge
            # subject's "(#N)", or "fixes #N", "see #N". A shell's "${#N}" and a
            # message's "--env #N" (the Nth option) are not.
            r"\(#\d+\)",
            r"\b(?:PR|[Ff]ix(?:es|ed)?|[Cc]los(?:es|ed)|[Rr]esolve[sd]?|[Ss]ee|after|since)\s+#\d+",
        )
    )
)


def _tracked_files(folders: tuple[str, ...]) -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", *folders],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode("utf-8")
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file
        return sorted(
            path
            for folder in folders
            for path in (ROOT / folder).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        )
    return [ROOT / name for name in listed.split("\0") if name]


def _unexplained(path: Path, text: str) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{number}: {match.group(0)}"
        for number, line in enumerate(text.splitlines(), 1)
        for match in _UNEXPLAINED.finditer(line)
    ]


def test_the_project_explains_itself() -> None:
    """Code, docstrings, comments and tests say what they mean and link the
    docs pages for the reasoning (``docs/explanation/contract.md`` names the
    contract lines tests are named after): no section of a design document
    the repository does not hold, no issue number. Every hit is listed as
    file:line."""
    hits = []
    for path in _tracked_files(EXPLAINED_FOLDERS):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):  # binary, or deleted in the work tree
            continue
        hits.extend(_unexplained(path, text))
    assert hits == [], "\n".join(hits)


def test_the_tutorial_lists_the_tools_a_toolset_offers() -> None:
    """The tutorial names every tool of a session's ``Toolset``: its list
    follows the tool records, so a new record fails here until the page
    names it (and a removed one, until the page forgets it)."""
    from tests.embed_rig import toolset as a_toolset

    page = (DOCS / "tutorial.md").read_text(encoding="utf-8")
    found = re.search(r"every sandrail tool for one session \(([^)]*)\)", page)
    assert found is not None, "the tutorial no longer says what a Toolset holds"
    listed = re.findall(r"`([a-z_]+)`", found.group(1))
    toolset = a_toolset()
    assert sorted(listed) == sorted(toolset.names), (
        f"docs/tutorial.md lists {listed}; a Toolset offers {list(toolset.names)}"
    )


def test_the_pages_that_list_the_fault_kinds_list_every_one() -> None:
    """The how-to's list of kinds (by name) and the campaign page's (in
    words) name every kind of the fault table, so a new kind cannot leave
    them stale."""
    from sandrail.interpreters.simulator import FaultKind

    harness = (DOCS / "howto" / "test-your-harness.md").read_text(encoding="utf-8")
    listed = harness[harness.index("Kinds: ") : harness.index("has the table of what each does")]
    campaign = " ".join((DOCS / "howto" / "campaign-in-ci.md").read_text(encoding="utf-8").split())
    for kind in FaultKind:
        assert f"`{kind.name}`" in listed, kind
        assert kind.value.replace("_", " ") in campaign, kind
