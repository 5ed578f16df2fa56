"""The end of an event-loop pass: one callback, one owner, a fixed order.

Whatever a pass of the loop produced that is meant to leave together (the
writes its requests asked for, the answers to them) is flushed by one
``call_soon`` callback that runs once the requests of the pass are handled.
The parts that produce such work register a stage with ``EndOfPass`` and ask
for the pass with ``request``; the stages run in the order of their rank:

1. ``WRITES`` (the writer): drain every queue a ``written``/``durable``
   request asked for (group commit: one write per file for all the requests
   of the pass), then arm the coalescing timer of queues holding only
   ``queued`` lines. A drain answers its write waiters: their answers join
   the connections' output in this same pass.
2. ``ANSWERS`` (the outbox): every connection with answers writes them in
   one ``transport.write``, so a pipelining client gets all its acks of a pass
   at once, and an answer made by a drain leaves without another loop iteration.

So an answer never leaves before the write it reports: a ``written`` or
``durable`` ack is made only by its drain (or its sync round), which runs
before, or in an earlier pass than, the answers stage that sends it.

A request names the stage it has work for: one made while the stages run, for
a stage still to come in this run (a drain's answer, for the answers stage),
is served by this run; one for a stage that ran already asks for the next
pass. A ``written`` ack so costs one end-of-pass callback, not two.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger("sessiond")

WRITES = 0
"""The writer's stage: drains, then coalescing timers armed."""
ANSWERS = 1
"""The outbox's stage: answers sent, one write per connection."""
_IDLE = 1 << 30
"""``EndOfPass._running`` between runs: above every rank."""


class EndOfPass:
    """The one owner of the end of an event-loop pass: runs the registered
    stages, in rank order, once at the end of each pass in which one of them
    asked for it (``request``). A request made while the stages run is served
    by this run when it is for a stage still to come, else by the next pass."""

    __slots__ = ("loop", "_stages", "_scheduled", "_running")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._stages: list[tuple[int, Callable[[], None]]] = []
        self._scheduled = False
        self._running = _IDLE
        """The rank of the stage running now (``_IDLE`` between runs)."""

    def register(self, rank: int, stage: Callable[[], None]) -> None:
        """Run ``stage`` at the end of every requested pass, after the stages
        of a lower ``rank`` (``WRITES``, ``ANSWERS``)."""
        self._stages.append((rank, stage))
        self._stages.sort(key=lambda s: s[0])

    def request(self, rank: int = WRITES) -> None:
        """Something was produced in this pass for the stages of ``rank`` and
        after: run them at its end. Asked by a stage of a lower rank while it
        runs, the run going on serves it."""
        if rank > self._running or self._scheduled:
            return
        self._scheduled = True
        self.loop.call_soon(self.run)

    def run(self) -> None:
        self._scheduled = False
        try:
            for rank, stage in self._stages:
                self._running = rank
                try:
                    stage()
                except Exception:  # a bug: the later stages still run (the answers go out)
                    log.exception("internal error at the end of a loop pass")
        finally:
            self._running = _IDLE
