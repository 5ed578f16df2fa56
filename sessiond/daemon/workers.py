"""The read pool and each client's fair share of it.

Blocking work leaves the loop for one of two pools, so that reads can never
make a sync wait: the writer owns a small pool for ``fdatasync``/``syncfs``
(threads that sleep in the kernel), and this module the read pool, where
everything else runs: List pages, resend tail reads, scans of existing
transcripts, catalog refreshes, the mirror's catch-up stats. The read pool is
also the loop's default executor, so whatever is handed to
``run_in_executor(None, ...)`` lands here and never among the syncs. (With
one pool for both, a client listing in a loop would fill its threads, and
another client's durable append would wait behind the Lists for its sync.)

Expensive jobs do not go to the pool directly but through ``FairShare``: each
owner (a connection, or the daemon's own background work) has at most
``per_owner`` jobs running; its others wait in its own FIFO, and a free thread
goes to the next owner in round-robin order that has one waiting. A client
flooding the daemon with Lists holds one thread; another client's scan gets the
next free one instead of queueing behind the flood. Beyond ``max_waiting`` jobs
waiting for one client, a new one is refused with ``busy``: that bounds what a
client can make the daemon hold, and it is told so at once.

All clients' jobs together, waiting and running, are bounded too
(``max_jobs``): past it the owner holding the most is refused. A newcomer's
job takes the place of the newest waiting answer of the owner holding most
(that one is answered ``busy``), so a crowd of connections each queueing
Searches can neither grow the daemon's queues nor lock a quiet client out.

A job submitted as an ``answer`` only makes its owner's answer: when the owner
goes (its connection closed), ``drop`` cancels those still waiting, so a
client that pipelines Searches and disconnects holds no thread for answers
nobody reads. (Scans and resend tail reads are not answers: other requests
wait for them, so they run whoever asked.)

An owner whose answers pile up unread (its connection's output budget,
``bounds.py``: the transport paused writing) is *held*: its waiting jobs get no
thread until it reads again. Without that, the requests read before the pause
would go on being served: a client that pipelined Lists and read slowly would
have answers of megabytes made and buffered for it, past its budget, at the
expense of everyone else's share of the CPU.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from sessiond.wire.errors import busy

SWITCH_INTERVAL = 0.0005
"""The daemon's ``sys.setswitchinterval``: how long the event loop may wait for
the GIL while a read-pool thread runs Python (a scan, a List page). CPython's
5 ms default let every such job add up to 5 ms to each step of another
client's append (its read, its sync's start and end); 0.5 ms bounds that, at
the price of more GIL hand-offs only while threads do compete."""

BACKGROUND = "daemon"
"""The owner of work no client asked for (catalog refreshes): never refused,
its jobs are bounded by what it refreshes (one per project dir at a time)."""


class _Job:
    __slots__ = ("fn", "args", "fut", "answer")

    def __init__(self, fn: Callable[..., Any], args: tuple, fut: asyncio.Future, answer: bool) -> None:
        self.fn, self.args, self.fut, self.answer = fn, args, fut, answer


class _Owner:
    __slots__ = ("waiting", "running", "queued")

    def __init__(self) -> None:
        self.waiting: deque[_Job] = deque()
        self.running = 0
        self.queued = False  # in the round-robin line

    @property
    def holds(self) -> int:
        return len(self.waiting) + self.running


class FairShare:
    """Round-robin over owners of the jobs submitted to ``executor``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, executor: ThreadPoolExecutor, threads: int,
                 per_owner: int, max_waiting: int, max_jobs: int) -> None:
        self.loop = loop
        self.executor = executor
        self.threads = threads
        self.per_owner = per_owner
        self.max_waiting = max_waiting
        self.max_jobs = max_jobs
        self.current: Hashable = BACKGROUND
        """The owner charged when a caller names none: the connection whose
        request is being dispatched (set by the connection around dispatch), so
        a scan that a request causes deep in the registry is charged to it."""
        self._owners: dict[Hashable, _Owner] = {}
        self._line: deque[Hashable] = deque()
        self._held: set[Hashable] = set()
        self.running = 0
        self.refused = 0
        self.jobs = 0
        """Clients' jobs waiting or running (``BACKGROUND``'s not counted)."""
        self.started = 0
        """Jobs handed to a thread so far."""
        self.dropped = 0
        """Answers dropped unstarted because their owner went (a Search
        cancelled while it waited to be queued counts too)."""

    @property
    def waiting(self) -> int:
        return sum(len(o.waiting) for o in self._owners.values())

    def submit(self, fn: Callable[..., Any], *args: Any, owner: Hashable | None = None,
               answer: bool = False) -> asyncio.Future:
        """Run ``fn(*args)`` in the pool when ``owner``'s turn comes; its result
        (or exception) in the returned future. Raises ``busy`` when ``owner``
        already has ``max_waiting`` jobs waiting, or holds the most of the
        ``max_jobs`` all clients' may. ``answer``: the job only makes
        ``owner``'s answer, and is dropped unstarted if the owner goes."""
        key = self.current if owner is None else owner
        o = self._owners.get(key)
        if key != BACKGROUND:
            if o is not None and len(o.waiting) >= self.max_waiting:
                self.refused += 1
                raise busy(f"this connection already has {len(o.waiting)} expensive requests waiting "
                           f"(List, Search, resend, scan); retry once they are answered")
            if self.jobs >= self.max_jobs:
                self._make_room(key, o.holds if o is not None else 0)
            self.jobs += 1
        if o is None:
            o = self._owners[key] = _Owner()
        fut = self.loop.create_future()
        o.waiting.append(_Job(fn, args, fut, answer))
        self._enlist(key, o)
        self._pump()
        return fut

    def _make_room(self, key: Hashable, holds: int) -> None:
        """At ``max_jobs``: the newest waiting answer of the owner holding the
        most makes room when it holds more than ``key`` would with this job,
        and is answered ``busy``; else ``key``'s job is refused."""
        rival, most = None, holds + 1
        for other, o in self._owners.items():
            if other != BACKGROUND and other != key and o.holds > most and o.waiting and o.waiting[-1].answer:
                rival, most = other, o.holds
        message = (f"the daemon already has {self.jobs} expensive requests waiting or running (budget "
                   f"{self.max_jobs}) and no other connection holds more of them than this one; retry once they are answered")
        self.refused += 1
        if rival is None:
            raise busy(message)
        o = self._owners[rival]
        job = o.waiting.pop()
        self._forget(rival, o)
        if not job.fut.done():
            job.fut.set_exception(busy(message))

    def drop(self, owner: Hashable) -> None:
        """``owner`` is gone: its answers not started yet are cancelled (what
        runs, runs out; a Search is also told to stop, see ``search.py``)."""
        o = self._owners.get(owner)
        if o is not None:
            answers = [job for job in o.waiting if job.answer]
            o.waiting = deque(job for job in o.waiting if not job.answer)
            for job in answers:
                job.fut.cancel()
            self.dropped += len(answers)
            self.jobs -= len(answers)
            self._tidy(owner, o)
        self.release(owner)  # what is left (scans others wait for) runs

    def _forget(self, key: Hashable, o: _Owner) -> None:
        """One of ``key``'s waiting jobs was taken off its queue unstarted."""
        self.jobs -= 1
        self._tidy(key, o)

    def _tidy(self, key: Hashable, o: _Owner) -> None:
        if not o.waiting and o.queued:
            o.queued = False
            self._line.remove(key)
        if not o.holds:
            del self._owners[key]

    def _enlist(self, key: Hashable, o: _Owner) -> None:
        if o.waiting and o.running < self.per_owner and not o.queued and key not in self._held:
            o.queued = True
            self._line.append(key)

    def hold(self, owner: Hashable) -> None:
        """Start no more of ``owner``'s jobs (those running finish) until ``release``."""
        if owner == BACKGROUND or owner in self._held:
            return
        self._held.add(owner)
        o = self._owners.get(owner)
        if o is not None and o.queued:
            o.queued = False
            self._line.remove(owner)

    def release(self, owner: Hashable) -> None:
        if owner not in self._held:
            return
        self._held.discard(owner)
        o = self._owners.get(owner)
        if o is not None:
            self._enlist(owner, o)
            self._pump()

    def _pump(self) -> None:
        while self.running < self.threads and self._line:
            key = self._line.popleft()
            o = self._owners[key]
            o.queued = False
            queued = o.waiting.popleft()
            fut = queued.fut
            if fut.cancelled():  # its asker stopped waiting (a Search task cancelled): nothing to make
                self._forget_cancelled(key, o)
                continue
            o.running += 1
            self.running += 1
            self.started += 1
            self._enlist(key, o)  # to the back of the line: the others go first
            try:
                job = self.loop.run_in_executor(self.executor, queued.fn, *queued.args)
            except RuntimeError:  # the pool is shut down (the daemon is exiting): nothing runs any more
                self._abandon()
                fut.cancel()
                return
            job.add_done_callback(partial(self._done, key, fut))

    def _forget_cancelled(self, key: Hashable, o: _Owner) -> None:
        if key != BACKGROUND:
            self.jobs -= 1
            self.dropped += 1
        if o.holds:
            self._enlist(key, o)
        else:
            del self._owners[key]

    def _abandon(self) -> None:
        for o in self._owners.values():
            for job in o.waiting:
                job.fut.cancel()
            o.waiting.clear()
        self._line.clear()

    def _done(self, key: Hashable, fut: asyncio.Future, job: asyncio.Future) -> None:
        o = self._owners[key]
        o.running -= 1
        self.running -= 1
        if key != BACKGROUND:
            self.jobs -= 1
        if job.cancelled():  # the pool shut down under it
            fut.cancel()
        else:
            exc = job.exception()  # taken even when its asker is gone: else asyncio logs it as never retrieved
            if fut.cancelled():
                pass
            elif exc is None:
                fut.set_result(job.result())
            else:
                fut.set_exception(exc)
        if not o.waiting and not o.running:
            del self._owners[key]
        elif o.waiting:
            # Its next job starts after ``fut``'s callbacks ran: the answer
            # they queue may fill its output budget, which holds the owner.
            self.loop.call_soon(self._reenlist, key)
        self._pump()

    def _reenlist(self, key: Hashable) -> None:
        o = self._owners.get(key)
        if o is not None:
            self._enlist(key, o)
            self._pump()

    def status(self) -> dict[str, int]:
        """``jobsRunning``/``jobsWaiting`` count every job in the pool;
        ``jobsBackground`` those of them that are the daemon's own
        (``BACKGROUND``: not a client's, so outside ``max_jobs``)."""
        own = self._owners.get(BACKGROUND)
        return {"readThreads": self.threads, "jobsRunning": self.running, "jobsWaiting": self.waiting,
                "jobsBackground": own.holds if own is not None else 0,
                "jobsStarted": self.started, "jobsDropped": self.dropped, "busyRefused": self.refused,
                "heldOwners": len(self._held)}


def read_pool(loop: asyncio.AbstractEventLoop, threads: int) -> ThreadPoolExecutor:
    """The read pool, made the loop's default executor."""
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="sessiond-read")
    loop.set_default_executor(pool)
    return pool
