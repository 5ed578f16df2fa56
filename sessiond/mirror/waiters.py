"""Required mode's durable acks: waiting until JetStream has the bytes too.

Why it exists: with ``required = true`` a ``durable`` append is acknowledged
only once the local fdatasync is done AND JetStream acknowledged every file the
append touched up to the size it wrote. One ``Countdown`` per append is hung on
each of those files as a ``(target offset, countdown)`` waiter; this module is
all the code that hangs, releases, expires and fails them, so the rules of a
durable ack in required mode read in one place. When to call each is the
pump's and the tracked files' business (an ack came, a tick passed, the
connection failed, a file diverged).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sessiond.wire.errors import SessiondError

from .jetstream import mirror_error

if TYPE_CHECKING:
    from .tracking import TrackedFile


class Countdown:
    """A durable ack waiting for several files' acks, with a deadline. The
    first error answers it; else the last file's ack does."""

    __slots__ = ("left", "done", "deadline")

    def __init__(self, left: int, done: Callable[[SessiondError | None], None], deadline: float) -> None:
        self.left = left
        self.done: Callable[[SessiondError | None], None] | None = done
        self.deadline = deadline

    def part(self, err: SessiondError | None) -> None:
        if self.done is None:
            return
        self.left -= 1
        if err is not None or self.left <= 0:
            done, self.done = self.done, None
            done(err)


def wait_for(files: list[TrackedFile], done: Callable[[SessiondError | None], None], deadline: float) -> None:
    """Call ``done`` once every file in ``files`` is acknowledged up to its current size."""
    waiter = Countdown(len(files), done, deadline)
    for f in files:
        f.waiters.append((f.size, waiter))


def release(f: TrackedFile) -> None:
    """``f.acked`` advanced: the waiters it now covers have their part."""
    keep = []
    for target, waiter in f.waiters:
        if f.acked >= target:
            waiter.part(None)
        else:
            keep.append((target, waiter))
    f.waiters = keep


def expire(f: TrackedFile, now: float, why: str) -> None:
    """Answer ``f``'s waiters past their deadline with ``why``; forget those
    already answered through another file."""
    keep = []
    for target, waiter in f.waiters:
        if now > waiter.deadline:
            waiter.part(mirror_error(why))
        elif waiter.done is not None:
            keep.append((target, waiter))
    f.waiters = keep


def fail(f: TrackedFile, err: SessiondError) -> None:
    """Answer all of ``f``'s waiters with ``err`` (one error object for all: they read its code and message)."""
    for _, waiter in f.waiters:
        waiter.part(err)
    f.waiters.clear()
