"""The Mirror: a writer observer feeding a publishing pump (see the package
docstring for the design).

Why it exists: this is the one place that holds the mirror's moving state (the
tracked files, the work queue, the connection, the counters) and runs the
pump: connect, resolve a file's remote end, publish its next range, advance
its watermark on the ack, start over from the watermarks on a failure. The
pieces with a narrow interface live next to it: ``tracking`` (one file's
watermarks), ``backlog`` (written bytes held in memory, cutting a range),
``waiters`` (required mode's durable acks), ``statefile`` (what the next run
catches up), ``jetstream`` (the wire: connection, stream, acks).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sessiond.protocol.remote import (
    HDR_OFFSET,
    file_ref,
    read_range,
    whole_lines_size,
)
from sessiond.protocol.transcript.paths import projects_dir
from sessiond.protocol.transcript.regular import NotRegularFile
from sessiond.protocol.wire.errors import SessiondError

from sessiond.common.config import MirrorSettings
from .backlog import Backlog
from .jetstream import (
    HDR_EXPECTED_SEQ,
    HDR_MSG_ID,
    WRONG_LAST_SEQUENCE,
    AckInbox,
    MirrorFailure,
    connect,
    ensure_stream,
    mirror_error,
    remote_end,
    require_client,
)
from . import waiters
from .statefile import RECOVERY_SLACK, load_state, recently_written, save_state
from .tracking import TrackedFile

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
STATE_EVERY = 2.0
"""How often the state file is rewritten while files lag (a rename costs ~0.5 ms)."""
IDLE_EVICT = 30.0
CLEAN_REMEMBERED = 10_000

# --------------------------------------------------------------------- the mirror


class Mirror:
    """Publishes what the Writer writes; see the module docstring."""

    def __init__(self, cfg: MirrorSettings, root: Path, loop: asyncio.AbstractEventLoop, *,
                 state_file: Path | None = None, name: str = "sessiond", forever: bool = True) -> None:
        self.cfg = cfg
        self.forever = forever
        self.projects = projects_dir(root)
        self.loop = loop
        self.state_file = state_file
        self.name = name
        self.files: dict[Path, TrackedFile] = {}
        self._ignored: set[Path] = set()
        self._clean: OrderedDict[Path, tuple[int, int]] = OrderedDict()  # evicted, mirrored: path -> (size, last_seq)
        self._work: dict[TrackedFile, None] = {}  # ordered set: files with something to do
        self._busy: set[TrackedFile] = set()  # files with acks outstanding or waiters
        self._wake = asyncio.Event()
        self._acked_evt = asyncio.Event()
        self._fail: BaseException | None = None
        self.nc: Any = None
        self.js: Any = None
        self.ready = False  # connected and the stream checked
        self.failing = False  # a publish failed; cleared by the next acknowledgement
        self.epoch = 0
        self.backlog = Backlog(cfg)
        self.inflight_bytes = 0
        self.inflight_msgs = 0
        self.published = 0
        self.published_bytes = 0
        self.errors = 0
        self.last_error: str | None = None
        self.broken_sessions: dict[str, str] = {}
        self._task: asyncio.Task | None = None
        self._recovery: asyncio.Task | None = None
        self._closing = False
        self._state_dirty = False
        self._state_saved = 0.0
        self._housekept = 0.0
        self._last_log = ("", 0.0)
        self._max_message = MAX_MESSAGE
        self.acks = AckInbox(loop)
        require_client()

    # ------------------------------------------------------------- observing

    def observe(self, path: Path, lines: list[bytes], size: int) -> None:
        """Writer observer: called after every successful write. Cheap, never raises."""
        try:
            f = self.files.get(path) or self._track(path)
            if f is None:
                return
            n = len(lines)
            for line in lines:
                n += len(line)
            start = size - n
            f.touched = time.monotonic()
            if f.size < 0:
                f.size = start
                if start == 0:
                    f.resolved = True
                elif self._clean.get(path, (-1, 0))[0] == start:
                    f.acked = f.sent = start
                    f.last_seq = self._clean[path][1]
                    f.resolved = True
                self._clean.pop(path, None)
            elif start < f.size:
                self._break(f, f"{path.name} shrank under the daemon (known {f.size} bytes, written at {start})")
                return
            f.size = size
            if f.broken:
                return
            self._state_dirty = True
            self.backlog.keep(f, lines, start, n)
            self._schedule(f)
        except Exception:  # the mirror must never break a local write
            log.exception("mirror: observing %s failed", path)

    def gone(self, path: Path) -> None:
        """Gone observer: what was written of ``path`` no longer stands. A file
        still there (shrunk, replaced or rewritten by another writer) is no
        longer continued by its stream copy: it is marked diverged, never
        mirrored wrongly. A deleted one only stops being tracked (the stream
        keeps its history)."""
        try:
            if not path.exists():  # rare: one stat decides
                f = self.files.get(path)
                if f is not None and not f.inflight and not f.waiters:
                    self.backlog.drop(f)
                    self._work.pop(f, None)
                    del self.files[path]
                return
            f = self.files.get(path) or self._track(path)
            if f is not None:
                self._break(f, f"{path.name} was truncated, replaced or rewritten by another writer")
        except Exception:
            log.exception("mirror: %s gone: handling failed", path)

    def _track(self, path: Path) -> TrackedFile | None:
        if path in self._ignored:
            return None
        ref = file_ref(self.projects, path)
        if ref is None:
            self._ignored.add(path)
            log.warning("mirror: %s is not a transcript path the mirror knows; not mirrored", path)
            return None
        f = self.files[path] = TrackedFile(path, ref, self.cfg.subject_prefix)
        return f

    def track_existing(self, path: Path) -> TrackedFile | None:
        """Mirror a file as it is on disk (``push``, or a file a previous run left
        lagging): ask the stream where its copy ends, publish the rest."""
        try:
            size = whole_lines_size(path)
        except FileNotFoundError:
            return None
        except NotRegularFile as exc:
            log.warning("mirror: %s: %s; not mirrored", path, exc.strerror)
            return None
        f = self.files.get(path) or self._track(path)
        if f is None:
            return None
        f.size = max(f.size, size)
        self._schedule(f)
        return f

    def forget(self, path: Path) -> None:
        """Stop tracking a file that moved away (trash) or changed behind the
        writer (import): seen again, it is resolved against the stream like any
        file first seen at an offset > 0."""
        f = self.files.pop(path, None)
        if f is not None:
            self.backlog.drop(f)
            self._work.pop(f, None)

    def _schedule(self, f: TrackedFile) -> None:
        self._work[f] = None
        self._wake.set()

    def _break(self, f: TrackedFile, why: str) -> None:
        if f.broken:
            return
        f.broken = why
        self.errors += 1
        self.last_error = why
        self.broken_sessions[f.ref.session] = why
        log.error("mirror: %s: %s; this file is no longer mirrored", f.path, why)
        self.backlog.drop(f)
        waiters.fail(f, mirror_error(f"the mirror cannot take {f.path.name}: {why}"))

    # --------------------------------------------------- required-mode hooks

    @property
    def required(self) -> bool:
        return self.cfg.required

    @property
    def healthy(self) -> bool:
        """Connected, the stream checked, and the last publish did not fail."""
        return self.ready and not self.failing and self.nc is not None and self.nc.is_connected

    def check_session(self, session: str) -> None:
        """Required mode: refuse an append the mirror cannot take (SPEC 6)."""
        if not self.cfg.required:
            return
        why = self.broken_sessions.get(session)
        if why is not None:
            raise mirror_error(f"session {session} refuses appends: its remote copy diverged ({why})")
        if not self.healthy:
            reason = f": {self.last_error}" if self.last_error else ""
            raise mirror_error(
                f"the required mirror ({', '.join(self.cfg.servers)}) is unavailable{reason}; "
                f"appends are refused until it is back, so local and remote do not diverge"
            )

    def confirming(self, paths: Iterable[Path], done: Callable[[SessiondError | None], None]) -> Callable[[SessiondError | None], None]:
        """Wrap a ``durable`` ack in required mode: once the local fdatasync is
        done, also wait until JetStream acknowledged these files up to their size."""

        def after_local(err: SessiondError | None) -> None:
            if err is not None:
                done(err)
                return
            targets = []
            for p in paths:
                f = self.files.get(p)
                if f is None:
                    continue
                if f.broken:
                    done(mirror_error(f"written locally, but the mirror cannot take {p.name}: {f.broken}"))
                    return
                if not f.resolved or f.acked < f.size:
                    targets.append(f)
            if not targets:
                done(None)
                return
            if not self.healthy:
                done(mirror_error("written locally, but the required mirror is unavailable: not confirmed remotely"))
                return
            waiters.wait_for(targets, done, self.loop.time() + 3 * self.cfg.ack_timeout)
            self._busy.update(targets)

        return after_local

    def _fail_waiters(self, why: str) -> None:
        err = mirror_error(f"written locally, but not confirmed by the mirror: {why}")
        for f in list(self._busy):
            waiters.fail(f, err)

    # ---------------------------------------------------------------- status

    def lag(self) -> tuple[int, int]:
        """(lagging bytes, lagging files)."""
        total = files = 0
        for f in self.files.values():
            lag = f.lag
            if lag:
                total += lag
                files += 1
        return total, files

    def status(self) -> dict[str, str | int | float | bool | None]:
        lag, lag_files = self.lag()
        return {
            "servers": ",".join(self.cfg.servers),
            "stream": self.cfg.stream,
            "required": self.cfg.required,
            "connected": self.healthy,
            "queuedLines": self.backlog.lines,
            "queuedBytes": self.backlog.bytes,
            "lagBytes": lag,
            "lagFiles": lag_files,
            "inflight": self.inflight_msgs,
            "published": self.published,
            "publishedBytes": self.published_bytes,
            "errors": self.errors,
            "diverged": sum(1 for f in self.files.values() if f.broken),
            "lastError": self.last_error,
        }

    # ------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._load_state()
        self._task = self.loop.create_task(self._run())

    async def wait_caught_up(self, timeout: float, *, down_grace: float | None = None) -> bool:
        """True once nothing written is unacknowledged (within ``timeout``).
        ``down_grace``: give up sooner, after that long without a connection."""
        start = self.loop.time()
        deadline = start + timeout
        while True:
            pending = any(f.lag or not f.resolved for f in self.files.values() if not f.broken and f.size >= 0)
            if not pending:
                return True
            now = self.loop.time()
            if now >= deadline or (down_grace is not None and not self.healthy and now - start >= down_grace):
                return False
            await asyncio.sleep(0.01)

    async def close(self, timeout: float | None = None) -> None:
        """Best effort: give the pump ``timeout`` seconds to publish what is
        written, then stop. What is left is in the state file for the next run."""
        timeout = self.cfg.shutdown_flush if timeout is None else timeout
        caught_up = await self.wait_caught_up(timeout, down_grace=1.0)
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        if self._recovery is not None:
            self._recovery.cancel()
        self._save_state(clean=True)
        lag, files = self.lag()
        if not caught_up and lag:
            log.warning("mirror: stopping with %d bytes of %d files not yet mirrored; they are caught up on the next start", lag, files)
        if self.nc is not None:
            try:
                await asyncio.wait_for(self.nc.close(), 2.0)
            except Exception:
                pass

    # ------------------------------------------------------------------ pump

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
            await ensure_stream(self.js, self.cfg)
            self._max_message = max(4096, min(MAX_MESSAGE, (self.nc.max_payload or MAX_MESSAGE) - HEADER_ROOM))
            self.ready = True
            self.last_error = None

    async def _nats_error(self, exc: Exception) -> None:
        """Connection attempts that fail (the server is down): shown in status."""
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if not self.healthy:
            self.last_error = why
        now = time.monotonic()
        if why != self._last_log[0] or now - self._last_log[1] > 30:
            log.warning("mirror: nats: %s", why)
            self._last_log = (why, now)

    async def _disconnected(self) -> None:
        if not self._closing:
            log.warning("mirror: disconnected from NATS; writes go on locally and are caught up later")
            self.errors += 1
            self.last_error = "disconnected from NATS"
            self._fail_waiters("disconnected from NATS")
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
            try:
                await asyncio.wait_for(self._wake.wait(), TICK)
            except asyncio.TimeoutError:
                pass

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
            f = next(iter(self._work), None)
            if f is None:
                if not self.inflight_msgs:
                    self.failing = False  # everything handed over was acknowledged
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), TICK)
                except asyncio.TimeoutError:
                    pass
                self._housekeeping()
                continue
            if f.broken or (f.resolved and f.sent >= f.size):
                del self._work[f]
                continue
            if not f.resolved:
                await self._resolve(f)  # on an error f stays queued
                continue
            if f.inflight:
                # One range in flight per file (each expects the previous one's
                # sequence); meanwhile its writes pile up into the next, bigger
                # range: ack-clocked batching. Its ack reschedules it.
                del self._work[f]
                continue
            if self.inflight_bytes >= MAX_INFLIGHT_BYTES or self.inflight_msgs >= MAX_INFLIGHT_MSGS:
                self._acked_evt.clear()
                try:
                    await asyncio.wait_for(self._acked_evt.wait(), TICK)
                except asyncio.TimeoutError:
                    pass
                self._housekeeping()
                continue
            del self._work[f]
            start = f.sent
            try:
                data = self.backlog.take(f, self._max_message)
            except OSError as exc:
                self._break(f, f"cannot read it back: {exc.strerror or exc}")
                continue
            if not data:
                continue
            end = start + len(data)
            epoch = self.epoch
            headers = dict(f.headers)
            headers[HDR_OFFSET] = str(start)
            headers[HDR_EXPECTED_SEQ] = str(f.last_seq)
            headers[HDR_MSG_ID] = f"{f.subject}:{start}-{end}:{zlib.crc32(data):08x}"
            fut = await self.acks.publish(f.subject, data, headers)
            if epoch != self.epoch:  # a failure reset everything meanwhile
                fut.cancel()
                continue
            f.sent = end
            f.inflight.append((end, fut, self.loop.time(), len(data)))
            self._busy.add(f)
            self.inflight_bytes += len(data)
            self.inflight_msgs += 1
            fut.add_done_callback(lambda fu, f=f, epoch=epoch: self._acked(f, epoch, fu))

    async def _resolve(self, f: TrackedFile) -> None:
        """Where does the stream's copy of ``f`` end? Catch up from there."""
        end, last_start, last, seq = await remote_end(self.js, self.cfg.stream, f.subject)
        try:
            local_size = os.stat(f.path).st_size
        except FileNotFoundError:
            self._break(f, "the file is gone")
            return
        if end > local_size:
            self._break(f, f"the stream holds {end} bytes of it, the local file {local_size}: the session was written on another machine")
            return
        if last and read_range(f.path, last_start, len(last)) != last:
            self._break(f, f"the local file differs from the stream's copy at offset {last_start}")
            return
        f.acked = f.sent = end
        f.last_seq = seq
        f.resolved = True
        self.failing = False
        self._state_dirty = True
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
        self._state_dirty = True
        if f.waiters:
            waiters.release(f)
        if not inflight and not f.waiters:
            self._busy.discard(f)
        if f.sent < f.size and not inflight:
            self._schedule(f)

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
        self._schedule(f)

    def _failed(self, exc: BaseException) -> None:
        """Forget everything in flight; the pump restarts from the watermarks."""
        self.epoch += 1
        self._fail = None
        self.ready = False  # the stream is checked again before going on
        reconnected = isinstance(exc, MirrorFailure) and str(exc) == "reconnected"
        if not reconnected:
            self.failing = True
            if str(exc) != DISCONNECTED:  # counted by _disconnected already
                self.errors += 1
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self.last_error = why
            now = time.monotonic()
            if why != self._last_log[0] or now - self._last_log[1] > 30:
                log.warning("mirror: %s; retrying (writes go on locally)", why)
                self._last_log = (why, now)
        for f in list(self._busy):
            for _, fut, _, _ in f.inflight:
                fut.cancel()  # frees the client's pending-ack slots
            f.inflight.clear()
        for f in self.files.values():
            if f.broken:
                continue
            if f.resolved and f.sent > f.acked:
                f.sent = f.acked
            if not f.resolved or f.sent < f.size:
                self._schedule(f)
        self.inflight_bytes = self.inflight_msgs = 0
        if not reconnected:
            self._fail_waiters(self.last_error or "")
        self._busy = {f for f in self._busy if f.waiters}

    def _housekeeping(self) -> None:
        now = self.loop.time()
        if now - self._housekept < TICK:
            return
        self._housekept = now
        for f in list(self._busy):
            if f.inflight and now - f.inflight[0][2] > self.cfg.ack_timeout:
                if self._fail is None:
                    self._fail = MirrorFailure(f"no acknowledgement from JetStream within {self.cfg.ack_timeout:g}s")
            if f.waiters:
                waiters.expire(f, now, f"written locally, but the mirror did not confirm it within {3 * self.cfg.ack_timeout:g}s")
        if self._state_dirty and now - self._state_saved >= STATE_EVERY:
            self._state_saved = now
            self._save_state()
        self._evict()

    def _evict(self) -> None:
        """Forget files that are fully mirrored and idle (remember their size, so
        their next write needs no question to the stream)."""
        cutoff = time.monotonic() - IDLE_EVICT
        for path, f in list(self.files.items()):
            if (f.resolved and not f.broken and f.acked == f.size and not f.inflight and not f.waiters
                    and not f.mem and f.touched < cutoff and f not in self._work):
                del self.files[path]
                self._busy.discard(f)
                self._clean[path] = (f.size, f.last_seq)
                if len(self._clean) > CLEAN_REMEMBERED:
                    self._clean.popitem(last=False)

    # ------------------------------------------------------------ state file

    def _save_state(self, clean: bool = False) -> None:
        """The lagging files and their watermarks, for the next run. ``clean``
        only at the end of ``close``: a run that did not get there crashed, and
        the next one also looks at every file written since the last save."""
        self._state_dirty = False
        if self.state_file is not None:
            save_state(self.state_file, {str(f.path): f.acked for f in self.files.values()
                                         if not f.broken and f.size >= 0 and (f.lag or not f.resolved)}, clean=clean)

    def _load_state(self) -> None:
        if self.state_file is None:
            return
        state = load_state(self.state_file)
        if state is not None:
            count = sum(1 for path in state.files if self.track_existing(Path(path)) is not None)
            if count:
                log.info("mirror: %d files left lagging by the previous run; catching them up", count)
            if not state.clean:
                self._recovery = self.loop.create_task(self._recover(state.savedAt - RECOVERY_SLACK))
        self._save_state()  # not clean until close() says so

    async def _recover(self, since: float) -> None:
        """The previous run crashed: every file written since its last save may
        lag; find them (a stat pass in a worker thread) and let the stream say."""
        paths = await self.loop.run_in_executor(None, recently_written, self.projects, since)
        count = sum(1 for p in paths if p not in self.files and file_ref(self.projects, p) is not None
                    and self.track_existing(p) is not None)
        log.info("mirror: the previous run did not stop cleanly; checking %d files written since its last save", count)
