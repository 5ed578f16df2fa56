"""The mirror's publishing pump: the connection to NATS and what goes over it.

Why its own module: the ``Mirror`` (``engine``) is what the daemon sees (the
hooks into appends, status) and ``TrackedFiles`` the files to mirror; the pump
is what runs, and it changes for other reasons (the wire's failure modes): connect and check the
stream, take a file's next range from the backlog and publish it with the
sequence the previous range got, advance the file's watermark on the ack, and
on any failure (a lost connection, an ack that does not come, a range the
stream refuses) forget what is in flight and start again from the
watermarks. One range per file is in flight at a time (each expects the
previous one's sequence), so a file's writes pile up into the next, bigger
range meanwhile (ack-clocked batching).

``Pump`` is one part of the ``Mirror``: it owns the connection, what is in
flight and the publishing counters; it takes its work from the
``TrackedFiles`` it is given, its ranges from the ``Backlog``, and tells the
``StateFile`` when watermarks moved.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from typing import Any

from sessiond.config import MirrorSettings
from sessiond.mirror.stream_format import HDR_OFFSET, read_range
from sessiond.secrets import mask_lines
from sessiond.store.crc import crc32

from . import waiters
from .backlog import Backlog
from .jetstream import (
    HDR_EXPECTED_SEQ,
    HDR_MSG_ID,
    WRONG_LAST_SEQUENCE,
    AckInbox,
    ForeignRange,
    MirrorFailure,
    connect,
    ensure_stream,
    remote_end,
)
from .statefile import StateFile
from .tracking import Errors, TrackedFile, TrackedFiles

log = logging.getLogger("sessiond")

DISCONNECTED = "disconnected with acknowledgements outstanding"

MAX_MESSAGE = 256 * 1024
"""Largest range in one message (also kept under the server's max_payload)."""
HEADER_ROOM = 8 * 1024
MAX_INFLIGHT_BYTES = 16 * 1024 * 1024
MAX_INFLIGHT_MSGS = 2048
RETRY_MIN, RETRY_MAX = 0.1, 5.0
TICK = 0.5
"""The pump's housekeeping period: ack timeouts, waiter deadlines, eviction."""


async def _tick(event: asyncio.Event) -> None:
    """Wait for ``event``, at most ``TICK``."""
    try:
        async with asyncio.timeout(TICK):
            await event.wait()
    except TimeoutError:
        pass


def range_limit(*caps: int | None) -> int:
    """The most bytes of a file one message carries: ``MAX_MESSAGE``, less when
    a cap on whole messages (the server's max_payload, the stream's
    max_msg_size; headers included) is smaller: room is left for the headers."""
    limit = MAX_MESSAGE
    for cap in caps:
        if cap is not None and cap > 0:
            limit = min(limit, max(cap // 2, cap - HEADER_ROOM))
    return limit


def _same_range(local: bytes, remote: bytes) -> bool:
    """Whether the stream's copy of a range is the local file's: as written, or
    as ``redact`` masked it (whichever the daemon that sent it was set to)."""
    return local == remote or (len(local) == len(remote) and mask_lines(local) == remote)

class Pump:
    """Publishes the tracked files' next ranges over one NATS connection and
    advances their watermarks on the acks; see the module docstring."""

    def __init__(self, cfg: MirrorSettings, loop: asyncio.AbstractEventLoop, tracked: TrackedFiles,
                 backlog: Backlog, state: StateFile, errors: Errors, *, name: str, forever: bool) -> None:
        self.cfg = cfg
        self.loop = loop
        self.tracked = tracked
        self.backlog = backlog
        self.state = state
        self.errors = errors
        self.name = name
        self.forever = forever
        self._wake = tracked.wake
        self._acked_evt = asyncio.Event()
        self._fail: BaseException | None = None
        self.nc: Any = None
        self.js: Any = None
        self.ready = False  # connected and the stream checked
        self.failing = False  # a publish failed; cleared by the next acknowledgement
        self.epoch = 0
        self.inflight_bytes = 0
        self.inflight_msgs = 0
        self.published = 0
        self.published_bytes = 0
        self._task: asyncio.Task | None = None
        self._closing = False
        self._housekept = 0.0
        self._last_log = ("", 0.0)
        self._max_message = MAX_MESSAGE
        self.acks = AckInbox(loop)

    @property
    def healthy(self) -> bool:
        """Connected, the stream checked, and the last publish did not fail."""
        return self.ready and not self.failing and self.nc is not None and self.nc.is_connected

    def start(self) -> None:
        """Connect and publish from now on, retrying with backoff until ``stop``."""
        self._task = self.loop.create_task(self._run())

    async def stop(self) -> None:
        """Stop publishing (what is in flight stays unacknowledged: the
        watermarks say where the next run goes on)."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])  # its end, whatever it was; a cancellation of the caller still reaches it
            if not self._task.cancelled():
                self._task.exception()  # retrieved: a failure while stopping is of no use (and not logged as lost)

    async def disconnect(self) -> None:
        """Close the connection (bounded: a server that does not answer is left)."""
        if self.nc is not None:
            try:
                async with asyncio.timeout(2.0):
                    await self.nc.close()
            except Exception:
                pass

    async def _run(self) -> None:
        delay = RETRY_MIN
        while not self._closing:
            published = self.published
            try:
                await self._connect()
                await self._pump()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failed(exc)
            if self.published != published:
                delay = RETRY_MIN
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)

    async def _connect(self) -> None:
        if self.nc is None or self.nc.is_closed:
            self.ready = False
            nc = await connect(
                self.cfg, self.name, forever=self.forever, error_cb=self._nats_error,
                disconnected_cb=self._disconnected, reconnected_cb=self._reconnected,
            )
            try:
                self.js = nc.jetstream(timeout=self.cfg.ack_timeout)
                await self.acks.subscribe(nc)
            except BaseException:
                with contextlib.suppress(Exception):
                    await nc.close()  # half set up: the next attempt starts from a new connection
                raise
            self.nc = nc
            log.info("mirror: connected to %s", self.nc.connected_url.netloc if self.nc.connected_url else self.cfg.servers)
        await self._wait_connected()
        if not self.ready:
            stream_limit = await ensure_stream(self.js, self.cfg)
            self._max_message = range_limit(self.nc.max_payload, stream_limit)
            self.ready = True
            self.errors.last = None

    async def _nats_error(self, exc: Exception) -> None:
        """Connection attempts that fail (the server is down): shown in status."""
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if not self.healthy:
            self.errors.last = why
        now = time.monotonic()
        if why != self._last_log[0] or now - self._last_log[1] > 30:
            log.warning("mirror: nats: %s", why)
            self._last_log = (why, now)

    async def _disconnected(self) -> None:
        if not self._closing:
            log.warning("mirror: disconnected from NATS; writes go on locally and are caught up later")
            self.errors.note("disconnected from NATS")
            self.tracked.fail_waiters("disconnected from NATS")
            self._wake.set()

    async def _reconnected(self) -> None:
        log.info("mirror: reconnected to NATS")
        self._wake.set()

    async def _wait_connected(self) -> None:
        while not self.nc.is_connected:
            if self.nc.is_closed:
                raise MirrorFailure("connection closed")
            self._wake.clear()
            self._housekeeping()
            await _tick(self._wake)

    async def _pump(self) -> None:
        while not self._closing:
            if self._fail is not None:
                raise self._fail
            if not self.nc.is_connected:
                if self.inflight_msgs:
                    # Unacknowledged ranges may or may not have arrived: resend from
                    # the watermark after the reconnect (a range that did arrive is
                    # refused by its expected sequence and recognised by _resolve).
                    raise MirrorFailure(DISCONNECTED)
                self.ready = False
                await self._wait_connected()
                raise MirrorFailure("reconnected")  # check the stream again, then go on
            work = self.tracked.work
            f = next(iter(work), None)
            if f is None:
                if not self.inflight_msgs:
                    self.failing = False  # everything handed over was acknowledged
                self._wake.clear()
                await _tick(self._wake)
                self._housekeeping()
                continue
            if f.broken or (f.resolved and f.sent >= f.size):
                del work[f]
                continue
            if not f.resolved:
                await self._resolve(f)  # on an error f stays queued
                continue
            if f.inflight:
                # One range in flight per file (each expects the previous one's
                # sequence); meanwhile its writes pile up into the next, bigger
                # range: ack-clocked batching. Its ack reschedules it.
                del work[f]
                continue
            if self.inflight_bytes >= MAX_INFLIGHT_BYTES or self.inflight_msgs >= MAX_INFLIGHT_MSGS:
                self._acked_evt.clear()
                await _tick(self._acked_evt)
                self._housekeeping()
                continue
            del work[f]
            start = f.sent
            try:
                data = self.backlog.take(f, self._max_message)
            except OSError as exc:
                self.tracked.mark_broken(f, f"cannot read it back: {exc.strerror or exc}")
                continue
            if not data:
                continue
            if self.cfg.redact:  # the same length: offsets and watermarks are the file's
                data = mask_lines(data)
            end = start + len(data)
            epoch = self.epoch
            headers = dict(f.headers)
            headers[HDR_OFFSET] = str(start)
            headers[HDR_EXPECTED_SEQ] = str(f.last_seq)
            headers[HDR_MSG_ID] = f"{f.subject}:{start}-{end}:{crc32(data):08x}"
            fut = await self.acks.publish(f.subject, data, headers)
            if epoch != self.epoch:  # a failure reset everything meanwhile
                fut.cancel()
                continue
            f.sent = end
            f.inflight.append((end, fut, self.loop.time(), len(data)))
            self.tracked.busy.add(f)
            self.inflight_bytes += len(data)
            self.inflight_msgs += 1
            fut.add_done_callback(functools.partial(self._acked, f, epoch))

    async def _resolve(self, f: TrackedFile) -> None:
        """Where does the stream's copy of ``f`` end? Catch up from there."""
        try:
            end, last_start, last, seq = await remote_end(self.js, self.cfg.stream, f.subject, f.headers)
        except ForeignRange as exc:
            self.tracked.mark_broken(f, str(exc))
            return
        try:
            local_size = os.stat(f.path).st_size
        except FileNotFoundError:
            self.tracked.mark_broken(f, "the file is gone")
            return
        if end > local_size:
            self.tracked.mark_broken(
                f, f"the stream holds {end} bytes of it, the local file {local_size}: the session was written on another machine")
            return
        if last and not _same_range(read_range(f.path, last_start, len(last)), last):
            self.tracked.mark_broken(f, f"the local file differs from the stream's copy at offset {last_start}")
            return
        f.acked = f.sent = end
        f.last_seq = seq
        f.resolved = True
        self.failing = False
        self.state.changed()
        if end < f.size:
            log.info("mirror: %s: the stream has %d of its %d bytes; catching up from there", f.path.name, end, f.size)

    def _acked(self, f: TrackedFile, epoch: int, fut: asyncio.Future) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if epoch != self.epoch:
            return
        if exc is not None:
            if getattr(exc, "err_code", None) == WRONG_LAST_SEQUENCE:
                self._lost_track(f)
            elif self._fail is None:
                self._fail = exc
            self._wake.set()
            return
        inflight = f.inflight
        while inflight and inflight[0][1].done():
            end, head, _, size = inflight[0]
            if head.cancelled() or head.exception() is not None:
                break
            inflight.popleft()
            self.failing = False
            f.acked = end
            f.last_seq = head.result()
            self.inflight_bytes -= size
            self.inflight_msgs -= 1
            self.published += 1
            self.published_bytes += size
        self._acked_evt.set()
        self.state.changed()
        if f.waiters:
            waiters.release(f)
        if not inflight and not f.waiters:
            self.tracked.busy.discard(f)
        if f.sent < f.size and not inflight:
            self.tracked.schedule(f)

    def _lost_track(self, f: TrackedFile) -> None:
        """The stream's last range of ``f`` is not the one we expected: our own
        range that arrived unacknowledged, or another machine's. Ask the stream
        again (``_resolve`` tells them apart by comparing bytes)."""
        for _, fut, _, size in f.inflight:
            fut.cancel()
            self.inflight_bytes -= size
            self.inflight_msgs -= 1
        f.inflight.clear()
        f.sent = f.acked
        f.resolved = False
        self.tracked.schedule(f)

    def _failed(self, exc: BaseException) -> None:
        """Forget everything in flight; the pump restarts from the watermarks."""
        self.epoch += 1
        self._fail = None
        self.ready = False  # the stream is checked again before going on
        reconnected = isinstance(exc, MirrorFailure) and str(exc) == "reconnected"
        if not reconnected:
            self.failing = True
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if str(exc) != DISCONNECTED:  # counted by _disconnected already
                self.errors.note(why)
            else:
                self.errors.last = why
            now = time.monotonic()
            if why != self._last_log[0] or now - self._last_log[1] > 30:
                log.warning("mirror: %s; retrying (writes go on locally)", why)
                self._last_log = (why, now)
        tracked = self.tracked
        for f in list(tracked.busy):
            for _, fut, _, _ in f.inflight:
                fut.cancel()  # frees the client's pending-ack slots
            f.inflight.clear()
        for f in tracked.files.values():
            if f.broken:
                continue
            if f.resolved and f.sent > f.acked:
                f.sent = f.acked
            if not f.resolved or f.sent < f.size:
                tracked.schedule(f)
        self.inflight_bytes = self.inflight_msgs = 0
        if not reconnected:
            tracked.fail_waiters(self.errors.last or "")
        tracked.busy = {f for f in tracked.busy if f.waiters}

    def _housekeeping(self) -> None:
        now = self.loop.time()
        if now - self._housekept < TICK:
            return
        self._housekept = now
        for f in list(self.tracked.busy):
            if f.inflight and now - f.inflight[0][2] > self.cfg.ack_timeout:
                if self._fail is None:
                    self._fail = MirrorFailure(f"no acknowledgement from JetStream within {self.cfg.ack_timeout:g}s")
            if f.waiters:
                waiters.expire(f, now, f"written locally, but the mirror did not confirm it within {3 * self.cfg.ack_timeout:g}s")
        self.state.save_due(now)
        self.tracked.evict()
