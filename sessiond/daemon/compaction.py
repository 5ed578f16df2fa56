"""Packing the pure-Python dedup sets off the append path.

Only ``uuidset.UuidSet`` packs: the compiled set the daemon uses when it was built
adds each uuid to its table on the spot, and the registry then makes no ``Compactor``.
A uuid costs ~145 bytes in a plain set and ~35 packed (``uuidset``), but packing
costs a few microseconds a uuid, as much as the rest of an append. So appends
only add to each set's ``recent`` part, and packing happens as a background job
in the read pool: for every set of a session that has had no request for
``QUIET_S`` (checked by the registry's sweep), and for a set that is still busy
once its ``recent`` part reaches ``HOT_MIN`` uuids and an eighth of its packed
part (``HOT_MAX`` at most). The job builds the packed state from a snapshot
(a copy of the packed part: packing a busy set in steps of an eighth of it
copies each record about eight times in all, not once per ``HOT_MIN``); the
loop swaps it in (``UuidSet.adopt``), so nothing is ever locked and the loop
never waits for it.

Why packing starts early: unpacked uuids are 85-byte strings in pymalloc's
arenas, and an arena is returned to the system only once every block in it is
free. 8,192 strings held per busy session over a big load spread the heap over
twice the arenas, and the few long-lived objects allocated meanwhile (a
session's state, a file's watch) kept them after the strings were packed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from . import memory
from .uuidset import PACK_MIN, UuidSet
from .workers import BACKGROUND

if TYPE_CHECKING:
    from .session_state import SessionState
    from .uuidset import AnyUuidSet
    from .workers import FairShare

log = logging.getLogger("sessiond")

QUIET_S = 2.0
HOT_MIN = 1024
HOT_MAX = 32768
BACKLOG_MAX = 65536
"""Uuids in packing jobs not done yet beyond which a busy set is packed on the
spot instead (about 6 MB of strings held): a load faster than the read pool
packs is slowed down rather than left to fill the heap with strings."""
SHRINK_AFTER = 65536


class Compactor:
    """Packs sessions' dedup sets in the read pool, off the append path: a set
    quiet for ``QUIET_S``, or a busy one whose unpacked part has grown, so a
    uuid held costs its packed size without an append paying for the packing."""

    def __init__(self, fair: FairShare) -> None:
        self.fair = fair
        self.jobs = 0
        self.backlog = 0  # uuids in the jobs not done yet
        self.inline = 0  # sets packed on the spot because the backlog was full
        self.packed_since_shrink = 0

    def compact(self, uuids: AnyUuidSet, busy: bool = False) -> None:
        """Start packing ``uuids``' recent part, unless it is small or already
        being packed (or compiled: nothing to pack). ``busy``: a set being
        appended to, packed on the spot when the jobs are behind (a quiet one
        waits for the next sweep)."""
        if not isinstance(uuids, UuidSet) or uuids.packing or len(uuids.recent) < PACK_MIN:
            return
        if self.backlog >= BACKLOG_MAX:
            if busy:
                self.inline += 1
                uuids.pack()
            return
        items, generation = list(uuids.recent), uuids.generation
        uuids.packing = True
        self.jobs += 1
        self.backlog += len(items)
        fut = self.fair.submit(uuids.packed_with, items, owner=BACKGROUND)

        def done(f) -> None:
            self.jobs -= 1
            self.backlog -= len(items)
            if f.cancelled() or f.exception() is not None:
                uuids.packing = False
                if not f.cancelled():
                    log.error("packing a dedup set failed: %s", f.exception())
                return
            uuids.adopt(f.result(), generation, items)
            self.packed_since_shrink += len(items)
            if not self.jobs and self.packed_since_shrink >= SHRINK_AFTER:
                self.packed_since_shrink = 0
                memory.shrink(self.fair)  # the strings just let go of: give their pages back

        fut.add_done_callback(done)

    def hot(self, uuids: AnyUuidSet) -> None:
        """After an append: a busy set whose unpacked part grew large."""
        if not isinstance(uuids, UuidSet):
            return
        n = len(uuids.recent)
        if n >= HOT_MIN and n >= min(HOT_MAX, uuids.packed >> 3):
            self.compact(uuids, busy=True)

    def quiet(self, state: SessionState, now: float) -> None:
        """From the sweep: a session without requests for a while."""
        if now - state.last_active >= QUIET_S:
            self.compact(state.side_uuids)
            for target in state.targets():
                self.compact(target.uuids)
