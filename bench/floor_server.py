"""The least a Python daemon on sessiond's wire can do per Append: a baseline.

One uvloop Protocol per client: split frames with the shared ``FrameBuffer``,
decode the request, one ``write(2)`` of the joined entries to the session's
``O_APPEND`` file, answer ``Appended`` in the same callback. No validation of
the entries, no dedup, routing, queueing, locking or rename checks, no
coalescing across clients: what remains of sessiond's cost per request is the
event loop, the syscalls and msgspec. ``append_load --levels floor`` drives it
with the very client the daemon gets, so sessiond's distance from it is what
its own Python costs, and its distance from Redis is what Python costs at all.

    python bench/floor_server.py SOCKET DIR
"""

from __future__ import annotations

import asyncio
import os
import sys

import uvloop

from sessiond import __version__
from sessiond.wire import messages as m
from sessiond.wire.framing import DEFAULT_MAX_FRAME, FrameBuffer, decode_request, encode


class FloorConnection(asyncio.Protocol):
    def __init__(self, files: dict[str, int], root: str) -> None:
        self.files = files
        self.root = root
        self.frames = FrameBuffer(DEFAULT_MAX_FRAME)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        out = []
        for body in self.frames.feed(data):
            req = decode_request(body)
            if isinstance(req, m.Append):
                fd = self.files.get(req.session)
                if fd is None:
                    path = os.path.join(self.root, req.session + ".jsonl")
                    fd = self.files[req.session] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                req.entries.append(b"")
                os.write(fd, b"\n".join(req.entries))
                out.append(encode(m.Appended(id=req.id, accepted=len(req.entries) - 1)))
            elif isinstance(req, m.Hello):
                out.append(encode(m.Welcome(id=req.id, protocol_version=m.PROTOCOL_VERSION,
                                            daemon_version=__version__, pid=os.getpid())))
            else:
                out.append(encode(m.Error(id=req.id, code="bad_request", message="the floor server only appends")))
        assert self.transport is not None
        self.transport.write(b"".join(out))


async def serve(sock: str, root: str) -> None:
    files: dict[str, int] = {}
    server = await asyncio.get_running_loop().create_unix_server(lambda: FloorConnection(files, root), sock)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    os.makedirs(sys.argv[2], mode=0o700, exist_ok=True)
    uvloop.run(serve(sys.argv[1], sys.argv[2]))
