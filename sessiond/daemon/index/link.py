"""The daemon's side of the indexer: a writer observer and a child process.

``observe`` (a ``Writer`` observer, on the event loop, on every write) only
notes the path; the noted paths go to the indexer process in one pipe write
once the writes pause for ``LOOK_SETTLE`` (at most ``LOOK_MAX_DELAY`` after
the first of them), or at once when a search or a reindex asks. The indexer
needs more CPU per entry than the daemon spends writing it; run beside a burst
of appends on a machine with few cores it takes the gaps the writers leave, with
their caches, even at SCHED_IDLE, so it works in the pauses instead: a burst's
entries are indexed after it (or every ``LOOK_MAX_DELAY`` of a longer one), and
a search never sees the difference, since it first asks for everything noted.
It never waits: when the pipe is full (the indexer is behind) paths stay in a set (at most one entry per file, so bounded by the
files written) and are sent when it drains; the indexer reads the bytes from
the files themselves, from the offset it reached. Foreign writers are found by
the indexer's re-stats (one before each search of a scope not re-stated in
``index_refresh`` seconds, one of everything every 30 s and at start); an
inotify follower can call ``look`` with what it sees.

A search waits (bounded) for the indexer to have looked at everything noted
before it, so a search after an acknowledged write finds it. The child is
restarted after a crash, with a backoff; its state is in the index itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from sessiond.search.indexfile import Identity
from sessiond.search.schema import index_path  # noqa: F401  (the daemon's one import of the index's place)

from ..scopes import Scope, scope_key
from .pipe import (
    REBUILD_TOKEN,
    Damaged,
    Done,
    FromWorker,
    Look,
    Progress,
    Reindex,
    Rescan,
    Splitter,
    State,
    Stop,
    frame,
)

log = logging.getLogger("sessiond")

LOOK_SETTLE = 0.1
"""Seconds without a write after which the noted files are sent."""
LOOK_MAX_DELAY = 2.0
"""Seconds after the first unsent note by which they are sent anyway: an
unbroken stream of writes keeps the index at most this far behind."""
PIPE_HIGH = 1 << 20
"""Bytes of unsent messages above which noted paths wait in the set instead."""
MAX_SCOPES = 1024
"""Scopes whose last question and re-stat are remembered (then forgotten)."""
START_DELAY = 2.0
"""Seconds after the daemon is serving before the indexer starts, unless a
search or a reindex asks for it first: its start (an interpreter, its imports,
opening the index, the catch-up re-stat) costs about as much CPU as the
daemon's own, and a daemon that lives a moment (started, asked once, stopped)
never needs it. What is written meanwhile is noted as at any time, and sent
once it runs (``bench/daemon_life.py``)."""
RESTART_BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
STOP_TIMEOUT = 10.0


class _Protocol(asyncio.SubprocessProtocol):
    def __init__(self, link: IndexLink) -> None:
        self.link = link
        self.split = Splitter(FromWorker)

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            for msg in self.split.feed(data):
                self.link._answer(msg)

    def process_exited(self) -> None:
        self.link._exited()


class IndexLink:
    """The daemon's end of the search indexer: notes the paths written, sends them to
    the indexer process in batches, asks it to catch up before a search or a reindex,
    and restarts it after a crash."""

    def __init__(self, loop: asyncio.AbstractEventLoop, root: Path, index: Path, refresh: float) -> None:
        self.loop = loop
        self.root = root
        self.index = index
        self.refresh = refresh
        self.transport: asyncio.SubprocessTransport | None = None
        self.stdin: asyncio.WriteTransport | None = None
        self.noted: dict[str, None] = {}
        self._send_timer: asyncio.TimerHandle | None = None
        self._first_noted = self._last_noted = 0.0
        self._retry: asyncio.TimerHandle | None = None
        self._token = 0
        self._waiting: dict[int, asyncio.Future] = {}
        self.progress: dict[int, tuple[int, int]] = {}
        self.reindexing: set[int] = set()
        self._looks_sent = 0  # Look messages sent so far
        self._looks_done = 0  # of those, how many the indexer has answered past
        self._asked_at: dict[int, int] = {}
        self._questions: dict[Scope, tuple[int, asyncio.Future]] = {}
        """Per scope, the last question asked (the Looks sent by then, its answer)."""
        self._restats: dict[Scope, float] = {}
        """Per scope, when a background re-stat was last sent."""
        self._restat_token = 0
        """The token of the background re-stat sent and not answered yet (0:
        none). One at a time: nobody waits for them, so searches naming a new
        scope each would queue them in the indexer faster than it makes them,
        each holding its project names, without bound."""
        self.rescans = 0
        """Rescan messages sent (questions and background re-stats)."""
        self.restarts = 0
        self.started_at = 0.0
        self.stopping = False
        self._start_timer: asyncio.TimerHandle | None = None
        self._first_start: asyncio.Task | None = None
        """The first start, once it is due (``START_DELAY``) or asked for."""
        self._exit: asyncio.Future | None = None
        self._class: int | None = None
        """The scheduling class last put on the indexer's threads (None: the one it took itself)."""
        self.state = "starting"
        """``ok``: searches read the index; ``rebuilding`` or ``scanning``: they
        scan the files (``reason`` says why); ``starting``: not told yet."""
        self.reason = ""
        self.identity: Identity | None = None
        """``(dev, ino)`` of the index file the indexer writes, once it said."""
        self.rebuilds = 0
        """Index files found unusable and rebuilt since the daemon started."""
        self.rebuilt_because = ""
        """Why the last of them was."""

    # --------------------------------------------------------------- lifecycle

    def start_later(self, delay: float = START_DELAY) -> None:
        """Start the indexer in ``delay`` s, or at the first search or reindex."""
        self._start_timer = self.loop.call_later(delay, self._start_now)

    def _start_now(self) -> asyncio.Task | None:
        """The first start, begun now if it was still waiting for its time."""
        if self._start_timer is not None:
            self._start_timer.cancel()
            self._start_timer = None
        if self._first_start is None and self.stdin is None and not self.stopping:  # (stdin: one runs already, started by start())
            self._first_start = self.loop.create_task(self._restart())
        return self._first_start

    async def _running(self) -> None:
        """Wait for the first start (begun now if it had not been)."""
        first = self._start_now()
        if first is not None and not first.done():
            await asyncio.shield(first)

    async def start(self) -> None:
        # A new indexer first catches up with what changed while none ran (and
        # what a dead one had not answered for): the next search waits for it.
        self._looks_sent += 1
        self._exit = self.loop.create_future()
        self._class = None
        self.started_at = time.monotonic()
        self.transport, _ = await self.loop.subprocess_exec(
            lambda: _Protocol(self), sys.executable, "-m", "sessiond.daemon.index.worker", str(self.root), str(self.index),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, close_fds=True,
            # the daemon's session, not one of its own: Linux's autogroups are per session, and only inside the
            # daemon's does the indexer's low priority make it take only what the daemon leaves over
            # (worker.lower_priority); it leaves the daemon's process group itself (worker.main)
        )
        self.stdin = self.transport.get_pipe_transport(0)  # type: ignore[assignment]  # made with stdin=PIPE: a write transport
        log.info("search indexer started (pid %d, index %s)", self.transport.get_pid(), self.index)
        if self.noted:
            self._schedule_send()

    def _exited(self) -> None:
        code = self.transport.get_returncode() if self.transport else None
        self.transport = self.stdin = None
        self._restat_token = 0
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_result(None)
        self._waiting.clear()
        if self._exit is not None and not self._exit.done():
            self._exit.set_result(code)
        if self.stopping:
            return
        delay = RESTART_BACKOFF[min(self.restarts, len(RESTART_BACKOFF) - 1)]
        if time.monotonic() - self.started_at > 60:
            delay = RESTART_BACKOFF[0]
        self.restarts += 1
        log.error("search indexer exited (status %s); restarting it in %.1fs", code, delay)
        self.loop.call_later(delay, lambda: self.loop.create_task(self._restart()))  # (it does nothing once stopping)

    async def _restart(self) -> None:
        if self.stopping:  # a start that came due as the daemon stopped
            return
        try:
            await self.start()
        except OSError as exc:
            log.error("search indexer could not start: %s", exc)
            self._exited()

    async def close(self) -> None:
        """Stop the indexer (it commits what it did); bounded by STOP_TIMEOUT.
        It is first taken out of SCHED_IDLE (``_retune``): on a busy machine
        an idle-class process waits for an idle moment to do anything, its
        exit included. One that has said nothing yet is also sent SIGTERM: until
        it opens the index (its start, its imports) that ends it at once, having
        done nothing; from then on it ignores the signal and stops at the Stop
        message, as one that has spoken does."""
        self.stopping = True
        if self._start_timer is not None:  # never started: nothing to stop
            self._start_timer.cancel()
            self._start_timer = None
        if self._first_start is not None and not self._first_start.done():  # an exec under way: its end is ours to stop
            await asyncio.shield(self._first_start)
        transport = self.transport
        if transport is None or self._exit is None:
            return
        self._retune()
        self._send(Stop())
        if self.state == "starting":
            try:
                transport.terminate()
            except ProcessLookupError:  # it has exited already
                pass
        try:
            async with asyncio.timeout(STOP_TIMEOUT):
                await asyncio.shield(self._exit)
        except TimeoutError:
            log.warning("search indexer did not stop in %.0fs: killed (it resumes from its last commit)", STOP_TIMEOUT)
            transport.kill()
        transport.close()

    # --------------------------------------------------------------- following

    def observe(self, path: Path, lines: list[bytes], size: int) -> None:
        """Writer observer: note the file; it is sent once the writes pause."""
        self.look((str(path),))

    def look(self, paths) -> None:
        """Files written, or that some other watcher saw change (or vanish)."""
        for p in paths:
            self.noted[p] = None
        self._last_noted = self.loop.time()
        if self._send_timer is None:
            self._schedule_send()

    def _schedule_send(self) -> None:
        self._first_noted = self._last_noted = self.loop.time()
        self._send_timer = self.loop.call_later(LOOK_SETTLE, self._settled)

    def _settled(self) -> None:
        now = self.loop.time()
        quiet, waited = now - self._last_noted, now - self._first_noted
        if quiet < LOOK_SETTLE and waited < LOOK_MAX_DELAY:  # still writing: wait for the pause
            self._send_timer = self.loop.call_later(min(LOOK_SETTLE - quiet, LOOK_MAX_DELAY - waited), self._settled)
            return
        self._send_timer = None
        self._send_noted()

    def _send_noted(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
        if not self.noted or self.stdin is None or self.stdin.is_closing():
            return
        if self.stdin.get_write_buffer_size() > PIPE_HIGH:  # the indexer is behind: keep them here
            if self._retry is None:
                self._retry = self.loop.call_later(0.05, self._retry_send)
            return
        paths, self.noted = list(self.noted), {}
        self._send(Look(paths=paths))

    def _retry_send(self) -> None:
        self._retry = None
        self._send_noted()

    def _send(self, msg) -> bool:
        if self.stdin is None or self.stdin.is_closing():
            return False
        self.stdin.write(frame(msg))
        if isinstance(msg, Look):
            self._looks_sent += 1
        elif isinstance(msg, Rescan):
            self.rescans += 1
        return True

    def _retune(self) -> None:
        """Every thread of the indexer in the normal class while something
        waits for it (a search's question, a reindex, the stop), else back in
        SCHED_IDLE; nice 19 stays. An idle-class process gets no CPU while
        anything else wants it, so on a busy machine a search (the first one
        starts the indexer) would wait out its bound for an answer the
        indexer had no time to give. Unprivileged processes may make both
        moves at nice 19; one refused (a container, another OS) is left."""
        if self.transport is None or not hasattr(os, "SCHED_IDLE"):  # (Linux only: macOS has no classes to move)
            return
        wanted = os.SCHED_OTHER if self._waiting or self.stopping else os.SCHED_IDLE
        if wanted == self._class:
            return
        self._class = wanted
        pid = self.transport.get_pid()
        try:
            threads = os.listdir(f"/proc/{pid}/task")  # the class is each thread's: the stdin reader's too
        except OSError:
            threads = [str(pid)]
        for tid in threads:
            try:
                os.sched_setscheduler(int(tid), wanted, os.sched_param(0))
            except (OSError, AttributeError):  # refused, or it has exited
                pass

    # ------------------------------------------------------------------ asking

    def _answer(self, msg) -> None:
        if isinstance(msg, State):
            self._state(msg)
            return
        if isinstance(msg, Progress):
            self.progress[msg.token] = (msg.done, msg.total)
            return
        self.progress.pop(msg.token, None)
        if msg.token == self._restat_token:
            self._restat_token = 0
        self._looks_done = max(self._looks_done, self._asked_at.pop(msg.token, 0))
        fut = self._waiting.pop(msg.token, None)
        if fut is not None and not fut.done():
            fut.set_result(msg)
        self._retune()

    def _ask(self, make) -> asyncio.Future:
        self._token += 1
        token = self._token
        fut = self.loop.create_future()
        self._send_noted()  # what was written before the question comes before it
        if self.noted and self.stdin is not None:  # over the high mark: send them anyway, the question needs them
            paths, self.noted = list(self.noted), {}
            self._send(Look(paths=paths))
        if not self._send(make(token)):
            fut.set_result(None)
            return fut
        self._asked_at[token] = self._looks_sent
        self._waiting[token] = fut
        self._retune()
        return fut

    async def caught_up(self, projects: list[str] | None, timeout: float) -> bool:
        """Wait until the indexer has looked at every file written before now;
        ``projects`` are re-stated if that was not done in the last ``refresh``
        s: before the answer when ``refresh`` is 0, else in the background (a
        re-stat stats every file of the scope; the answer need not wait for it).
        False when it did not answer within ``timeout`` (or is not running).

        Searches asking at once share one question (``refresh`` > 0): with a
        message per search, a crowd of connections searching and closing would
        queue messages without bound in the pipe's buffer, and every later
        search would wait behind them.

        Cancelling the asker (a search whose client went) stops it even when
        the answer comes in the same pass: Python 3.11's ``wait_for`` would
        return the answer then, and the search would go on to run its query
        for nobody; ``asyncio.timeout`` lets the cancellation through.

        An indexer not started yet (``START_DELAY``) is started first."""
        await self._running()
        self._send_noted()
        scope = scope_key(projects)
        if self.refresh > 0 and not self.noted and self._looks_done == self._looks_sent and self.transport is not None:
            # nothing written since the indexer last answered: no need to wait for it
            self._restat(scope, projects)
            return True
        fut = self._question(scope, projects)
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(fut) is not None
        except TimeoutError:
            return False

    def _restat(self, scope: Scope, projects: list[str] | None) -> None:
        """A background re-stat of ``projects``, unless one was sent less than
        ``refresh`` s ago (the indexer would skip it anyway), or another is not
        answered yet (``_restat_token``: this scope's is sent by a search after
        that, and the indexer re-stats everything itself once idle for
        ``worker.RESCAN_EVERY`` s)."""
        now = self.loop.time()
        if now - self._restats.get(scope, -self.refresh) < self.refresh or self._restat_token:
            return
        if len(self._restats) >= MAX_SCOPES:
            self._restats.clear()
        self._restats[scope] = now
        self._token += 1
        if self._send(Rescan(token=self._token, projects=projects, max_age=self.refresh, wait=False)):
            self._restat_token = self._token

    def _question(self, scope: Scope, projects: list[str] | None) -> asyncio.Future:
        """The indexer's answer once it has looked at everything sent so far:
        a question already asked for ``scope`` after the last files were sent
        answers for this asker too."""
        asked = self._questions.get(scope)
        if (asked is not None and self.refresh > 0 and not asked[1].done() and not self.noted
                and asked[0] == self._looks_sent):
            return asked[1]
        fut = self._ask(lambda t: Rescan(token=t, projects=projects, max_age=self.refresh, wait=self.refresh == 0))
        if len(self._questions) >= MAX_SCOPES:
            self._questions = {k: v for k, v in self._questions.items() if not v[1].done()}
        self._questions[scope] = (self._looks_sent, fut)
        return fut

    async def reindex(self, projects: list[str] | None) -> Done | None:
        """Rebuild ``projects`` (None: the whole index); None if the indexer died."""
        await self._running()
        fut = self._ask(lambda t: Reindex(token=t, projects=projects))
        token = self._token
        self.reindexing.add(token)
        try:
            return await fut
        finally:
            self.reindexing.discard(token)
            self.progress.pop(token, None)

    def _state(self, msg: State) -> None:
        self._class = None  # it has put itself in SCHED_IDLE by now (worker.lower_priority)
        self._retune()
        if msg.state == "rebuilding" and msg.lost:
            self.rebuilds += 1
            self.rebuilt_because = msg.reason
        if msg.state == "ok":
            self.progress.pop(REBUILD_TOKEN, None)
        self.state, self.reason = msg.state, msg.reason
        self.identity = (msg.dev, msg.ino) if msg.ino else None

    def unusable(self) -> str | None:
        """Why searches must not read the index now (None: they may)."""
        if self.state in ("rebuilding", "scanning"):
            return f"the search index is {'being rebuilt' if self.state == 'rebuilding' else 'unusable'} ({self.reason})"
        return None

    def damaged(self, identity: Identity, reason: str) -> None:
        """A search found the index file ``identity`` unusable: the indexer
        rebuilds it if it still writes that file, and says so (``State``).

        Only a file the indexer has said it writes (``State``: ``identity``)
        is reported: before that, the file a search read may be the one the
        indexer is making (SQLite's header is there before its tables, so a
        read says "no such table"), and reporting it had a good new index set
        aside and built again, searches scanning the files meanwhile. A file
        damaged before the indexer starts is its own to find: it checks the
        file when it opens it, and the first search after it says which file
        it writes reports what that check missed."""
        if self.identity is None or identity != self.identity or self.state != "ok":
            return
        log.warning("search index %s: %s; asking the indexer to rebuild it", self.index, reason)
        self._send(Damaged(dev=identity[0], ino=identity[1], reason=reason))

    def status(self) -> dict[str, str | int | float | bool | None]:
        done = total = 0
        for d, t in self.progress.values():
            done, total = done + d, total + t
        return {
            "state": self.state,
            "reason": self.reason or None,
            "rebuilds": self.rebuilds,
            "running": self.transport is not None,
            "pid": self.transport.get_pid() if self.transport is not None else None,
            "path": str(self.index),
            "restarts": self.restarts,
            "notedFiles": len(self.noted),
            "rescansSent": self.rescans,
            "reindexing": bool(self.reindexing),
            "reindexDoneBytes": done,
            "reindexTotalBytes": total,
        }
