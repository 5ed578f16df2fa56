"""One client connection, as an ``asyncio.Protocol``.

A Protocol (buffering and splitting frames ourselves) skips the StreamReader's
per-read coroutine and buffer copies, so the hot path stays on it; this module is
the only place that knows. Frames are split by the shared ``FrameBuffer``; the first frame
must be ``Hello``. Responses are collected and written once per event-loop pass,
so a pipelining client gets its acks in one write. A connection that goes away
without ``Close`` gets the same exit cleanup as one that says goodbye.

What a connection may make the daemon hold is bounded (``bounds.py``): its
partial frame is charged to the daemon-wide partial-frame budget as it arrives
(a big one waits, unread, until it fits); answers it does not read stop it from
being read and from being served (``pause_writing``/``resume_writing``), and so
do too many answers still owed. Frames already split off but not yet served
wait in a backlog of at most one read's worth.

A client may half-close (``shutdown(SHUT_WR)``: ``printf frames | nc -N``, a
script that pipes a batch): its read EOF ends only the reading. Every frame it
sent is still served and every answer it is owed (a ``durable`` ack after its
fsync included) is still written; the connection closes once nothing is owed
(a subscription's stream is not an answer owed: it ends with the close). Its
answers stay under the output budget like anyone's.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import select
import socket
import struct
import threading
from collections import deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, cast

from sessiond import __version__
from sessiond.wire import messages as m
from sessiond.wire.errors import BAD_REQUEST, BUSY, FrameTooLarge, ProtocolError, SessiondError, VersionMismatch
from sessiond.wire.framing import FrameBuffer, decode_request, encode, request_id_of

from .bounds import ADMIT, REFUSE, PartialCharge
from .handlers import dispatch
from .limits import ThrottleLog, TokenBucket

if TYPE_CHECKING:
    from .server import Daemon
    from .session_state import SessionState

log = logging.getLogger("sessiond")
_ids = itertools.count(1)
_UCRED = struct.Struct("3i")
HOLDING = frozenset({"output", "inflight"})
"""Pauses that also stop serving frames already read, not only reading more."""
GATHER_AT = 16 * 1024
"""Output of a pass this big goes to the socket as its parts (one ``writev``),
not joined first: a watcher's frame is mostly lines shared with the other
watchers of the same writes, and joining would copy them once more per watcher.
Below it, one join of a few small answers costs less than the parts' buffers."""


def peer_closed(sock: socket.socket) -> bool:
    """After a read EOF: did the peer close its socket, not only shut down its
    writing side? A Unix socket whose peer is gone polls ``POLLHUP``; a
    half-closed one only readable (EOF). Without ``poll``, not known: False."""
    if not hasattr(select, "poll"):
        return False
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLOUT)
    return any(events & select.POLLHUP for _, events in poller.poll(0))


def peer_uid(sock: socket.socket) -> int | None:
    """The connecting process's uid (SO_PEERCRED on Linux, getpeereid elsewhere)."""
    if hasattr(socket, "SO_PEERCRED"):
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
        return _UCRED.unpack(raw)[1]
    try:
        return os.getpeereid(sock.fileno())[0]  # type: ignore[attr-defined]  # BSD and macOS only (AttributeError elsewhere, caught)
    except (AttributeError, OSError):
        return None


class Connection(asyncio.Protocol):
    """One client's connection: splits its frames, serves its requests in
    order through ``dispatch``, collects its answers for the end of the pass
    (``Outbox``), and bounds what the client can make the daemon hold."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.id = next(_ids)
        self.transport: asyncio.Transport | None = None
        self.frames = FrameBuffer(daemon.settings.max_frame)
        self.greeted = False
        self.pid = 0
        self.client_name = ""
        self.sessions: dict[str, SessionState] = {}
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._out_soft = daemon.settings.max_output_bytes // 2
        """Answers collected in this pass past which no more requests are served
        until they are sent (the transport's own buffer has the other half)."""
        self._out_scheduled = False
        self._pauses: set[str] = set()
        self._holding = False  # a pause in HOLDING is on
        self._backlog: deque[bytes | memoryview] = deque()
        self._partial = PartialCharge(daemon.bounds)
        self.closing = False
        settings = daemon.settings
        self.peer = f"client {self.id}"
        self._bucket = TokenBucket(settings.rate_bytes, settings.rate_burst) if settings.rate_bytes else None
        self._throttle_log = ThrottleLog(self.peer)
        self._inflight: dict[int, int] = {}  # request id -> bytes, for answers still owed
        self._inflight_bytes = 0
        self._stall: asyncio.TimerHandle | None = None
        self.read_eof = False
        """The client half-closed: nothing more to read, answers still owed."""
        self.gone = threading.Event()
        """Set when the connection is lost: a worker making its answer (a
        Search's query) may stop, nobody will read it."""
        self._tasks: set[asyncio.Task] = set()

    # ------------------------------------------------------------------- transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = stream = cast(asyncio.Transport, transport)  # a stream socket's transport
        sock = transport.get_extra_info("socket")
        uid = peer_uid(sock) if sock is not None else None
        if uid is not None and uid != os.getuid():
            log.warning("refused a client of uid %d", uid)
            self._send_now(m.Error(id=0, code="permission_denied", message="this daemon serves only its own user"))
            self.close()
            return
        try:
            self.daemon.bounds.check_clients(len(self.daemon.connections))
        except SessiondError as exc:
            log.warning("refused a connection: %s", exc)
            self._send_now(m.Error(id=0, code=exc.code, message=exc.message))
            self.close()
            return
        high = self.daemon.settings.max_output_bytes // 2
        stream.set_write_buffer_limits(high=high, low=high // 4)
        self.daemon.connections.add(self)

    def data_received(self, data: bytes) -> None:
        try:
            bodies = self.frames.feed(data)
        except FrameTooLarge as exc:
            log.warning("%s: %s; closing", self.peer, exc)
            self._send_now(m.Error(id=0, code=exc.code, message=exc.message))
            self.close()
            return
        if self._backlog:
            self._backlog.extend(bodies)
            self._serve_backlog()
        else:
            for i, body in enumerate(bodies):
                if self.closing:
                    return
                if self._holding or self._out_bytes >= self._out_soft:
                    self._backlog.extend(bodies[i:])
                    self._pause("backlog")
                    break
                self._handle(body)
        pending = self.frames.pending
        if self._partial.charged or pending:
            self._charge_partial(bool(bodies))
            if self.closing:
                return
        if self._stall is not None or pending:
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
        if reason in HOLDING:
            self._holding = True

    def _unpause(self, reason: str) -> None:
        if reason not in self._pauses:
            return
        self._pauses.discard(reason)
        if reason in HOLDING:
            self._holding = not HOLDING.isdisjoint(self._pauses)
            if self._backlog and not self._holding:
                self.daemon.loop.call_soon(self._serve_backlog)
        if not self._pauses and self.transport is not None and not self.closing:
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        """The transport holds more unsent answers than its high-water mark: a
        client that does not read gets nothing more served or read; past the
        daemon-wide budget of such answers, it is disconnected."""
        self._pause("output")
        self.daemon.fair.hold(self.id)  # its expensive requests read already wait too
        if not self.daemon.bounds.stopped_reading(self) and self.transport is not None:
            log.warning("%s does not read its answers (%d bytes unsent) and clients like it hold more than %d "
                        "bytes: disconnected", self.peer, self.output_bytes, self.daemon.settings.max_output_total_bytes)
            self.closing = True
            self.transport.abort()

    def resume_writing(self) -> None:
        self.daemon.bounds.reading_again(self)
        self.daemon.fair.release(self.id)
        self._unpause("output")
        self.daemon.watchers.drained(self)

    def _serve_backlog(self) -> None:
        """Serve frames read earlier, until a holding pause or the output budget
        stops it again; read again once they are all served."""
        backlog = self._backlog
        while backlog and not self.closing:
            if self._holding or self._out_bytes >= self._out_soft:
                return
            self._handle(backlog.popleft())
        self._unpause("backlog")

    def _charge_partial(self, progressed: bool) -> None:
        """Charge the frame being received to the daemon-wide budget; a big one
        that does not fit waits, unread, its stall clock stopped."""
        waiting = "partial" in self._pauses
        verdict = self._partial.update(self.frames, progressed, waiting)
        if verdict == ADMIT:
            if waiting:
                self.daemon.bounds.forget_partial(self)
                self._unpause("partial")
            return
        bounds, limit = self.daemon.bounds, self.daemon.settings.max_partial_bytes
        if verdict == REFUSE:
            log.warning("%s: refused a %d-byte frame: frames being received already hold %d of %d bytes",
                        self.peer, self.frames.announced, bounds.partial_bytes, limit)
            self._send_now(m.Error(id=0, code=BUSY, message=(
                f"the daemon is receiving {bounds.partial_bytes} bytes of frames already (budget {limit}); retry later")))
            self.close()
        elif not waiting:
            log.info("%s: a %d-byte frame waits for the partial-frame budget (%d of %d bytes in use)",
                     self.peer, self.frames.announced, bounds.partial_bytes, limit)
            self._pause("partial")
            bounds.wait_partial(self)
            if self._stall is not None:
                self._stall.cancel()
                self._stall = None

    def retry_partial(self) -> bool:
        if self.closing:
            return True  # gone: let the next waiter have its turn
        self._charge_partial(False)
        if "partial" in self._pauses:
            return False
        self._watch_stall(True)
        return True

    def _watch_stall(self, progressed: bool) -> None:
        """A client that stops in the middle of a frame is cut off after
        ``frame_timeout``: it would otherwise hold its buffer forever. The clock
        does not run while the daemon itself holds the frame back."""
        if progressed and self._stall is not None:
            self._stall.cancel()
            self._stall = None
        if self.frames.pending and self._stall is None and "partial" not in self._pauses:
            self._stall = self.daemon.loop.call_later(self.daemon.settings.frame_timeout, self._stalled)

    def _stalled(self) -> None:
        self._stall = None
        if self._pauses and "output" not in self._pauses:
            # Not read by the daemon's own choice (a budget, the rate limit, a
            # full queue): the client is not the one stalling. One that does
            # not read its answers is.
            self._watch_stall(False)
            return
        if self.frames.pending and not self.closing:
            log.warning("%s stalled inside a frame (%d bytes) for %.0f s; closing", self.peer, self.frames.pending,
                        self.daemon.settings.frame_timeout)
            self._send_now(m.Error(id=0, code="bad_request", message="timed out inside a frame"))
            self.close()

    def eof_received(self) -> bool:
        """The client will send nothing more; keep the transport open to write
        what it is owed (``False`` here would close it with answers unsent),
        unless it closed its socket altogether."""
        if self.frames.pending:
            log.warning("%s: connection ended inside a frame (%d bytes)", self.peer, self.frames.pending)
        self.read_eof = True
        if self._stall is not None:  # no more bytes are coming: the frame never completes
            self._stall.cancel()
            self._stall = None
        self._partial.release()
        self.daemon.bounds.forget_partial(self)
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is not None and peer_closed(sock):
            # Gone, not half-closed: no answer can reach it, so what it asked
            # for stops now (``connection_lost``), not after its first answer
            # meets EPIPE. What it had sent and was accepted stays accepted.
            self.closing = True
            self.transport.abort()  # type: ignore[union-attr]  # set in connection_made, before any frame
            return True
        self._close_if_done()
        return True

    def _close_if_done(self) -> None:
        """After a half-close: close once every frame read is served and every
        answer owed is made (``close`` sends them first)."""
        if self.read_eof and not self.closing and not self._backlog and not self._inflight:
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self._stall is not None:
            self._stall.cancel()
        self._backlog.clear()
        self._partial.release()
        self.daemon.bounds.forget_partial(self)
        self.daemon.bounds.reading_again(self)
        # What it asked for ends with it: answers not started are dropped, a
        # running Search is stopped, a request waiting (for the indexer to
        # catch up, for writes) is cancelled; scans others wait for run out.
        self.gone.set()
        self.daemon.fair.drop(self.id)
        for task in list(self._tasks):
            task.cancel()
        self.daemon.connections.discard(self)
        for sid in list(self.sessions):
            self.detach(sid, dropped=True)
        self.daemon.leases.release_all(self.id)
        self.daemon.watchers.drop_connection(self)
        self.transport = None

    # -------------------------------------------------------------------- requests

    def _handle(self, body: bytes | memoryview) -> None:
        try:
            req = decode_request(body)
        except ProtocolError as exc:
            self.reply(m.Error(id=request_id_of(body), code=exc.code, message=exc.message))
            return
        if not self.greeted:
            self._greet(req)
            return
        if req.id in self._inflight:
            # Its answer could not be told from the earlier one's, and it would
            # escape the in-flight budget: refuse it, the earlier one stands.
            # This refusal is no answer to the earlier one: it leaves it owed.
            self._queue_out(encode(m.Error(id=req.id, code=BAD_REQUEST,
                                           message=f"request id {req.id} is still awaiting its answer on this connection")))
            return
        self._run(req, len(body))

    def _run(self, req: m.Request, size: int) -> None:
        self.daemon.fair.current = self.id  # expensive work this request causes is its share
        redispatched = req.id in self._inflight  # parked earlier: owed already
        if not redispatched:
            # Owed from before its handler runs: a handler may answer at once
            # from inside (a Close whose queues are written already), and an
            # entry made after that answer would stay owed for good, keeping
            # a half-closed (or exited) client's connection open forever.
            self._inflight[req.id] = size
            self._inflight_bytes += size
        try:
            resp = dispatch(self, req)
        except SessiondError as exc:
            resp = m.Error(id=req.id, code=exc.code, message=exc.message, holder=getattr(exc, "holder", None))
        except RecursionError:  # an entry nested deeper than any decoder goes: bad input, not a bug
            resp = m.Error(id=req.id, code=BAD_REQUEST, message="an entry is nested too deeply")
        except Exception as exc:  # a bug: report it, keep serving everyone else
            log.exception("%s: internal error on %s", self.peer, type(req).__name__)
            self.daemon.stats.errors += 1
            resp = m.Error(id=req.id, code="internal", message=f"internal error: {exc}")
        if resp is not None:
            self.reply(resp)
        elif self.closing:
            self._settle(req.id)  # nobody is left to answer
        elif not redispatched and req.id in self._inflight:
            # Answer owed later (a write or sync to wait for): bound what one
            # connection may have in flight.
            settings = self.daemon.settings
            if self._inflight_bytes > settings.max_inflight_bytes or len(self._inflight) > settings.max_inflight_requests:
                self._pause("inflight")

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` (making an answer for this connection) as a task that
        is cancelled if the connection is lost first."""
        if self.closing:
            work.close()
            return
        task = self.daemon.loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
        self.pid, self.client_name = req.pid, req.client
        self.peer = f"client {self.id} ({req.client or 'unnamed'}, pid {req.pid})"
        self._throttle_log.client = self.peer
        self.reply(m.Welcome(id=req.id, protocol_version=m.PROTOCOL_VERSION, daemon_version=__version__, pid=os.getpid(),
                             max_frame_bytes=self.daemon.settings.max_frame, root=os.path.abspath(self.daemon.settings.root)))

    # ------------------------------------------------------------------- sessions

    def attach(self, state: SessionState) -> None:
        if state.id not in self.sessions:
            self.daemon.bounds.check_attached(len(self.sessions))
            self.sessions[state.id] = state
            self.daemon.registry.attach(state, self.id)

    def detach(self, session_id: str, dropped: bool = False) -> SessionState | None:
        """Leave a session (``dropped``: the connection went away without a
        Close); returns it, None when this connection was not in it."""
        self.daemon.leases.release(session_id, self.id)
        state = self.sessions.pop(session_id, None)
        if state is not None:
            self.daemon.registry.detach(state, self.id, dropped)
        return state

    # -------------------------------------------------------------------- output

    def reply(self, resp: m.Response) -> None:
        """Queue a response; all responses of one loop pass go out in one write."""
        if self.transport is not None:
            self.reply_encoded(resp.id, encode(resp))

    def reply_encoded(self, rid: int, frame: bytes) -> None:
        """Queue the answer to request ``rid``, already encoded (a List page
        made in a worker: the loop does not touch its bytes)."""
        if self.transport is None:
            return
        self._settle(rid)
        self._queue_out(frame)

    def _settle(self, rid: int) -> None:
        """Request ``rid`` is owed no answer any more."""
        owed = self._inflight.pop(rid, None)
        if owed is not None:
            self._inflight_bytes -= owed
            if "inflight" in self._pauses:
                settings = self.daemon.settings
                if (self._inflight_bytes <= settings.max_inflight_bytes // 2
                        and len(self._inflight) <= settings.max_inflight_requests // 2):
                    self._unpause("inflight")

    def push(self, parts: tuple[bytes, ...]) -> None:
        """Queue a frame the client did not ask for by a request of its own (a
        subscription's ``Entries``), given as the ``parts`` it joins to: a part
        several connections send (one write's lines, sent to each of its
        watchers) is queued as the same bytes to all of them, not copied per
        connection before the write. It counts whole against this connection's
        output like any answer; no request is settled by it."""
        if self.transport is None:
            return
        self._out.extend(parts)
        self._out_bytes += sum(map(len, parts))
        if self._out_bytes >= self._out_soft:  # as ``_queue_out``
            self.daemon.fair.hold(self.id)
        if not self._out_scheduled:  # after the connections with answers (``Outbox``)
            self._out_scheduled = True
            self.daemon.outbox.add_push(self)

    def _queue_out(self, frame: bytes) -> None:
        if self.transport is None:
            return
        self._out.append(frame)
        self._out_bytes += len(frame)
        if self._out_bytes >= self._out_soft:  # its next expensive job waits until this is sent
            self.daemon.fair.hold(self.id)
        if not self._out_scheduled:
            self._out_scheduled = True
            self.daemon.outbox.add(self)

    def send_answers(self) -> None:
        """Write every answer collected so far in one ``transport.write``: the
        outbox calls it at the end of the pass, ``close`` and refusals at once."""
        self._out_scheduled = False
        if self._out and self.transport is not None:
            out, self._out = self._out, []
            size, self._out_bytes = self._out_bytes, 0
            if len(out) == 1:
                self.transport.write(out[0])
            elif size >= GATHER_AT:
                self.transport.writelines(out)
            else:
                self.transport.write(b"".join(out))
            if "output" not in self._pauses:  # the socket took it (else resume_writing releases)
                self.daemon.fair.release(self.id)
            if self._backlog and not self._holding and not self.closing:
                self.daemon.loop.call_soon(self._serve_backlog)
        self._close_if_done()

    @property
    def output_bytes(self) -> int:
        """Answers made and not yet taken by the client."""
        pending = self.transport.get_write_buffer_size() if self.transport is not None else 0
        return self._out_bytes + pending

    def budget_use(self) -> tuple[int, int, int, int]:
        """(output bytes, in-flight requests, in-flight bytes, partial frame bytes)."""
        return self.output_bytes, len(self._inflight), self._inflight_bytes, self.frames.pending

    def _send_now(self, resp: m.Response) -> None:
        self._out.append(encode(resp))
        self.send_answers()

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.send_answers()
            self.transport.close()
