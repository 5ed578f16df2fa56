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


class EndOfPass:
    """The one owner of the end of an event-loop pass: runs the registered
    stages, in rank order, once at the end of each pass in which one of them
    asked for it (``request``). A request made while the stages run asks for
    the next pass."""

    __slots__ = ("loop", "_stages", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._stages: list[tuple[int, Callable[[], None]]] = []
        self._scheduled = False

    def register(self, rank: int, stage: Callable[[], None]) -> None:
        """Run ``stage`` at the end of every requested pass, after the stages
        of a lower ``rank`` (``WRITES``, ``ANSWERS``)."""
        self._stages.append((rank, stage))
        self._stages.sort(key=lambda s: s[0])

    def request(self) -> None:
        """Something was produced in this pass: run the stages at its end."""
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self.run)

    def run(self) -> None:
        self._scheduled = False
        for _, stage in self._stages:
            try:
                stage()
            except Exception:  # a bug: the later stages still run (the answers go out)
                log.exception("internal error at the end of a loop pass")
