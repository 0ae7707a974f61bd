"""Which environment variable names a command may be given (C17).

The ``env`` argument carries values the model must never see, and the port
masks them in output only from :data:`~sandrail.core.MIN_REDACTED_LENGTH`
characters up (a shorter one would mask ordinary text). So a name must not
make the machinery around the command print its value on its own: a short
value printed that way would reach the model in clear.

The rule: a name is refused when the dynamic loader, the C library or bash
acts on it and can print its value in output the command did not write
itself, as the command starts or in bash's own builtins and keywords. Where
one name in a namespace does that, the whole namespace is refused
(:data:`RESERVED_ENV_PREFIXES`), so the rule stays predictable; the rest are
single names (:data:`RESERVED_ENV_NAMES`).

Evidence, each line printed for a value ``zq7Q`` by ``bash -l -- <script>``
(Debian 12: bash 5.2.15, glibc 2.36, perl 5.36), unless a source is cited;
``tests/test_env_names.py`` shows each one that this machine reproduces:

- ``LD_``: ld.so, for every program it loads, bash first:
  ``ERROR: ld.so: object 'zq7Q' from LD_PRELOAD cannot be preloaded``,
  ``... cannot be loaded as audit interface`` (``LD_AUDIT``),
  ``warning: debug option `zq7Q' unknown`` (``LD_DEBUG``).
- ``LC_``, ``LANG``, ``LANGUAGE`` (locale(7)): bash at start-up
  ``warning: setlocale: LC_ALL: cannot change locale (zq7Q)``; perl at
  start-up ``LC_CTYPE = "zq7Q",`` for every category, ``LANG = "zq7Q"``,
  and ``LANGUAGE = "zq7Q",`` whenever the locale cannot be set.
- ``GLIBC_``, ``MALLOC_``: since glibc 2.39, ld.so prints a tunable it cannot
  parse, ``WARNING: ld.so: invalid GLIBC_TUNABLES `zq7Q': ignored.``, and
  the ``MALLOC_*`` variables are tunables' aliases
  (glibc ``elf/dl-tunables.c``, ``elf/dl-tunables.list``). glibc 2.36 is
  silent.
- ``ARGP_HELP_FMT``: glibc's argp, on any usage message of a program that
  uses it: ``tar: zq7Q: Unknown ARGP_HELP_FMT parameter``.
- ``BASH``: bash at start-up, ``BASH_XTRACEFD: zq7Q: invalid value for
  trace file descriptor``, ``BASH_COMPAT: zq7Q: compatibility value out of
  range``, ``<script>: zq7Q: is a directory`` (``BASH_ENV``).
- ``SHELLOPTS``: ``bash: line 0: zq7Q: invalid option name``.
  ``SHLVL=4817``: ``bash: warning: shell level (4818) too high``.
- bash's builtins and keywords print ``CDPATH`` (``cd sub`` prints
  ``zq7Q/sub``), ``OLDPWD`` (``cd -``), ``PS3`` (the ``select`` prompt),
  ``PS4`` (each ``set -x`` line, when not root), ``TIMEFORMAT`` (``time``)
  and ``FUNCNEST`` (``maximum function nesting level exceeded (48)``).

Not refused, by the same rule: names these programs act on but never print
(``IFS`` and ``ENV``, which bash ignores in a script; ``MAIL*``, read only
by interactive shells; ``LOCPATH``, ``NLSPATH``, ``GCONV_PATH``,
``HOSTALIASES``, ``LOCALDOMAIN``, ``RES_OPTIONS``, ``POSIXLY_CORRECT``), and
names whose value appears only in output the command asks for, as with
``echo``: ``HOME`` (``cd``), ``TZ`` (``date``), ``TMPDIR`` (``mktemp``), and
the variables of particular programs (``PYTHON*``, ``NODE_OPTIONS``,
``PERL*``, ``TIME_STYLE``, ``TERM``, ...), which print their values only
when the command runs those programs.

A second, smaller set is refused for honesty rather than secrecy: names bash
owns (:data:`SHELL_OWNED_ENV_NAMES`: ``UID``, ``PPID``, ``RANDOM``, ...),
which it will not let a script set or sets again itself, so a command
would never see the value passed.

:data:`ENV_NAME_PATTERN` states the rule as one regular expression, valid in
Python and in ECMA-262 (what JSON Schema's ``pattern`` uses), for a schema's
``propertyNames``; it matches (in full) exactly the names
:func:`env_name_problem` accepts.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "ENV_NAME_PATTERN",
    "REFUSED_ENV_NAMES",
    "RESERVED_ENV_NAMES",
    "RESERVED_ENV_PREFIXES",
    "SHELL_OWNED_ENV_NAMES",
    "env_name_problem",
]

RESERVED_ENV_PREFIXES: Final[tuple[str, ...]] = (
    "BASH",  # bash: BASH_ENV, BASH_XTRACEFD, BASH_COMPAT, BASHOPTS, BASH_FUNC_*
    "LD_",  # the dynamic loader: LD_PRELOAD, LD_AUDIT, LD_DEBUG, LD_LIBRARY_PATH, ...
    "LC_",  # the locale categories: LC_ALL, LC_CTYPE, LC_MESSAGES, ...
    "GLIBC_",  # GLIBC_TUNABLES
    "MALLOC_",  # glibc's allocator tunables: MALLOC_CHECK_, MALLOC_ARENA_MAX, ...
)
"""Namespaces in which the loader, the C library or bash print a value."""

RESERVED_ENV_NAMES: Final[frozenset[str]] = frozenset(
    {
        # the C library: the locale, and argp's help format
        "LANG",
        "LANGUAGE",
        "ARGP_HELP_FMT",
        # bash, as it starts
        "SHELLOPTS",
        "SHLVL",
        # bash, in its builtins and keywords: cd, cd -, select, set -x, time, functions
        "CDPATH",
        "OLDPWD",
        "PS3",
        "PS4",
        "TIMEFORMAT",
        "FUNCNEST",
    }
)
"""Single names whose value the loader, the C library or bash can print."""

SHELL_OWNED_ENV_NAMES: Final[frozenset[str]] = frozenset(
    {
        # Read-only in bash, or set by bash itself as a script starts or on
        # every use: a value passed in never reaches the command, so the
        # port refuses it instead of dropping it silently.
        "UID",
        "EUID",
        "PPID",
        "PWD",
        "OPTIND",
        "LINENO",
        "SECONDS",
        "RANDOM",
        "SRANDOM",
        "HISTCMD",
        "EPOCHSECONDS",
        "EPOCHREALTIME",
    }
)
"""Names bash owns: a command given one would never see the value."""

REFUSED_ENV_NAMES: Final[frozenset[str]] = RESERVED_ENV_NAMES | SHELL_OWNED_ENV_NAMES
"""Every single name refused, for either reason: with
:data:`RESERVED_ENV_PREFIXES`, the whole rule every schema states
(:data:`ENV_NAME_PATTERN`, and the strict profiles' pattern derived from the
same two)."""

_SHELL_NAME: Final = r"[A-Za-z_][A-Za-z0-9_]*"
_SHELL_NAME_RE: Final = re.compile(_SHELL_NAME)


def _pattern() -> str:
    # Strategy: one negative lookahead refuses the prefixes (anywhere a name
    # starts) and the single names (only whole), then the shell-name rule.
    # Only syntax ECMA-262 shares with Python: no lookbehind, no possessive
    # quantifiers, no \A or \Z, no inline flags; the entries are plain shell
    # names, so escaping leaves them as they are.
    prefixes = "|".join(re.escape(prefix) for prefix in RESERVED_ENV_PREFIXES)
    names = "|".join(re.escape(name) for name in sorted(REFUSED_ENV_NAMES))
    return rf"^(?!(?:{prefixes})|(?:{names})$){_SHELL_NAME}$"


ENV_NAME_PATTERN: Final = _pattern()
"""A regular expression (valid in Python and in ECMA-262, as JSON Schema
uses) that matches, in full, exactly the env names a command may be given."""

_RESERVED_REASON: Final = (
    "is acted on by the dynamic loader, the C library or the shell, which can print "
    "its value in the output (refused: names starting with "
    + ", ".join(RESERVED_ENV_PREFIXES)
    + ", and "
    + ", ".join(sorted(RESERVED_ENV_NAMES))
    + "); pass a secret under another name, or set this variable in the command text"
)


def env_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an env name, in plain words, or ``None``.

    The same rule as :data:`ENV_NAME_PATTERN`, decided without it.
    """
    if not _SHELL_NAME_RE.fullmatch(name):
        return "must be a shell variable name: letters, digits and _, not starting with a digit"
    if name.startswith(RESERVED_ENV_PREFIXES) or name in RESERVED_ENV_NAMES:
        return _RESERVED_REASON
    if name in SHELL_OWNED_ENV_NAMES:
        return "is set by the shell itself, so the command would never see this value"
    return None
