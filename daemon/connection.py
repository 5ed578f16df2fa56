"""One client connection, as an ``asyncio.Protocol``.

A Protocol (buffer and split frames ourselves) handled 1.3-2x the frames/s of a
StreamReader server here, so the hot path stays on it; this module is the only
place that knows. Frames are split by the shared ``FrameBuffer``; the first frame
must be ``Hello``. Responses are collected and written once per event-loop pass,
so a pipelining client gets its acks in one write. A connection that goes away
without ``Close`` gets the same exit cleanup as one that says goodbye.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import struct
from typing import TYPE_CHECKING

from sessiond.protocol import __version__
from sessiond.protocol.wire import messages as m
from sessiond.protocol.wire.errors import FrameTooLarge, ProtocolError, SessiondError, VersionMismatch
from sessiond.protocol.wire.framing import FrameBuffer, decode_request, encode, request_id_of

from .handlers import dispatch
from .limits import ThrottleLog, TokenBucket

if TYPE_CHECKING:
    from .server import Daemon
    from .sessions import SessionState
    from .writer import FileQueue

log = logging.getLogger("sessiond")
_ids = itertools.count(1)
_UCRED = struct.Struct("3i")


def peer_uid(sock: socket.socket) -> int | None:
    """The connecting process's uid (SO_PEERCRED on Linux, getpeereid elsewhere)."""
    if hasattr(socket, "SO_PEERCRED"):
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
        return _UCRED.unpack(raw)[1]
    try:
        return os.getpeereid(sock.fileno())[0]  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return None


class Outbox:
    """Connections with answers to send, each written once per loop pass: by
    the writer's end-of-pass hook when the answers came from a drain (no extra
    loop iteration), else by one ``call_soon`` for all of them."""

    __slots__ = ("loop", "pending", "scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: list[Connection] = []
        self.scheduled = False

    def add(self, conn: Connection) -> None:
        self.pending.append(conn)
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        pending, self.pending = self.pending, []
        for conn in pending:
            try:
                conn._flush_out()
            except Exception:  # a bug: the other connections still get their answers
                log.exception("%s: internal error sending answers", conn.peer)


class Connection(asyncio.Protocol):
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.id = next(_ids)
        self.transport: asyncio.Transport | None = None
        self.frames = FrameBuffer(daemon.settings.max_frame)
        self.greeted = False
        self.sessions: dict[str, SessionState] = {}
        self._out: list[bytes] = []
        self._out_scheduled = False
        self._pauses: set[str] = set()
        self.closing = False
        settings = daemon.settings
        self.peer = f"client {self.id}"
        self._bucket = TokenBucket(settings.rate_bytes, settings.rate_burst) if settings.rate_bytes else None
        self._throttle_log = ThrottleLog(self.peer)
        self._inflight: dict[int, int] = {}  # request id -> bytes, for answers still owed
        self._inflight_bytes = 0
        self._stall: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------- transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        uid = peer_uid(sock) if sock is not None else None
        if uid is not None and uid != os.getuid():
            log.warning("refused a client of uid %d", uid)
            self._send_now(m.Error(id=0, code="permission_denied", message="this daemon serves only its own user"))
            self.close()
            return
        self.daemon.connections.add(self)

    def data_received(self, data: bytes) -> None:
        try:
            bodies = self.frames.feed(data)
        except FrameTooLarge as exc:
            log.warning("%s: %s; closing", self.peer, exc)
            self._send_now(m.Error(id=0, code=exc.code, message=exc.message))
            self.close()
            return
        for body in bodies:
            if self.closing:
                return
            self._handle(body)
        if self._stall is not None or self.frames.pending:
            self._watch_stall(bool(bodies))
        if self._bucket is not None:
            wait = self._bucket.take(len(data))
            if wait > 0 and "rate" not in self._pauses:
                self._throttle_log.event(wait)
                self._pause("rate")
                self.daemon.loop.call_later(wait, self._unpause, "rate")
        if "queues" not in self._pauses and self.daemon.writer.over_limit:
            self._pause("queues")
            self.daemon.writer.when_below_limit(lambda: self._unpause("queues"))

    # ------------------------------------------------------------------ limits

    def _pause(self, reason: str) -> None:
        if not self._pauses and self.transport is not None:
            self.transport.pause_reading()
        self._pauses.add(reason)

    def _unpause(self, reason: str) -> None:
        if reason not in self._pauses:
            return
        self._pauses.discard(reason)
        if not self._pauses and self.transport is not None and not self.closing:
            self.transport.resume_reading()

    def _watch_stall(self, progressed: bool) -> None:
        """A client that stops in the middle of a frame is cut off after
        ``frame_timeout``: it would otherwise hold its buffer forever."""
        if progressed and self._stall is not None:
            self._stall.cancel()
            self._stall = None
        if self.frames.pending and self._stall is None:
            self._stall = self.daemon.loop.call_later(self.daemon.settings.frame_timeout, self._stalled)

    def _stalled(self) -> None:
        self._stall = None
        if self.frames.pending and not self.closing:
            log.warning("%s stalled inside a frame (%d bytes) for %.0f s; closing", self.peer, self.frames.pending, self.daemon.settings.frame_timeout)
            self._send_now(m.Error(id=0, code="bad_request", message="timed out inside a frame"))
            self.close()

    def eof_received(self) -> bool:
        if self.frames.pending:
            log.warning("%s: connection ended inside a frame (%d bytes)", self.peer, self.frames.pending)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self._stall is not None:
            self._stall.cancel()
        self.daemon.connections.discard(self)
        for sid in list(self.sessions):
            self.detach(sid, dropped=True)
        self.transport = None

    # -------------------------------------------------------------------- requests

    def _handle(self, body: bytes) -> None:
        try:
            req = decode_request(body)
        except ProtocolError as exc:
            self.reply(m.Error(id=request_id_of(body), code=exc.code, message=exc.message))
            return
        if not self.greeted:
            self._greet(req)
            return
        self._run(req, len(body))

    def _run(self, req: m.Request, size: int) -> None:
        self.daemon.fair.current = self.id  # expensive work this request causes is its share
        try:
            resp = dispatch(self, req)
        except SessiondError as exc:
            resp = m.Error(id=req.id, code=exc.code, message=exc.message)
        except Exception as exc:  # a bug: report it, keep serving everyone else
            log.exception("%s: internal error on %s", self.peer, type(req).__name__)
            self.daemon.stats.errors += 1
            resp = m.Error(id=req.id, code="internal", message=f"internal error: {exc}")
        if resp is not None:
            self.reply(resp)
        elif not self.closing and req.id not in self._inflight:
            # Answer owed later (a write or sync to wait for): bound what one
            # connection may have in flight.
            self._inflight[req.id] = size
            self._inflight_bytes += size
            if self._inflight_bytes > self.daemon.settings.max_inflight_bytes:
                self._pause("inflight")

    def redispatch(self, req: m.Request) -> None:
        """Run a request that was parked (behind a file scan) again."""
        self._run(req, self._inflight.get(req.id, 0))
        if self.closing:  # the client left meanwhile: what it attached to, it leaves
            for sid in list(self.sessions):
                self.detach(sid, dropped=True)

    def _greet(self, req: m.Request) -> None:
        if not isinstance(req, m.Hello):
            self._send_now(m.Error(id=req.id, code="bad_request", message="the first message must be Hello"))
            self.close()
            return
        if req.protocol_version != m.PROTOCOL_VERSION:
            exc = VersionMismatch(
                f"client speaks protocol {req.protocol_version}, daemon speaks {m.PROTOCOL_VERSION}"
            )
            self._send_now(m.Error(id=req.id, code=exc.code, message=exc.message))
            self.close()
            return
        self.greeted = True
        self.peer = f"client {self.id} ({req.client or 'unnamed'}, pid {req.pid})"
        self._throttle_log.client = self.peer
        self.reply(m.Welcome(id=req.id, protocol_version=m.PROTOCOL_VERSION, daemon_version=__version__, pid=os.getpid(),
                             max_frame_bytes=self.daemon.settings.max_frame))

    # ------------------------------------------------------------------- sessions

    def attach(self, state: SessionState) -> None:
        if state.id not in self.sessions:
            self.sessions[state.id] = state
            self.daemon.registry.attach(state, self.id)

    def detach(self, session_id: str, dropped: bool = False) -> FileQueue | None:
        """Leave a session (``dropped``: the connection went away without a
        Close); returns the queue of an exit-cleanup re-append."""
        state = self.sessions.pop(session_id, None)
        if state is None:
            return None
        return self.daemon.registry.detach(state, self.id, dropped)

    # -------------------------------------------------------------------- output

    def reply(self, resp: m.Response) -> None:
        """Queue a response; all responses of one loop pass go out in one write."""
        if self.transport is None:
            return
        owed = self._inflight.pop(resp.id, None)
        if owed is not None:
            self._inflight_bytes -= owed
            if "inflight" in self._pauses and self._inflight_bytes <= self.daemon.settings.max_inflight_bytes // 2:
                self._unpause("inflight")
        self._out.append(encode(resp))
        if not self._out_scheduled:
            self._out_scheduled = True
            self.daemon.outbox.add(self)

    def _flush_out(self) -> None:
        self._out_scheduled = False
        if self._out and self.transport is not None:
            out, self._out = self._out, []
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _send_now(self, resp: m.Response) -> None:
        self._out.append(encode(resp))
        self._flush_out()

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self._flush_out()
            self.transport.close()
