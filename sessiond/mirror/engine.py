"""The Mirror: what the daemon (and ``push``) holds (see the package
docstring for the design).

Why it exists: it is the one object the rest of sessiond talks to: the
writer's observers (``observe``, ``gone``), the required-mode hooks into
appends (``check_session``, ``confirming``), the status figures, start and
close, and taking up what the previous run left. It is composed of parts that
each own one thing: ``TrackedFiles`` (``tracking``: the files, their work
queue, marking one diverged), ``Backlog`` (``backlog``: written bytes held in
memory, cutting a range), ``Pump`` (``pump``: the connection and the
publishing), ``StateFile`` (``statefile``: what the next run catches up) and
``Errors``; ``waiters`` holds required mode's durable acks and ``jetstream``
the wire (connection, stream, acks).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from sessiond.config import MirrorSettings
from sessiond.mirror.stream_format import file_ref, whole_lines_size
from sessiond.store.paths import projects_dir
from sessiond.store.regular import NotRegularFile
from sessiond.wire.errors import SessiondError

from . import waiters
from .backlog import Backlog
from .jetstream import mirror_error, require_client
from .pump import Pump
from .statefile import RECOVERY_SLACK, StateFile, recently_written
from .tracking import Errors, TrackedFile, TrackedFiles

log = logging.getLogger("sessiond")

# --------------------------------------------------------------------- the mirror


class Mirror:
    """Mirrors every transcript write to NATS JetStream: observes the writer,
    publishes through its pump, and answers the daemon's questions about it
    (required mode, status); see the module docstring for its parts."""

    def __init__(self, cfg: MirrorSettings, root: Path, loop: asyncio.AbstractEventLoop, *,
                 state_file: Path | None = None, name: str = "sessiond", forever: bool = True) -> None:
        require_client()
        self.cfg = cfg
        self.loop = loop
        self.projects = projects_dir(root)
        self.errors = Errors()
        self.backlog = Backlog(cfg)
        self.tracked = TrackedFiles(cfg, self.projects, self.backlog, self.errors)
        self.state = StateFile(state_file, self.tracked)
        self.pump = Pump(cfg, loop, self.tracked, self.backlog, self.state, self.errors, name=name, forever=forever)
        self._recovery: asyncio.Task | None = None

    @property
    def files(self) -> dict[Path, TrackedFile]:
        """The tracked files by path (read only: ``forget`` stops tracking one)."""
        return self.tracked.files

    # ------------------------------------------------------------- observing

    def observe(self, path: Path, lines: list[bytes], size: int) -> None:
        """Writer observer: called after every successful write. Cheap, never raises."""
        try:
            tracked = self.tracked
            f = tracked.track(path)
            if f is None:
                return
            n = len(lines)
            for line in lines:
                n += len(line)
            start = size - n
            f.touched = time.monotonic()
            if f.size < 0:
                f.size = start
                known = tracked.recall(path)
                if start == 0:
                    f.resolved = True
                elif known is not None and known[0] == start:
                    f.acked = f.sent = start
                    f.last_seq = known[1]
                    f.resolved = True
            elif start < f.size:
                tracked.mark_broken(f, f"{path.name} shrank under the daemon (known {f.size} bytes, written at {start})")
                return
            f.size = size
            if f.broken:
                return
            self.state.changed()
            self.backlog.keep(f, lines, start, n)
            tracked.schedule(f)
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
                f = self.tracked.files.get(path)
                if f is not None and not f.inflight and not f.waiters:
                    self.tracked.forget(path)
                return
            f = self.tracked.track(path)
            if f is not None:
                self.tracked.mark_broken(f, f"{path.name} was truncated, replaced or rewritten by another writer")
        except Exception:
            log.exception("mirror: %s gone: handling failed", path)

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
        f = self.tracked.track(path)
        if f is None:
            return None
        f.size = max(f.size, size)
        self.tracked.schedule(f)
        return f

    def forget(self, path: Path) -> None:
        """Stop tracking a file that moved away (trash) or changed behind the
        writer (import): seen again, it is resolved against the stream like any
        file first seen at an offset > 0."""
        self.tracked.forget(path)

    # --------------------------------------------------- required-mode hooks

    @property
    def required(self) -> bool:
        return self.cfg.required

    @property
    def healthy(self) -> bool:
        """Connected, the stream checked, and the last publish did not fail."""
        return self.pump.healthy

    def check_session(self, session: str) -> None:
        """Required mode: refuse an append the mirror cannot take (SPEC 6)."""
        if not self.cfg.required:
            return
        why = self.tracked.broken_sessions.get(session)
        if why is not None:
            raise mirror_error(f"session {session} refuses appends: its remote copy diverged ({why})")
        if not self.healthy:
            reason = f": {self.errors.last}" if self.errors.last else ""
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
                f = self.tracked.files.get(p)
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
            self.tracked.busy.update(targets)

        return after_local

    # ---------------------------------------------------------------- status

    def status(self) -> dict[str, str | int | float | bool | None]:
        lag, lag_files = self.tracked.lag()
        return {
            "servers": ",".join(self.cfg.servers),
            "stream": self.cfg.stream,
            "required": self.cfg.required,
            "connected": self.healthy,
            "queuedLines": self.backlog.lines,
            "queuedBytes": self.backlog.bytes,
            "lagBytes": lag,
            "lagFiles": lag_files,
            "inflight": self.pump.inflight_msgs,
            "published": self.pump.published,
            "publishedBytes": self.pump.published_bytes,
            "errors": self.errors.count,
            "diverged": sum(1 for f in self.tracked.files.values() if f.broken),
            "lastError": self.errors.last,
        }

    # ------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Publish from now on (after ``restore`` when there is a state file)."""
        self.pump.start()

    async def wait_caught_up(self, timeout: float, *, down_grace: float | None = None) -> bool:
        """True once nothing written is unacknowledged (within ``timeout``).
        ``down_grace``: give up sooner, after that long without a connection."""
        start = self.loop.time()
        deadline = start + timeout
        while True:
            if not self.tracked.pending():
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
        await self.pump.stop()
        if self._recovery is not None:
            self._recovery.cancel()
        self.state.save(clean=True)
        lag, files = self.tracked.lag()
        if not caught_up and lag:
            log.warning("mirror: stopping with %d bytes of %d files not yet mirrored; they are caught up on the next start", lag, files)
        await self.pump.disconnect()

    def restore(self) -> None:
        """Take up what the previous run left lagging: the daemon calls it
        before it serves, as its reads (the state file, bounded; a stat of
        each file it names, at most ``MAX_LAGGING_FILES``) must not run on a
        loop that serves."""
        state = self.state.load()
        if state is not None:
            count = sum(1 for path in state.files if self.track_existing(Path(path)) is not None)
            if count:
                log.info("mirror: %d files left lagging by the previous run; catching them up", count)
            if not state.clean:
                self._recovery = self.loop.create_task(self._recover(state.savedAt - RECOVERY_SLACK))
        self.state.save()  # not clean until close() says so

    async def _recover(self, since: float) -> None:
        """The previous run crashed: every file written since its last save may
        lag; find them (a stat pass in a worker thread) and let the stream say."""
        paths = await self.loop.run_in_executor(None, recently_written, self.projects, since)
        count = sum(1 for p in paths if p not in self.tracked.files and file_ref(self.projects, p) is not None
                    and self.track_existing(p) is not None)
        log.info("mirror: the previous run did not stop cleanly; checking %d files written since its last save", count)
