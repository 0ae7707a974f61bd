"""Where the command line's calls run: ``--backend simulator|e2b``.

Shared by ``run``, ``code`` and ``mcp``. A backend that cannot be made (no
API key, no SDK, a setting the backend refuses) is a usage error (exit
status 2) that says what is missing, never a traceback.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import click

__all__ = ["backend_option", "close_backend", "make_backend"]

backend_option = click.option(
    "--backend",
    type=click.Choice(["simulator", "e2b"]),
    default="simulator",
    show_default=True,
    help="Where commands run: the in-memory simulator (no account needed) or E2B "
    "(needs E2B_API_KEY and the e2b extra).",
)


def make_backend(name: str) -> Any:
    """The backend ``name`` (``simulator`` or ``e2b``). E2B reads its key
    from ``E2B_API_KEY``, and a local server (``sandrail local-e2b``) from
    ``E2B_API_URL`` and ``E2B_SANDBOX_URL``, as the SDK does. Raises
    :class:`click.UsageError` when it cannot be made."""
    if name == "simulator":
        from sandrail.interpreters.simulator import Simulator

        return Simulator()
    api_key = os.environ.get("E2B_API_KEY", "").strip()
    if not api_key:
        raise click.UsageError(
            "--backend e2b needs an E2B API key: set E2B_API_KEY "
            "(or use --backend simulator, which needs no account)."
        )
    if importlib.util.find_spec("e2b") is None:
        raise click.UsageError("--backend e2b needs the e2b SDK: pip install 'sandrail[e2b]'.")
    from sandrail.interpreters.e2b import E2BBackend

    # A local server (`sandrail local-e2b`) is named by E2B_API_URL and
    # E2B_SANDBOX_URL, as the SDK reads them; passed on explicitly.
    api_url = os.environ.get("E2B_API_URL", "").strip() or None
    sandbox_url = os.environ.get("E2B_SANDBOX_URL", "").strip() or None
    try:
        return E2BBackend(api_key=api_key, api_url=api_url, sandbox_url=sandbox_url)
    except (TypeError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None


def close_backend(backend: Any) -> None:
    """Close ``backend`` if it has a ``close`` (the E2B backend does): what
    the SDK opened must not outlive the interpreter."""
    close = getattr(backend, "close", None)
    if callable(close):
        close()
