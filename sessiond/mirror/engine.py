"""The Mirror: a writer observer feeding a publishing pump (see the package
docstring for the design).

Why it exists: this is what the daemon (and ``push``) holds: the tracked
files and their work queue, fed by the writer's observers (``observe``,
``gone``), the required-mode hooks into appends (``check_session``,
``confirming``), the status figures, start and close, and the state file the
next run catches up from. What it runs, the connection and the publishing,
is its base ``Pump`` (``pump``). The pieces with a narrow interface live next
to it: ``tracking`` (one file's watermarks), ``backlog`` (written bytes held
in memory, cutting a range), ``waiters`` (required mode's durable acks),
``statefile`` (what the next run catches up), ``jetstream`` (the wire:
connection, stream, acks).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path

from sessiond.config import MirrorSettings
from sessiond.mirror.stream_format import file_ref, whole_lines_size
from sessiond.store.paths import projects_dir
from sessiond.store.regular import NotRegularFile
from sessiond.wire.errors import SessiondError
from sessiond.wire.records import StateFileProblem

from . import waiters
from .backlog import Backlog
from .jetstream import mirror_error, require_client
from .pump import Pump
from .statefile import RECOVERY_SLACK, load_state, recently_written, save_state
from .tracking import TrackedFile

log = logging.getLogger("sessiond")

IDLE_EVICT = 30.0
"""Seconds a fully mirrored file stays tracked after its last write."""
CLEAN_REMEMBERED = 10_000
"""Evicted files whose mirrored size is remembered (their next write then
needs no question to the stream)."""


# --------------------------------------------------------------------- the mirror


class Mirror(Pump):
    """Publishes what the Writer writes; see the module docstring."""

    def __init__(self, cfg: MirrorSettings, root: Path, loop: asyncio.AbstractEventLoop, *,
                 state_file: Path | None = None, name: str = "sessiond", forever: bool = True) -> None:
        super().__init__(loop)
        self.cfg = cfg
        self.forever = forever
        self.projects = projects_dir(root)
        self.loop = loop
        self.state_file = state_file
        self.state_problems: list[StateFileProblem] = []
        """A state file found unusable by ``restore`` (set aside; ``status``)."""
        self.name = name
        self.files: dict[Path, TrackedFile] = {}
        self._ignored: set[Path] = set()
        self._clean: OrderedDict[Path, tuple[int, int]] = OrderedDict()  # evicted, mirrored: path -> (size, last_seq)
        self._work: dict[TrackedFile, None] = {}  # ordered set: files with something to do
        self._busy: set[TrackedFile] = set()  # files with acks outstanding or waiters
        self.backlog = Backlog(cfg)
        self.errors = 0
        self.last_error: str | None = None
        self.broken_sessions: dict[str, str] = {}
        self._recovery: asyncio.Task | None = None
        self._state_dirty = False
        self._state_saved = 0.0
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
        """Publish from now on (after ``restore`` when there is a state file)."""
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

    def restore(self) -> None:
        """Take up what the previous run left lagging: the daemon calls it
        before it serves, as its reads (the state file, bounded; a stat of
        each file it names, at most ``MAX_LAGGING_FILES``) must not run on a
        loop that serves."""
        if self.state_file is None:
            return
        state = load_state(self.state_file, self.state_problems)
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
