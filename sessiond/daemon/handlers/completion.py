"""Answering a request once several write queues have reached a point."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sessiond.wire.errors import SessiondError


def after_all(count: int, done: Callable[[SessiondError | None], None]) -> Callable[[SessiondError | None], None]:
    """A waiter to hand to ``count`` queues; ``done`` runs once, after the last one
    (or at the first error)."""
    state = {"left": count, "fired": False}

    def part(err: SessiondError | None) -> None:
        if state["fired"]:
            return
        state["left"] -= 1
        if err is not None or state["left"] <= 0:
            state["fired"] = True
            done(err)

    if count == 0:
        state["fired"] = True
        done(None)
    return part


def within(loop: asyncio.AbstractEventLoop, seconds: float,
           done: Callable[[SessiondError | None], None]) -> Callable[[SessiondError | None], None]:
    """``done`` run once: by the first call of the waiter returned, or with
    None after ``seconds`` if none came (a disk that hangs holds nothing
    that only wants to see what was written by then)."""
    state: dict = {"fired": False}

    def fire(err: SessiondError | None) -> None:
        if state["fired"]:
            return
        state["fired"] = True
        state["timer"].cancel()
        done(err)

    state["timer"] = loop.call_later(seconds, fire, None)
    return fire


WRITE_WAIT = 1.0
"""Seconds a reading request (List, Search) waits for the writes accepted
before it, at most."""


def after_queued_writes(daemon, done: Callable[[], None]) -> None:
    """Run ``done`` once every entry accepted so far (on any queue, by any
    client) is written (never synced): at once when nothing is queued, after
    ``WRITE_WAIT`` at most, and on a failed write. What a reader is answered
    from (the catalog, the index) learns of a write when it is made, so a
    ``queued`` append still in its coalescing window would be missing from it."""
    queued = [q for q in daemon.writer.queues.values() if q.accepted > q.written]
    if not queued:
        done()
        return
    waiter = after_all(len(queued), within(daemon.loop, WRITE_WAIT, lambda err: done()))
    for q in queued:
        daemon.writer.when_written(q, waiter)
