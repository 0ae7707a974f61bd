"""``sandrail local-e2b``: a local, wire-compatible E2B in the foreground.

Prints the three ``export`` lines that point the e2b SDK (and ``sandrail
run --backend e2b``) at it, says which isolation is in force, and runs until
Ctrl-C (or SIGTERM, or SIGHUP when its terminal closes), which stops it and
every process it started and removes its state directory. Exit status 2 when
sandboxes cannot be isolated on this machine or the extra is missing.
"""

from __future__ import annotations

import asyncio
import importlib.util
import tempfile
from pathlib import Path

import click

__all__ = ["local_e2b"]


@click.command("local-e2b")
@click.option(
    "--port",
    type=click.IntRange(0, 65_534),
    default=0,
    show_default=True,
    help="Control plane on 127.0.0.1:PORT, envd on PORT+1 (0: two free ports).",
)
@click.option(
    "--isolation",
    type=click.Choice(["auto", "root", "userns"]),
    default="auto",
    show_default=True,
    help="root (needs real root): a mount namespace per sandbox and a uid for 'user'; "
    "userns: the same mounts without user separation; auto picks root when it can.",
)
@click.option(
    "--signal-scope",
    type=click.Choice(["group", "process"]),
    default="group",
    show_default=True,
    help="What kills and command deadlines reach: the command's process group, or only "
    "its own process (as E2B's envd does).",
)
def local_e2b(port: int, isolation: str, signal_scope: str) -> None:
    """Run an E2B control plane and envd on 127.0.0.1 that the unmodified e2b SDK
    talks to, running real processes on this machine.

    It does not do: templates (only 'base', this machine's own filesystem),
    pause, resume, snapshots or forks, PTYs, sandbox URLs (get_host), egress
    rules finer than none at all (allow_internet_access=False: only loopback),
    volumes. What of these reaches it is refused: "local-e2b does not support ...".

    A development and test tool, NOT a security boundary: sandboxes share this
    machine's kernel and process table (and its network, unless created
    without internet access); root in a sandbox is root on this machine.
    """
    for module in ("e2b", "uvicorn", "python_multipart", "inotify_simple"):
        if importlib.util.find_spec(module) is None:
            raise click.UsageError(
                f"local-e2b needs {module}: pip install 'sandrail[local-e2b]'", ctx=None
            )
    from sandrail.local_e2b._isolation import IsolationError
    from sandrail.local_e2b._server import ServerInfo, ServerOptions, run_server

    def ready(info: ServerInfo) -> None:
        click.echo("sandrail local-e2b: an E2B control plane and envd on this machine.")
        click.secho(
            "A development and test tool, NOT a security boundary: sandboxes share this "
            "machine's kernel and process table (and its network, unless created without "
            "internet access).",
            fg="yellow",
            bold=True,
        )
        click.echo(f"Isolation: {info.isolation}")
        click.echo("\nPaste these into another shell:\n")
        click.echo(f"export E2B_API_URL={info.api_url}")
        click.echo(f"export E2B_SANDBOX_URL={info.sandbox_url}")
        click.echo(f"export E2B_API_KEY={info.api_key}")
        click.echo("\nThen try:\n\n  sandrail run --backend e2b -- uname -a\n")
        click.echo("Ctrl-C stops the server and every process it started.", nl=True)

    with tempfile.TemporaryDirectory(prefix="sandrail-local-e2b-") as home:
        options = ServerOptions(
            state_dir=Path(home) / "server",
            api_port=port,
            envd_port=port + 1 if port else 0,
            isolation=isolation,
            signal_scope=signal_scope,
        )
        try:
            asyncio.run(run_server(options, ready))
        except IsolationError as exc:
            click.echo(f"sandrail local-e2b: {exc}", err=True)
            raise SystemExit(2) from None
        except OSError as exc:
            click.echo(f"sandrail local-e2b: cannot listen: {exc}", err=True)
            raise SystemExit(2) from None
    click.echo("sandrail local-e2b: stopped; every sandbox was killed.")
