"""Which environment variable names a command may be given (C17).

The ``env`` argument carries values the model must never see again, and the
port masks them in output. Some names are acted on before or while the
command starts, by the dynamic loader, the C library or the shell, and those
programs print the value in a warning (``LC_ALL=zq0Q`` makes bash print a
``setlocale`` warning naming it; ``LD_PRELOAD=zq5Q`` makes ld.so name the
object it could not load). A short value printed that way is below the
masking threshold, so it would reach the model in clear.

One rule covers them all: a name is refused when it belongs to a namespace
one of those programs reads at start-up (:data:`RESERVED_ENV_PREFIXES`) or is
one of the single names they read (:data:`RESERVED_ENV_NAMES`). The same
rule is stated in the tool schemas as :data:`ENV_NAME_PATTERN`, so a model
reading the schema knows it (an argument the schema accepts is never refused
for its env names).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "ENV_NAME_PATTERN",
    "RESERVED_ENV_NAMES",
    "RESERVED_ENV_PREFIXES",
    "env_name_problem",
]

RESERVED_ENV_PREFIXES: Final[tuple[str, ...]] = (
    "BASH",  # BASH_ENV, BASH_XTRACEFD, BASH_COMPAT, BASHOPTS, BASH_FUNC_*
    "LD_",  # the dynamic loader: LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, ...
    "LC_",  # locale categories: LC_ALL, LC_CTYPE, ...
    "GLIBC_",  # GLIBC_TUNABLES
    "MALLOC_",  # glibc's allocator tunables
)
"""Name prefixes the loader, the C library or the shell act on at start-up."""

RESERVED_ENV_NAMES: Final[frozenset[str]] = frozenset(
    {
        # the C library: locale, character sets, resolver
        "LANG",
        "LANGUAGE",
        "LOCPATH",
        "NLSPATH",
        "GCONV_PATH",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "RES_OPTIONS",
        # the shell, as it starts a login shell and runs a script
        "ENV",
        "SHELLOPTS",
        "IFS",
        "PS4",
        "SHLVL",
        "MAIL",
        "MAILPATH",
        "MAILCHECK",
    }
)
"""Single names the loader, the C library or the shell act on at start-up."""

_SHELL_NAME: Final = r"[A-Za-z_][A-Za-z0-9_]*"


def _pattern() -> str:
    prefixes = "|".join(re.escape(prefix) for prefix in RESERVED_ENV_PREFIXES)
    names = "|".join(re.escape(name) for name in sorted(RESERVED_ENV_NAMES))
    return rf"^(?!(?:{prefixes})|(?:{names})$){_SHELL_NAME}$"


ENV_NAME_PATTERN: Final = _pattern()
"""A regular expression (valid in Python and in ECMA-262, as JSON Schema
uses) that matches exactly the env names a command may be given."""

_ALLOWED: Final = re.compile(ENV_NAME_PATTERN)
_SHELL_NAME_RE: Final = re.compile(_SHELL_NAME)


def env_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an env name, in plain words, or ``None``."""
    if _ALLOWED.fullmatch(name):
        return None
    if not _SHELL_NAME_RE.fullmatch(name):
        return "must be a shell variable name: letters, digits and _, not starting with a digit"
    return (
        "is read by the dynamic loader, the C library or the shell as the command starts "
        "(names starting with "
        + ", ".join(RESERVED_ENV_PREFIXES)
        + ", and "
        + ", ".join(sorted(RESERVED_ENV_NAMES))
        + "), which can print its value; set it in the command text instead"
    )
