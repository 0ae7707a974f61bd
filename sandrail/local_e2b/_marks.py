"""The mark listener: ground truth a command writes outside its sandbox.

Each connection sends one line, ``[A-Za-z0-9_.:-]{1,200}``; it is recorded
as a ``mark`` event and answered ``ok`` (``LocalE2B.mark`` makes the shell
text), so nothing the command or a later one does to the sandbox's files can
take it back. The listener is on this machine's 127.0.0.1; a sandbox without
egress (a network namespace of its own) gets one more on the same port of
its own loopback, made by its anchor and served here.
"""

from __future__ import annotations

import asyncio
import re
import socket

from ._truth import TruthLog

__all__ = ["Marks"]

_MARK = re.compile(rb"[A-Za-z0-9_.:-]{1,200}")


class Marks:
    """Every mark listener of one server."""

    def __init__(self, truth: TruthLog) -> None:
        self._truth = truth
        self._servers: list[asyncio.Server] = []
        self.port = 0

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            text = line.rstrip(b"\n")
            if _MARK.fullmatch(text):
                self._truth.write("mark", text=text.decode("ascii"))
                writer.write(b"ok\n")
                await writer.drain()
        except (TimeoutError, OSError, ValueError):
            pass
        finally:
            writer.close()

    async def open(self) -> int:
        """Listen on a free port of 127.0.0.1; returns it (:attr:`port`)."""
        server = await asyncio.start_server(self._one, "127.0.0.1", 0, limit=1024)
        self._servers.append(server)
        self.port = server.sockets[0].getsockname()[1]
        return self.port

    async def serve(self, listener: socket.socket) -> asyncio.Server:
        """Serve marks on ``listener`` too (a sandbox's own loopback); close
        the returned server when the sandbox ends."""
        return await asyncio.start_server(self._one, sock=listener, limit=1024)

    def close(self) -> None:
        for server in self._servers:
            server.close()
