"""What a ``Start`` stages in the sandbox: the request's files, one field a
file, that the launcher takes whole by one rename (see :mod:`._launcher_script`).

Pure: builds bytes from the effect, sends nothing. Everything the model
supplies (command, cwd, env) travels in these files, never in shell text;
what bash cannot carry exactly is refused here (``not_sent``), with details
that never repeat a value (C17).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Mapping
from typing import Final

from sandrail.core import Delivery, EffectFailure, Start, claim_proof

__all__ = ["request_files", "shell_int", "utf8"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED_ENV_PREFIX: Final = "__sandrail"
"""The launcher's own shell variables (it exports the env with them)."""
_ARG_LIMIT: Final = 131_072
"""Linux refuses to exec with one argument or environment string this long
(MAX_ARG_STRLEN)."""
_CHECK_BYTES: Final = 16_384
"""A start with a cwd, or whose argument and env are this big, waits in
the launcher until its command began or could not (``refused
not_started``): see :mod:`._launcher_script`. Others answer at once."""
_EPOCH = re.compile(r"[0-9a-f]{32}")
_NO_EPOCH: Final = "-"
"""Sent for a claim epoch that is no launcher's: it never matches."""


def request_files(
    effect: Start, *, ledger_key: Callable[[], bytes], max_seconds: int
) -> list[tuple[str, bytes]]:
    """The staged request of ``effect``, as (file name, bytes) pairs: the
    digest keyed with ``ledger_key()`` (an HMAC key the sandbox never sees),
    the command, its deadline capped at ``max_seconds``, and the fence,
    expect, epoch, cwd, env and check files it calls for. Raises
    :class:`EffectFailure` (``not_sent``) for what bash cannot carry
    exactly: NUL bytes, env names that are not shell identifiers or are the
    launcher's own, an env entry Linux would refuse to exec."""
    if "\0" in effect.command:
        raise EffectFailure(Delivery.NOT_SENT, "Start: the command contains a NUL character")
    deadline = max(1, min(effect.timeout_seconds, max_seconds))
    digest = hmac.new(
        ledger_key(),
        effect.request_digest.encode("utf-8", "surrogatepass"),
        hashlib.sha256,
    ).hexdigest()
    command = utf8(effect.command)
    files: list[tuple[str, bytes]] = [
        ("digest", digest.encode()),
        ("command", command),
        ("timeout", str(deadline).encode()),
    ]
    if len(command) >= _ARG_LIMIT:
        files.append(("long", b"1"))
    if effect.fence is not None:
        files.append(("fence", shell_int(effect.fence).encode()))
    proof = claim_proof(effect)  # the launcher's never_claimed applies its rule (C2)
    if proof.expect_claim:
        files.append(("expect", b"1"))
    if proof.epoch is not None:
        epoch = proof.epoch
        valid = isinstance(epoch, str) and _EPOCH.fullmatch(epoch) is not None
        files.append(("epoch", (epoch if valid else _NO_EPOCH).encode()))
    checked = 0 if len(command) >= _ARG_LIMIT else len(command)
    if effect.cwd is not None:
        if "\0" in effect.cwd:
            raise EffectFailure(Delivery.NOT_SENT, "Start: cwd contains a NUL character")
        files.append(("cwd", utf8(effect.cwd)))
        checked = _CHECK_BYTES
    if effect.env:
        entries = _env_entries(effect.env)
        files.append(("env", entries))
        checked += len(entries)
    if checked >= _CHECK_BYTES:
        # The start answers once the command began or could not.
        files.append(("check", b"1"))
    return files


def _env_entries(env: Mapping[str, str]) -> bytes:
    """The env as NUL-separated ``NAME=value`` entries (the launcher's
    ``env`` file), or :class:`EffectFailure` (``not_sent``) naming the
    variable, never its value."""
    entries = bytearray()
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise EffectFailure(Delivery.NOT_SENT, "Start: an env name is not a shell identifier")
        if name.startswith(_RESERVED_ENV_PREFIX):
            raise EffectFailure(
                Delivery.NOT_SENT,
                f"Start: env names starting with {name[:10]} are sandrail's",
            )
        if not isinstance(value, str) or "\0" in value:
            raise EffectFailure(Delivery.NOT_SENT, f"Start: env {name} holds a NUL character")
        entry = utf8(f"{name}={value}")
        if len(entry) >= _ARG_LIMIT:
            raise EffectFailure(
                Delivery.NOT_SENT,
                f"Start: env {name} is too long (Linux allows under 128 KiB per variable)",
            )
        entries += entry + b"\0"
    return bytes(entries)


def utf8(text: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate is :class:`EffectFailure`
    (``not_sent``), never repeated."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise EffectFailure(Delivery.NOT_SENT, "a value is not valid Unicode text") from None


def shell_int(value: int) -> str:
    """A natural number as the launcher's argument text; anything else is
    :class:`EffectFailure` (``not_sent``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EffectFailure(Delivery.NOT_SENT, "a launcher argument is not a natural number")
    return str(value)
