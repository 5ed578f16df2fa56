"""The daemon process: socket set-up, the event loop, signals and shutdown.

``serve(settings)`` owns the lifecycle: take the lock that makes this THE daemon of
its socket (a live daemon's socket is never stolen; a stale one is replaced), then
the one that makes it THE writer of its root (``sessiond/store/rootlock.py``: a second
daemon on the root, on whatever socket, exits 3 before it binds or writes), bind
the socket 0600 in a 0700 directory, serve on uvloop when available, and on
SIGTERM/SIGINT or a Shutdown request stop accepting, run exit cleanup for every
session, write every queue and make every written file durable (``Writer.drain_everything``),
remove the socket and exit 0.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import resource
import signal
import socket
import sys
import time
from pathlib import Path

from sessiond import __version__
from sessiond.config import ConfigError, Settings
from sessiond.daemon.reload import reload as reload_settings
from sessiond.daemon.reload import reread
from sessiond.store import rootlock
from sessiond.store.entries import ENTRY_SCAN
from sessiond.store.locations import check_private_dir, lock_path, open_private_file
from sessiond.wire.core import StateFileProblem
from sessiond.wire.errors import SHUTTING_DOWN, RootHeld, SessiondError

from . import memory, uuidset
from .activation import activated_socket
from .bounds import Bounds
from .catalog import Catalog
from .connection import Connection
from .filequeue import Stats
from .follow import Follower
from .handlers.search import readers as search_readers
from .index.link import IndexLink, index_path
from .leases import Leases
from .looppass import EndOfPass
from .notify import Notifier
from .outbox import Outbox
from .pages import Pages
from .sessions import Registry
from .spend import SpendBook
from .tails import Tails
from .trash import Lifecycle
from .watchers import Watchers
from .workers import SWITCH_INTERVAL, FairShare, read_pool
from .writer import Writer

log = logging.getLogger("sessiond")

SWEEP_EVERY = 10.0
STATUS_EVERY = 5.0
EXIT_ALREADY_RUNNING = 3


class AlreadyRunning(Exception):
    """Another daemon serves this socket or holds this root: ``serve`` logs it and
    exits 3 rather than become a second writer."""


class Daemon:
    """One running daemon's objects, wired together: the writer and the end of
    its loop passes, the session registry, the read pool, the catalog, leases,
    watchers, the follower of foreign writers, the optional mirror and search
    index; plus the status, sweep and shutdown that span them. Connections
    reach everything through it."""

    def __init__(self, settings: Settings, loop: asyncio.AbstractEventLoop, notifier: Notifier | None = None,
                 flags: dict | None = None) -> None:
        self.settings = settings
        self.loop = loop
        self.notifier = notifier or Notifier({})
        self.flags = flags or {}
        self.stats = Stats()
        self.state_files: list[StateFileProblem] = []
        """The daemon's own state files found unusable at the start (``status``)."""
        self.end_of_pass = EndOfPass(loop)
        """The one callback ending each loop pass: the writer's drains, then the answers."""
        self.writer = Writer(loop, settings, self.stats, self.end_of_pass)
        self.outbox = Outbox(self.end_of_pass)
        # Connections get the fds the transcript LRU leaves, less a few for the
        # socket, lock, log, watches and directories.
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.bounds = Bounds(settings, fds_for_clients=nofile - self.writer.open_files.max_open - min(64, nofile // 8))
        self.reads = read_pool(loop, settings.read_threads)
        self.fair = FairShare(loop, self.reads, settings.read_threads, settings.expensive_per_client,
                              settings.max_expensive_waiting, settings.max_expensive_jobs)
        self.registry = Registry(settings, self.writer, self.fair, self.bounds)
        self.tails = Tails(self.writer.root, self.registry.readiness, self.registry.routing, self.fair)
        self.catalog = Catalog(settings.root, loop, self.fair)
        self.pages = Pages(self.catalog, settings.max_list_views)
        self.writer.observers.append(self.catalog.written)
        self.spend = SpendBook(settings.root)
        self.spend.attach(loop, self.fair)
        self.writer.observers.append(self.spend.written)
        self.writer.gone_observers.append(self.spend.gone)
        self.lifecycle = Lifecycle(self)
        self.mirror = None
        if settings.mirror is not None:  # nats-py is an optional extra: import only then
            from sessiond.mirror import STATE_FILE, Mirror

            self.mirror = Mirror(settings.mirror, settings.root, loop, state_file=settings.root / STATE_FILE)
            self.writer.observers.append(self.mirror.observe)
        self.index = None
        if settings.search_index:
            self.index = IndexLink(loop, settings.root, index_path(settings.root, settings.search_index_path),
                                   settings.search_refresh)
            self.writer.observers.append(self.index.observe)
            index = self.index
            self.catalog.changed = lambda paths: loop.call_soon_threadsafe(index.look, paths)
        self.leases = Leases(loop, self.writer.root, self.writer.files, settings.lease_grace, self.state_files)
        self.watchers = Watchers(self)
        self.writer.observers.append(self.watchers.written)
        self.writer.gone_observers.append(self.watchers.gone)
        # Foreign writers (Claude Code itself): their complete lines go to the
        # same observers; the follower sees the daemon's own writes first, so
        # it never reports them again.
        self.follower = Follower(settings.root, loop, self.writer.publish, self.writer.published_gone,
                                 settings.follow_max_watches)
        self.writer.own_observer = self.follower.own_write
        self.writer.gone_observers.append(self.catalog.gone)
        if self.mirror is not None:
            self.writer.gone_observers.append(self.mirror.gone)
        if self.index is not None:
            index_link = self.index
            self.writer.gone_observers.append(lambda path: index_link.look([str(path)]))
        self.connections: set[Connection] = set()
        self.started = time.monotonic()
        self.stopping = False
        self.stopped = loop.create_future()
        self.serving = False
        """Start-up is over (``start_serving``): until then a stop asked is carried
        out only once it is, so what start-up restores (the trash's interrupted
        moves, the spool's held entries) is in place for the shutdown to drain,
        and nothing is started after the stop (the indexer, READY=1)."""
        self._sweep_every = min(SWEEP_EVERY, max(0.5, settings.idle_evict / 2))
        self._sweep = loop.call_later(self._sweep_every, self._sweep_idle)
        self._status = loop.call_later(STATUS_EVERY, self._report_status)
        self._watchdog: asyncio.TimerHandle | None = None
        if self.notifier.watchdog_interval:
            self._watchdog = loop.call_later(self.notifier.watchdog_interval, self._ping_watchdog)

    def status_line(self) -> str:
        return (
            f"{len(self.registry.sessions)} sessions, {len(self.connections)} clients, "
            f"{self.writer.queued_entries} entries queued, {self.stats.writes} writes, {self.stats.errors} errors"
        )

    def _report_status(self) -> None:
        self.notifier.status(self.status_line())
        self._status = self.loop.call_later(STATUS_EVERY, self._report_status)

    def _ping_watchdog(self) -> None:
        self.notifier.watchdog()
        self._watchdog = self.loop.call_later(self.notifier.watchdog_interval, self._ping_watchdog)  # type: ignore[arg-type]  # set whenever the watchdog is pinged

    def reload_config(self) -> None:
        """SIGHUP: read the file in a worker (whatever is at its path must not
        hold the loop), then apply what can change at run time and say so in
        the log."""
        self.loop.run_in_executor(None, reread, self.settings, self.flags).add_done_callback(self._reloaded)

    def _reloaded(self, read: asyncio.Future[Settings]) -> None:
        try:
            done = reload_settings(self.settings, read.result())
        except ConfigError as exc:
            log.error("SIGHUP: config not reloaded: %s", exc)
            return
        logging.getLogger().setLevel(self.settings.log_level.upper())
        self.writer.sync.policy_changed()
        if done.applied:
            log.info("SIGHUP: config reloaded: %s", ", ".join(f"{k} {a} -> {b}" for k, a, b in done.applied))
        else:
            log.info("SIGHUP: config reloaded, %s", "nothing applied at run time" if done.at_restart else "nothing changed")
        if done.at_restart:
            log.warning("SIGHUP: changed in the file, but only applied at the next start: %s", ", ".join(done.at_restart))

    def refuse_if_stopping(self) -> None:
        if self.stopping:
            raise SessiondError("the daemon is shutting down", code=SHUTTING_DOWN)

    def request_shutdown(self, why: str) -> None:
        if self.stopping:
            return
        log.info("shutting down (%s)", why)
        self.stopping = True
        self.notifier.stopping()
        if self.serving:
            # Let this pass's replies (the Shutdown ack among them) go out first.
            self.loop.call_soon(self._shutdown)

    def start_serving(self) -> None:
        """Start-up is over: a stop asked during it is carried out now."""
        self.serving = True
        if self.stopping:
            self.loop.call_soon(self._shutdown)

    def _shutdown(self) -> None:
        for handle in (self._sweep, self._status, self._watchdog):
            if handle is not None:
                handle.cancel()
        for conn in self.connections:
            if conn.transport is not None:
                conn.transport.pause_reading()
        for state in list(self.registry.sessions.values()):
            self.registry.exit_cleanup(state)
        self.writer.drain_everything()
        self.leases.freeze()  # through the writer's root: before it lets go of it
        self.writer.close()
        self.watchers.flush()  # lines held for watchers go out before their connections close
        for conn in list(self.connections):
            conn.close()
        log.info(
            "stopped: %d writes, %d bytes, %d fsyncs, %d errors",
            self.stats.writes, self.stats.bytes_written, self.stats.fsyncs, self.stats.errors,
        )
        if not self.stopped.done():
            self.stopped.set_result(None)

    def _sweep_idle(self) -> None:
        if self.registry.sweep(time.monotonic()):
            memory.shrink(self.fair)
        self._sweep = self.loop.call_later(self._sweep_every, self._sweep_idle)


# ------------------------------------------------------------------------ socket


def prepare_socket_dir(path: Path) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    check_private_dir(path)


def take_lock(sock_path: Path) -> int:
    """Hold ``<socket>.lock`` for the daemon's lifetime: whoever holds it owns the
    socket path."""
    fd = open_private_file(lock_path(sock_path), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise AlreadyRunning(f"another sessiond (pid {other or '?'}) is serving {sock_path}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def take_root(root: Path, sock_path: Path) -> int:
    """Hold the root's lock for the daemon's lifetime (after the socket's, before
    anything in the root is opened): whoever holds it is the root's one writer."""
    try:
        return rootlock.take(root, sock_path)
    except RootHeld as exc:
        raise AlreadyRunning(str(exc)) from None


def bind_socket(path: Path) -> socket.socket:
    try:
        os.unlink(path)  # we hold the lock: whatever is there is stale
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(512)
    sock.setblocking(False)
    return sock


def remove_socket(path: Path, inode: int) -> None:
    """Unlink the socket only if it is still the one we bound."""
    try:
        if os.stat(path).st_ino == inode:
            os.unlink(path)
    except FileNotFoundError:
        pass


# -------------------------------------------------------------------------- main


def setup_logging(level: str) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s sessiond[%(process)d] %(levelname)s %(message)s",
    )


async def _run(settings: Settings, flags: dict) -> int:
    loop = asyncio.get_running_loop()
    # From the moment the socket listens a client may connect and a service
    # manager may send SIGTERM: a stop asked before the daemon is built is
    # remembered, never the default action (killed, nothing drained).
    early: list[str] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, early.append, signal.Signals(sig).name)
    loop.add_signal_handler(signal.SIGHUP, lambda: None)  # nothing to reload yet
    notifier = Notifier()
    adopted = activated_socket()
    if adopted is not None:
        # The service manager made the socket (and its 0700 directory): use it
        # as it is, and never unlink it.
        settings.socket = Path(adopted.getsockname())
        flags = {**flags, "socket": str(settings.socket)}  # what a SIGHUP re-reads must agree
        sock, inode = adopted, None
        check_private_dir(settings.socket.parent)  # the lock goes in it
        lock_fd = take_lock(settings.socket)
    else:
        prepare_socket_dir(settings.socket.parent)
        lock_fd = take_lock(settings.socket)
    try:
        root_fd = take_root(settings.root, settings.socket)
    except BaseException:
        os.close(lock_fd)
        raise
    try:
        if adopted is None:
            sock = bind_socket(settings.socket)
            inode = os.stat(settings.socket).st_ino
        sock.setblocking(False)
        daemon = Daemon(settings, loop, notifier, flags)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, daemon.request_shutdown, signal.Signals(sig).name)
        loop.add_signal_handler(signal.SIGHUP, daemon.reload_config)
        for why in early:
            daemon.request_shutdown(why)
        try:
            await daemon.lifecycle.start()  # an rm/restore a kill interrupted: finished or undone before serving
        except (OSError, SessiondError) as exc:
            log.error("trash recovery failed: %s", exc)
        daemon.registry.spool.replay(daemon.registry)  # before the first request: a resend must meet what was held
        daemon.state_files += daemon.registry.spool.problems
        await daemon.follower.start()  # before serving: an append after ready is followed
        if daemon.mirror is not None:
            daemon.mirror.restore()  # before serving: its reads must not run on a loop that serves
            daemon.state_files += daemon.mirror.state.problems
        server = await loop.create_unix_server(lambda: Connection(daemon), sock=sock)
        if daemon.mirror is not None:
            daemon.mirror.start()  # even when stopping: its close publishes what the last run left lagging
        if not daemon.stopping:  # a stop asked while starting: never ready, no indexer started to be stopped
            log.info(
                "ready: pid %d, socket %s%s, root %s, sessiond %s, dedup sets %s, entry scan %s",
                os.getpid(), settings.socket, " (socket-activated)" if adopted else "", settings.root, __version__,
                uuidset.IMPLEMENTATION, ENTRY_SCAN,
            )
            notifier.ready(daemon.status_line())  # serving: the indexer process starts later (link.START_DELAY)
        daemon.start_serving()
        if daemon.index is not None and not daemon.stopping:
            daemon.index.start_later()
        await daemon.stopped
        daemon.follower.close()
        if daemon.mirror is not None:  # best effort, bounded: what is left is caught up next start
            await daemon.mirror.close()
        if daemon.index is not None:
            search_readers.close_all()  # first: the indexer's writer must be the last to close
            await daemon.index.close()
        server.close()
        if inode is not None:
            remove_socket(settings.socket, inode)
        await server.wait_closed()
    finally:
        os.close(root_fd)
        os.close(lock_fd)
        notifier.close()
    if daemon.writer.unwritten_at_exit:
        log.error("exiting with %d accepted entries NOT written", daemon.writer.unwritten_at_exit)
        return 1
    return 0


def serve(settings: Settings, flags: dict | None = None) -> int:
    """Run the daemon until it is told to stop; the process exit code.

    ``flags`` are the command-line values, kept so a SIGHUP reload still lets
    them win over the file."""
    setup_logging(settings.log_level)
    sys.setswitchinterval(SWITCH_INTERVAL)
    memory.limit_arenas()
    # Past RLIMIT_FSIZE a write must fail with EFBIG (handled: cut back, retried),
    # not kill the daemon with SIGXFSZ.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
        factory = None
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(_run(settings, flags or {}))
    except AlreadyRunning as exc:
        log.error("%s", exc)
        return EXIT_ALREADY_RUNNING
    except ConfigError as exc:
        log.error("config: %s", exc)
        return 2
    except PermissionError as exc:
        log.error("%s", exc)
        return 1
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            log.error("socket %s is in use", settings.socket)
        else:
            log.error("cannot start: %s", exc)
        return 1
