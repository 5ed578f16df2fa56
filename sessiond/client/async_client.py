"""The async client (anyio): many tasks may call it at once and share one socket.

A reader task owns the receiving side and hands each response to the task waiting
for its id, so calls from different tasks pipeline naturally. Use it as an async
context manager.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import anyio
import msgspec
from anyio.abc import SocketStream, TaskGroup

from sessiond.wire import messages as m
from sessiond.wire.errors import DaemonUnavailable, ProtocolError
from sessiond.wire.framing import FrameBuffer, decode_response, encode

from .autostart import start_daemon
from .batching import request_overhead, split
from .connection import Endpoint, check_socket_owner, raise_for

_json = msgspec.json.Encoder()


class AsyncClient(Endpoint):
    """The client for anyio/asyncio code: one socket shared by every task, each
    answer handed to the task waiting for its request id, so concurrent calls
    pipeline. Starts the daemon when none runs, like ``Client``."""

    def __init__(self, socket_path: Path | str | None = None, **kw: Any) -> None:
        kw.setdefault("name", "sessiond-py-async")
        super().__init__(socket_path, **kw)
        self._stream: SocketStream | None = None
        self._tg: TaskGroup | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[anyio.Event, list[m.Response]]] = {}
        self._send_lock = anyio.Lock()
        self._broken: DaemonUnavailable | None = None

    async def __aenter__(self) -> AsyncClient:
        try:
            self._stream = await self._dial()
        except (FileNotFoundError, ConnectionRefusedError):
            if not self.autostart:
                raise DaemonUnavailable(f"no daemon is running on {self.socket_path}") from None
            await anyio.to_thread.run_sync(start_daemon, self.socket_path, self.root)
            self._stream = await self._dial()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._reader)
        try:
            welcome = await self.call(m.Hello(id=0, protocol_version=m.PROTOCOL_VERSION, client=self.name,
                                              pid=os.getpid()))
            self.welcomed(welcome)  # type: ignore[arg-type]  # the answer to a Hello: Welcome
        except BaseException:  # no Welcome (a daemon killed or frozen meanwhile), or the wrong root
            await self.__aexit__(None, None, None)  # nobody else closes the socket and the reader
            raise
        return self

    async def _dial(self) -> SocketStream:
        check_socket_owner(self.socket_path)
        with anyio.fail_after(self.timeout):
            return await anyio.connect_unix(self.socket_path)

    async def __aexit__(self, *exc: object) -> None:
        if self._stream is not None:
            await self._stream.aclose()
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
            await self._tg.__aexit__(None, None, None)

    async def _reader(self) -> None:
        frames = FrameBuffer()
        assert self._stream is not None
        try:
            while True:
                data = await self._stream.receive()
                for body in frames.feed(data):
                    resp = decode_response(body)
                    slot = self._waiting.pop(resp.id, None)
                    if slot is not None:
                        slot[1].append(resp)
                        slot[0].set()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError, ProtocolError) as exc:
            self._broken = DaemonUnavailable(f"lost the daemon: {exc or 'connection closed'}")
            for event, _ in self._waiting.values():
                event.set()

    def next_id(self) -> int:
        return next(self._ids)

    async def call(self, req: m.Request) -> m.Response:
        if self._broken is not None:
            raise self._broken
        event, box = anyio.Event(), list[m.Response]()
        self._waiting[req.id] = (event, box)
        async with self._send_lock:
            try:
                await self._stream.send(encode(req))  # type: ignore[union-attr]  # set by __aenter__
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
                raise DaemonUnavailable(f"lost the daemon while sending: {exc}") from None
        try:
            with anyio.fail_after(self.timeout):
                await event.wait()
        except TimeoutError:
            raise DaemonUnavailable(f"the daemon did not answer within {self.timeout:.0f}s") from None
        finally:
            self._waiting.pop(req.id, None)
        if not box:
            raise self._broken or DaemonUnavailable("the daemon closed the connection")
        return raise_for(box[0])

    async def append(self, session: str, cwd: str, entries: list[dict[str, Any] | bytes], **kw: Any) -> m.Appended:
        """Store raw entries: one request, or several in order when one frame
        cannot hold them (an entry no frame can hold: ``EntryTooLarge``)."""
        lines = [e if isinstance(e, bytes) else _json.encode(e) for e in entries]
        overhead = request_overhead(m.Append(id=0, session=session, cwd=cwd, entries=[], **kw))
        out = m.Appended(id=0, accepted=0)
        for part in split(lines, overhead, self.max_frame_bytes):
            resp = await self.call(m.Append(id=self.next_id(), session=session, cwd=cwd, entries=part, **kw))
            assert isinstance(resp, m.Appended)
            out = m.Appended(id=resp.id, accepted=out.accepted + resp.accepted, duplicates=out.duplicates + resp.duplicates)
        return out

    async def flush(self, session: str | None = None, durable: bool = False) -> m.Flushed:
        return await self.call(m.Flush(id=self.next_id(), session=session, durable=durable))  # type: ignore[return-value]  # the answer to a Flush (an Error raises)

    async def close_session(self, session: str) -> None:
        await self.call(m.Close(id=self.next_id(), session=session))

    async def status(self) -> m.StatusResult:
        return await self.call(m.Status(id=self.next_id()))  # type: ignore[return-value]  # the answer to a Status (an Error raises)
