"""The in-process tier: the daemon's ``Connection`` driven through a fake transport.

The way uvicorn tests its protocol classes: the daemon is the real one
(``Daemon`` with its Registry, Writer, bounds and handlers, on a temp root,
writing real files), built on the test's own event loop; only the socket is
replaced, by a ``FakeTransport`` that plays the peer. It records every
write, can stop reading its answers (the transport then pauses writing past
its high-water mark, as a real one does), half-close or hang up, and hands
the protocol bytes only while it reads. No process, no socket, no sleep
longer than a loop pass: what these tests assert is the connection's logic
(the handshake, framing errors, ordering, budgets, cancellation); the
end-to-end tiers check the same through a real socket.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sessiond.config import Settings
from sessiond.daemon.connection import Connection
from sessiond.daemon.index.link import IndexLink
from sessiond.daemon.index.pipe import FromWorker, Splitter, ToWorker
from sessiond.daemon.server import Daemon
from sessiond.store.paths import project_dir
from sessiond.wire import messages as m
from sessiond.wire.framing import FrameBuffer, decode_response, encode

CWD = "/work/inprocess"
WAIT = 10.0
"""Seconds a test waits for something the loop should do within a few passes."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeTransport(asyncio.Transport):
    """A stream socket's transport as the protocol sees it; the test is the peer.

    Bytes the protocol writes go to ``unread`` and, while the peer reads, on to
    ``taken`` (``writes`` keeps each ``write`` call). Past ``high`` unread bytes
    the protocol's ``pause_writing`` is called, and ``resume_writing`` once the
    peer took them down to ``low``, as asyncio's socket transports do. Bytes the
    peer sends reach ``data_received`` only while the protocol reads."""

    def __init__(self, loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self.loop = loop
        self.protocol = protocol
        self.writes: list[bytes] = []
        self.on_write: Callable[[bytes], None] | None = None
        """Called with each write once it is in ``unread``, before the peer reads it
        (to look at the daemon's state at that moment)."""
        self.unread = bytearray()
        self.taken = bytearray()
        self.peer_reads = True
        self.reading = True
        self.writing_paused = False
        self.high, self.low = 64 * 1024, 16 * 1024
        self.closed = False
        self.aborted = False
        self.lost = False
        self._inbound: list[bytes] = []
        self._eof = False

    # the protocol's side

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.lost, "written after connection_lost"
        if self.closed:
            return  # as asyncio: a write after close is dropped
        self.writes.append(bytes(data))
        self.unread += data
        if self.on_write is not None:
            self.on_write(bytes(data))
        if self.peer_reads:
            self.take()
        elif not self.writing_paused and len(self.unread) > self.high:
            self.writing_paused = True
            self.protocol.pause_writing()

    def get_write_buffer_size(self) -> int:
        return len(self.unread)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.high = 64 * 1024 if high is None else high
        self.low = self.high // 4 if low is None else low

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.low, self.high

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True
        self.loop.call_soon(self._deliver)

    def is_reading(self) -> bool:
        return self.reading

    def close(self) -> None:
        """As asyncio: what is written still goes out, then the connection is lost."""
        if self.closed:
            return
        self.closed = True
        if not self.unread:
            self.loop.call_soon(self._lose, None)

    def abort(self) -> None:
        self.closed = self.aborted = True
        self.unread.clear()
        self.loop.call_soon(self._lose, None)

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default  # no socket: no peer credentials to check, no POLLHUP to poll

    # the peer's side

    def send(self, data: bytes) -> None:
        """The peer sends ``data``: delivered now if the protocol reads, else when it resumes."""
        self._inbound.append(data)
        self._deliver()

    def take(self) -> None:
        """The peer reads everything written so far."""
        self.taken += self.unread
        self.unread.clear()
        if self.writing_paused and len(self.unread) <= self.low:
            self.writing_paused = False
            self.protocol.resume_writing()
        if self.closed and not self.lost and not self.aborted:
            self.loop.call_soon(self._lose, None)

    def shut_write(self) -> None:
        """The peer half-closes (``shutdown(SHUT_WR)``): EOF once its bytes are read."""
        self._eof = True
        self._deliver()

    def hang_up(self) -> None:
        """The peer is gone (its socket closed, a reset): the connection is lost now."""
        self.closed = True
        self.unread.clear()
        self._lose(ConnectionResetError("the peer hung up"))

    def _deliver(self) -> None:
        while self._inbound and self.reading and not self.closed:
            self.protocol.data_received(self._inbound.pop(0))
        if self._eof and not self._inbound and self.reading and not self.closed:
            self._eof = False
            if not self.protocol.eof_received():
                self.close()

    def _lose(self, exc: Exception | None) -> None:
        if not self.lost:
            self.lost = True
            self.protocol.connection_lost(exc)


class Peer:
    """One client connection to the in-process daemon: a ``Connection`` on a
    ``FakeTransport``, with the client's view of it (frames sent, answers read)."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.conn = Connection(daemon)
        self.transport = FakeTransport(daemon.loop, self.conn)
        self.conn.connection_made(self.transport)

    def send(self, *messages: Any) -> None:
        """Frames for ``messages`` in one read (pipelined); bytes as they are."""
        self.transport.send(b"".join(msg if isinstance(msg, bytes) else encode(msg) for msg in messages))

    def answers(self) -> list[Any]:
        """Every answer the peer has read so far, decoded."""
        return [decode_response(body) for body in FrameBuffer(1 << 30).feed(bytes(self.transport.taken))]

    async def wait_answers(self, n: int) -> list[Any]:
        """The answers once the peer has read at least ``n``."""
        await until(lambda: len(self.answers()) >= n)
        return self.answers()


async def until(cond: Callable[[], bool], timeout: float = WAIT) -> None:
    """Let the loop run until ``cond()`` holds (a test failure after ``timeout``)."""
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.001)


class InProcess:
    """The real daemon on a temp root, on the running loop, without a socket."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.root = daemon.settings.root

    def connect(self) -> Peer:
        return Peer(self.daemon)

    async def greeted(self) -> Peer:
        """A connection past its Hello (the Welcome read and dropped)."""
        peer = self.connect()
        peer.send(m.Hello(id=0, protocol_version=m.PROTOCOL_VERSION, client="inprocess"))
        await peer.wait_answers(1)
        peer.transport.taken.clear()
        return peer

    def transcript(self, session: str, cwd: str = CWD) -> Path:
        return project_dir(self.root, cwd) / f"{session}.jsonl"

    @contextmanager
    def files_held(self) -> Iterator[None]:
        """The writer's file thread (``filework``) kept busy until the block
        ends: a new transcript is not created meanwhile, so what is queued for
        it stays unwritten, whoever asks for the drain (a Search waiting for
        the writes does). Left before the daemon stops: its stop waits for
        that thread."""
        release = threading.Event()
        self.daemon.writer.files.submit(release.wait)
        try:
            yield
        finally:
            release.set()


class FakeIndexer:
    """The search indexer's end of the pipes, played by the test: put in as
    ``link``'s stdin, it keeps what the daemon sends (``sent``, decoded), and
    the test answers as the indexer's stdout would (``answer``)."""

    def __init__(self, link: IndexLink) -> None:
        self.link = link
        self.sent: list[ToWorker] = []
        self._split = Splitter(ToWorker)
        link.stdin = self  # type: ignore[assignment]  # the part of a pipe's write transport the link uses

    def write(self, data: bytes) -> None:
        self.sent += self._split.feed(data)

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def answer(self, msg: FromWorker) -> None:
        self.link._answer(msg)


@asynccontextmanager
async def in_process(base: Path, **settings: Any) -> AsyncIterator[InProcess]:
    """The daemon built on this loop, with ``settings`` over the defaults (no
    search index unless asked: its indexer is another process); shut down
    as ``serve`` does at the end (every queue drained, files closed)."""
    settings.setdefault("search_index", False)
    cfg = Settings(root=base / "root", socket=base / "run" / "sessiond.sock", **settings)
    daemon = Daemon(cfg, asyncio.get_running_loop())
    daemon.start_serving()  # no start-up to wait for here: a stop is carried out at once
    try:
        yield InProcess(daemon)
    finally:
        daemon.request_shutdown("the test ended")
        await asyncio.wait_for(daemon.stopped, WAIT)
        daemon.follower.close()  # as serve does after the stop (a test may have started it)
        await asyncio.sleep(0)  # the close callbacks of its connections


def entry(text: str = "hi", kind: str = "user", uid: str | None = None) -> bytes:
    """One transcript entry as a client sends it."""
    return msgspec.json.encode({"type": kind, "uuid": uid or str(uuid.uuid4()),
                                "message": {"role": kind, "content": text}})
