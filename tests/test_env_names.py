"""C17: env names whose value the loader, the C library or bash would print.

Three parts, one per claim in ``sandrail.core._env``:

- every reserved name (and examples of every reserved prefix) is refused by
  the port before any side effect, naming the field and never the value;
- on this machine's real bash, glibc and perl, each name whose leak can be
  shown here does print a short value, and the same command without the
  name does not (so the rule rests on observed behaviour, and a change in
  that behaviour shows up here);
- :data:`ENV_NAME_PATTERN`, the rule as a schema states it, accepts exactly
  the names :func:`env_name_problem` accepts, and is an ECMA-262 regex that
  decides the same way there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import string
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandrail.core import ErrorCode, canonical_json
from sandrail.core._env import (
    ENV_NAME_PATTERN,
    RESERVED_ENV_NAMES,
    RESERVED_ENV_PREFIXES,
    SHELL_OWNED_ENV_NAMES,
    env_name_problem,
)
from tests.rig import Rig

VALUE: Final = "zq7Q"
"""A short value: below the masking length, so only the rule keeps it out."""

REASON: Final = "dynamic loader, the C library or the shell"

PREFIX_EXAMPLES: Final[dict[str, tuple[str, ...]]] = {
    "BASH": ("BASH_ENV", "BASH_XTRACEFD", "BASH_COMPAT", "BASHOPTS", "BASH_ARGV0"),
    "LD_": ("LD_PRELOAD", "LD_AUDIT", "LD_DEBUG", "LD_LIBRARY_PATH"),
    "LC_": ("LC_ALL", "LC_CTYPE", "LC_MESSAGES", "LC_TIME"),
    "GLIBC_": ("GLIBC_TUNABLES",),
    "MALLOC_": ("MALLOC_CHECK_", "MALLOC_ARENA_MAX", "MALLOC_PERTURB_"),
}

REFUSED: Final = sorted(
    RESERVED_ENV_NAMES | {name for names in PREFIX_EXAMPLES.values() for name in names}
)

ALLOWED: Final = (
    "TOKEN",
    "API_KEY",
    "PIN",
    "HOME",
    "PATH",
    "TZ",
    "TMPDIR",
    "TERM",
    "IFS",
    "ENV",
    "MAIL",
    "LOCPATH",
    "PYTHONPATH",
    "NODE_ENV",
    "LANGS",
    "LD",
    "LDFLAGS",
    "LC",
    "XBASH",
    "MY_LD_PRELOAD",
    "ld_preload",
    "lc_all",
    "bash_env",
    "Shlvl",
    "_",
)


def test_c17_every_reserved_prefix_has_examples_that_start_with_it() -> None:
    assert set(PREFIX_EXAMPLES) == set(RESERVED_ENV_PREFIXES)
    for prefix, names in PREFIX_EXAMPLES.items():
        assert names
        assert all(name.startswith(prefix) for name in names)


@pytest.mark.parametrize("tools", ["command", "code"])
@pytest.mark.parametrize("name", REFUSED)
def test_c17_a_name_that_can_print_its_value_is_refused_before_any_side_effect(
    name: str, tools: str
) -> None:
    rig = Rig(tools="command" if tools == "command" else "code")
    env = {"API_TOKEN": "fine-value", name: VALUE}
    if tools == "command":
        result = rig.run("run_command", {"command": "env", "env": env})
    else:
        result = rig.run(rig.code_tool, {"code": "print(1)", "language": "python", "env": env})
    assert result.status == "error", result.content
    assert result.content["error_type"] == ErrorCode.ARGUMENTS_INVALID.value
    assert result.content["executed"] is False
    (problem,) = result.content["problems"]
    assert problem["field"] == f"arguments.env.{name}"
    assert REASON in problem["reason"]
    assert VALUE.encode() not in canonical_json(result.content)
    assert rig.sim.effects_seen == []


@pytest.mark.parametrize("name", ALLOWED)
def test_c17_names_that_print_no_value_on_their_own_are_accepted(name: str) -> None:
    assert env_name_problem(name) is None
    assert re.fullmatch(ENV_NAME_PATTERN, name)


def test_c17_an_accepted_name_launches() -> None:
    rig = Rig()
    result = rig.run("run_command", {"command": "env", "env": {"IFS": VALUE, "TZ": "UTC"}})
    assert result.status == "ok", result.content
    assert rig.sim.launches == {rig.task_id(): 1}


# --- real bash: the leaks the rule exists for ---------------------------------


@attrs.frozen
class Leak:
    """Setting ``name`` to ``value`` makes ``script`` print ``witness``."""

    name: str
    script: str
    value: str = VALUE
    witness: str = VALUE


PERL_LOCALE = "perl -e 1"
LEAKS: Final = (
    # the dynamic loader, for every program (bash itself first)
    Leak("LD_PRELOAD", ":"),
    Leak("LD_AUDIT", ":"),
    Leak("LD_DEBUG", ":"),
    # the locale: bash at start-up, perl at start-up
    Leak("LC_ALL", ":"),
    *(
        Leak(name, PERL_LOCALE)
        for name in ("LC_CTYPE", "LC_COLLATE", "LC_MESSAGES", "LC_NUMERIC", "LC_TIME", "LANG")
    ),
    Leak("LANGUAGE", "LC_ALL=zz_ZZ perl -e 1"),
    # glibc's argp, on a usage message
    Leak("ARGP_HELP_FMT", "tar --no-such-option"),
    # bash, as it starts (BASH_ENV names a directory here)
    Leak("BASH_ENV", ":"),
    Leak("BASH_XTRACEFD", ":"),
    Leak("BASH_COMPAT", ":"),
    Leak("SHELLOPTS", ":"),
    Leak("SHLVL", ":", value="4817", witness="(4818)"),
    # bash's builtins and keywords
    Leak("CDPATH", "cd sub"),
    Leak("OLDPWD", "cd -"),
    Leak("PS3", "select choice in a; do break; done"),
    Leak("PS4", "set -x; true"),
    Leak("TIMEFORMAT", "time true"),
    Leak("FUNCNEST", "f() { (( $1 > 0 )) && f $(( $1 - 1 )); }; f 60", value="48", witness="(48)"),
)

_BASE_ENV: Final = ("PATH=/usr/local/bin:/usr/bin:/bin", "USER=user", "LOGNAME=user")


@pytest.fixture(scope="module")
def sandbox_dir() -> Iterator[Path]:
    """A world-readable folder to run in: it holds ``zq7Q/sub`` (for CDPATH,
    OLDPWD and BASH_ENV, which print a directory's name) and the scripts."""
    folder = Path(tempfile.mkdtemp(prefix="sandrail-env-"))
    try:
        (folder / VALUE / "sub").mkdir(parents=True)
        for path in (folder, folder / VALUE, folder / VALUE / "sub"):
            path.chmod(0o755)
        yield folder
    finally:
        shutil.rmtree(folder)


def _run_bash(folder: Path, script: str, entry: str | None) -> str:
    """Run ``script`` as E2B's launcher does (a login bash given a script
    file, env from nothing but the entries), as a user other than root when
    we are root (bash ignores some names, PS4 among them, for root)."""
    path = Path(tempfile.mkstemp(dir=folder, suffix=".sh")[1])
    try:
        path.write_text(script + "\n")
        path.chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
        as_user = (
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            if os.geteuid() == 0
            else []
        )
        env = [*_BASE_ENV, f"HOME={folder}", *([entry] if entry else [])]
        completed = subprocess.run(
            [*as_user, "env", "-i", *env, "bash", "-l", "--", str(path)],
            cwd=folder,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=10,
            check=False,
        )
        return completed.stdout.decode("utf-8", "replace")
    finally:
        path.unlink()


@pytest.mark.parametrize("leak", LEAKS, ids=lambda leak: leak.name)
def test_c17_real_bash_prints_the_value_of_a_reserved_name(leak: Leak, sandbox_dir: Path) -> None:
    """The reason the name is refused: with it set, the command prints its
    (short) value without naming it; without it, it does not."""
    assert env_name_problem(leak.name) is not None
    with_name = _run_bash(sandbox_dir, leak.script, f"{leak.name}={leak.value}")
    without = _run_bash(sandbox_dir, leak.script, None)
    assert leak.witness in with_name, with_name
    assert leak.witness not in without, without


def test_c17_every_reserved_name_that_leaks_here_is_shown_leaking() -> None:
    """Only GLIBC_ and MALLOC_ (glibc 2.39 and later print them; this
    machine's 2.36 does not) rest on the cited source alone."""
    shown = {leak.name for leak in LEAKS}
    assert RESERVED_ENV_NAMES.issubset(shown)
    prefixes_shown = {p for p in RESERVED_ENV_PREFIXES if any(n.startswith(p) for n in shown)}
    assert set(RESERVED_ENV_PREFIXES) - prefixes_shown == {"GLIBC_", "MALLOC_"}


# --- the pattern a schema carries --------------------------------------------

_RESERVED_ENTRIES: Final = sorted(RESERVED_ENV_NAMES) + list(RESERVED_ENV_PREFIXES)
_NAME_CHARS: Final = string.ascii_letters + string.digits + "_"

names = st.one_of(
    st.text(max_size=12),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True),
    st.builds(
        lambda head, entry, tail: head + entry + tail,
        st.sampled_from(["", "", "X", "_", "1", " "]),
        st.sampled_from(_RESERVED_ENTRIES),
        st.text(alphabet=_NAME_CHARS + "\n -=", max_size=4),
    ),
)


@given(names)
def test_c17_the_pattern_and_the_port_accept_the_same_names(name: str) -> None:
    assert (re.fullmatch(ENV_NAME_PATTERN, name) is not None) == (env_name_problem(name) is None)


def test_c17_the_pattern_uses_only_syntax_ecma_262_shares_with_python() -> None:
    for python_only in ("(?<", "(?P", "\\A", "\\Z", "*+", "++", "?+", "}+", "(?i", "(?#"):
        assert python_only not in ENV_NAME_PATTERN
    assert ENV_NAME_PATTERN.startswith("^")
    assert ENV_NAME_PATTERN.endswith("$")
    # Every reserved entry is a plain name, so nothing in it needed escaping.
    assert all(re.fullmatch(r"[A-Z_][A-Z0-9_]*", entry) for entry in _RESERVED_ENTRIES)


_NODE_CHECK: Final = """
const { pattern, names } = JSON.parse(require("fs").readFileSync(0, "utf8"));
const verdicts = ["", "u"].map((flags) => {
  const regex = new RegExp(pattern, flags);
  return names.map((name) => regex.test(name));
});
process.stdout.write(JSON.stringify(verdicts));
"""


def test_c17_the_pattern_is_an_ecma_262_regex_that_decides_the_same() -> None:
    """Compiled by Node's ECMA-262 engine (with and without the ``u`` flag,
    as JSON Schema validators differ), it accepts exactly the names Python
    accepts. Node is on every machine of this project's kind."""
    node = shutil.which("node")
    assert node is not None, "this check needs Node.js (an ECMA-262 engine) on PATH"
    corpus = sorted(
        {
            *REFUSED,
            *ALLOWED,
            *(entry + suffix for entry in _RESERVED_ENTRIES for suffix in ("", "X", "_1", "\n")),
            *("X" + entry for entry in _RESERVED_ENTRIES),
            "",
            "1A",
            "A B",
            "A-B",
            "\nLANG",
            "LANG\n",
            "FOO\n",
            "ÉTÉ",
            "A\u00a0",
        }
    )
    completed = subprocess.run(
        [node, "-e", _NODE_CHECK],
        input=json.dumps({"pattern": ENV_NAME_PATTERN, "names": corpus}),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    expected = [re.fullmatch(ENV_NAME_PATTERN, name) is not None for name in corpus]
    plain, unicode = json.loads(completed.stdout)
    assert plain == expected
    assert unicode == expected


@pytest.mark.parametrize("name", sorted(SHELL_OWNED_ENV_NAMES))
def test_c5_a_name_bash_owns_is_refused_instead_of_silently_dropped(name: str) -> None:
    """bash sets these itself (or keeps them read-only): a command given one
    would never see its value, so the port says so before anything runs."""
    rig = Rig()
    result = rig.run("run_command", {"command": "env", "env": {name: "some-value"}})
    assert result.status == "error", result.content
    (problem,) = result.content["problems"]
    assert problem["field"] == f"arguments.env.{name}"
    assert "set by the shell itself" in problem["reason"]
    assert rig.sim.effects_seen == []
    assert not re.fullmatch(ENV_NAME_PATTERN, name)


@pytest.mark.parametrize("name", sorted(SHELL_OWNED_ENV_NAMES))
def test_bash_really_owns_each_shell_owned_name(name: str, tmp_path: Path) -> None:
    """The evidence: exported into bash as the launcher does, the value does
    not survive to the command."""
    script = tmp_path / "show.sh"
    script.write_text(f'printf "%s" "${{{name}}}"\n')
    shown = subprocess.run(
        ["bash", "-c", f'export {name}=zq7Qgiven 2>/dev/null; exec bash -- "$1"', "_", script],
        capture_output=True,
        text=True,
        timeout=10,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    ).stdout
    assert shown != "zq7Qgiven"
