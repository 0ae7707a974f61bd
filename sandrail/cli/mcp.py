"""``sandrail mcp``: the tools as an MCP server, over stdio or streamable HTTP.

This process is the harness: every call is allowed and the caller holds its
authority, as for ``sandrail run``; the agent owner is ``--agent-id``. Over
HTTP it binds loopback unless told otherwise, and has no authentication of
its own: anyone who reaches the port runs commands in the sandbox, so a
non-loopback ``--host`` needs ``--allow-remote``.
"""

from __future__ import annotations

import ipaddress
import os
import sys
import uuid
from typing import Any

import click

import sandrail

from ._backends import close_backend, make_backend
from ._record import open_record_option

__all__ = ["mcp"]

_LOOPBACK_NAMES = {"localhost"}


def _text(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An identity option's value: non-blank, valid Unicode text (the shell
    may pass bytes that are not UTF-8, which arrive as lone surrogates)."""
    if value is None:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise click.BadParameter("must be valid UTF-8 text") from None
    if not value.strip():
        raise click.BadParameter("must not be blank")
    return value


def _loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command("mcp")
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio (for a client that starts this process) or streamable HTTP.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP: address to bind.")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="HTTP: port."
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="HTTP: allow a --host that is not loopback (the server has no authentication).",
)
@click.option(
    "--backend",
    type=click.Choice(["simulator", "e2b"]),
    default=None,
    help="Where commands run: E2B (needs E2B_API_KEY and the e2b extra) or sandrail's "
    "in-memory simulator (nothing really runs; for trying a client). Default: e2b when "
    "E2B_API_KEY is set; without it the server refuses to start until you choose.",
)
@click.option(
    "--session",
    "session_id",
    default=None,
    callback=_text,
    help="Session id: task ids and the sandbox are scoped to it. Default: a new one "
    "for each server process; give a fixed one to keep the sandbox across restarts.",
)
@click.option(
    "--agent-id", default="mcp-agent", show_default=True, callback=_text, help="The agent owner."
)
@click.option(
    "--profile",
    type=click.Choice(list(sandrail.core.PROFILES)),
    default="full",
    show_default=True,
    help="Which schemas to list (strict ones for clients that make strict tools).",
)
@click.option(
    "--max-output-bytes",
    type=click.IntRange(min=256),
    default=24_000,
    show_default=True,
    help="Byte budget of each result's text.",
)
@click.option(
    "--record",
    "record_spec",
    metavar="PATH|postgresql://...",
    default=None,
    help="Keep the ownership record in this SQLite file or PostgreSQL database, so a "
    "restarted server (same --session) never launches a task twice.",
)
def mcp(
    transport: str,
    host: str,
    port: int,
    allow_remote: bool,
    backend: str | None,
    session_id: str | None,
    agent_id: str,
    profile: sandrail.Profile,
    max_output_bytes: int,
    record_spec: str | None,
) -> None:
    """Serve the sandrail tools over MCP (needs the mcp extra).

    A client sends each call's operation key in the request's _meta as
    "sandrail/operation_key"; a retry with the same key never launches twice.
    Without one, an identical call whose settled result was not yet returned
    reuses the earlier call's key (see sandrail.adapters.mcp). Ctrl-C or
    SIGTERM stops an HTTP server cleanly (exit status 0).
    """
    try:
        from sandrail.adapters import _mcp_serve as serving
        from sandrail.adapters.mcp import minimum_output_bytes, recent_events
        from sandrail.adapters.mcp import server as mcp_server

        anyio = __import__("anyio")
    except ImportError as exc:
        raise click.UsageError(str(exc)) from None
    if transport == "http" and not _loopback(host) and not allow_remote:
        raise click.UsageError(
            f"--host {host} is not loopback and the server has no authentication; "
            "pass --allow-remote to serve it anyway."
        )
    try:
        backend = serving.choose_backend(backend, os.environ)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    record = open_record_option(record_spec)  # kept until the process ends
    chosen = make_backend(backend)
    try:
        settings: dict[str, Any] = {
            "backend": chosen,
            "session_id": session_id if session_id is not None else f"mcp-{uuid.uuid4().hex[:12]}",
            "owner": sandrail.AgentOwner(agent_id=agent_id),
            "authorize": lambda request: sandrail.ALLOW,
            "assert_authority": lambda request: True,
            "record": record,
        }
        # The real minimum (a fallback key's identity), named before any
        # smaller one the toolset alone would name.
        probe = {name: value for name, value in settings.items() if name != "record"}
        needed = minimum_output_bytes(sandrail.Toolset(**probe))
        if max_output_bytes < needed:
            raise ValueError(
                f"--max-output-bytes {max_output_bytes} is too small to serve over MCP: every "
                f"result carries the call's full identity; use at least {needed}."
            )
        toolset = sandrail.Toolset(**settings, max_output_bytes=max_output_bytes)
        app = mcp_server(toolset, profile=profile)
    except (TypeError, ValueError) as exc:
        # Any value the toolset or server refuses is a usage error, never a
        # traceback (and a backend already opened is closed).
        close_backend(chosen)
        raise click.UsageError(str(exc)) from None
    where = f" (session {toolset.session_id})"
    click.echo(serving.startup_line(backend, transport, where), err=True)
    if transport == "stdio":
        from mcp.server.stdio import stdio_server

        async def serve_stdio() -> None:
            async with stdio_server() as (read_stream, write_stream):
                await app.run(read_stream, write_stream, app.create_initialization_options())

        anyio.run(serve_stdio)
        return
    starlette_app = app.streamable_http_app(host=host, event_store=recent_events())
    serving.serve_http(starlette_app, host, port, lambda line: click.echo(line, err=True))
    sys.exit(0)
