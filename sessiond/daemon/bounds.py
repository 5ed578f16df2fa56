"""Every memory budget of the daemon, and what is used of each.

One misbehaving client must never become everyone's outage, so everything a
client can make the daemon hold has a budget here (Redis's client output buffer
limits and ``maxmemory`` are the model). Beyond a budget the daemon slows that
client down (stops reading it) or answers it a typed error (``busy``,
``too_large``); it never grows without bound and never drops what it has
acknowledged.

    per connection                            beyond it
    max_frame           one frame's body      too_large, connection closed
    max_output_bytes    answers not yet sent  the connection is not read (nor
                                              its read requests served) until
                                              the socket drains
    max_inflight_*      answers still owed    the connection is not read
    across connections
    max_output_total_bytes answers not read   the newest non-reader past it is
                        by stopped clients    disconnected (Redis's client
                                              output buffer limit)
    max_clients         connections           busy, connection closed
    max_sessions        sessions in memory    idle ones evicted, then busy
    max_list_views      List answers kept     the least recently listed is
                        ready (pages.py)      dropped
    max_partial_bytes   frames being received newcomers' big frames wait, unread
    max_pending_total   pre-message entries   busy (nothing accepted)
    max_parked_requests requests waiting on a busy (nothing accepted)
                        file scan
    max_queued_bytes    entries not written   every connection is read slower
    max_expensive_jobs  read-pool jobs of all busy for the connection holding
                        clients (workers.py)  the most

The connection asks this module before it reads more and reports what it holds;
the registry asks it before it buffers pre-message entries or parks a request;
``status`` shows every budget with its current use (``report``).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Protocol

from sessiond.wire.errors import busy
from sessiond.wire.framing import HEADER_SIZE, FrameBuffer

if TYPE_CHECKING:
    from sessiond.config import Settings

SMALL_FRAME = 64 * 1024
"""Frames up to this size never wait for the partial-frame budget: a
well-behaved client's requests go through however full it is (their weight is
bounded by ``max_clients`` x this)."""


ADMIT, WAIT, REFUSE = "admit", "wait", "refuse"


class OutputHolder(Protocol):
    """A connection as the output budget sees it."""

    @property
    def output_bytes(self) -> int:
        """Answers made and not yet taken by the client."""


class PartialHolder(Protocol):
    """A connection as the partial-frame budget sees it."""

    def retry_partial(self) -> bool:
        """Try to be admitted again; True when it was."""


class PartialCharge:
    """One connection's frame being received, as the partial-frame budget sees
    it: once its header is in and it is admitted, charged its full announced
    weight (it may grow to it without another check); until then, what it holds."""

    __slots__ = ("bounds", "charged", "admitted")

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self.charged = 0
        self.admitted = False

    def update(self, frames: FrameBuffer, progressed: bool, queued: bool) -> str:
        """Re-charge after bytes arrived (``progressed``: a frame completed);
        ``queued``: the connection is waiting for the budget already. The verdict
        of ``Bounds.admit_partial``; on ``REFUSE`` the charge is left as it was,
        for ``release`` when the connection goes."""
        if progressed or not frames.pending:
            self.admitted = False
        if self.admitted:
            return ADMIT
        weight = (frames.announced + HEADER_SIZE if frames.announced else frames.pending) if frames.pending else 0
        verdict = self.bounds.admit_partial(self.charged, weight, frames.pending, queued)
        if verdict == ADMIT:
            self._charge(weight)
            self.admitted = bool(frames.announced)
        elif verdict == WAIT:
            self._charge(frames.pending)
        return verdict

    def _charge(self, amount: int) -> None:
        old, self.charged = self.charged, amount
        self.bounds.charge_partial(old, amount)

    def release(self) -> None:
        if self.charged:
            self._charge(0)


class Bounds:
    """The daemon-wide budgets and their use; one per daemon."""

    def __init__(self, settings: Settings, fds_for_clients: int | None = None) -> None:
        self.settings = settings
        self.max_clients = settings.max_clients if fds_for_clients is None else max(1, min(settings.max_clients, fds_for_clients))
        """``max_clients``, or fewer when the fd limit leaves room for fewer: a
        newcomer then gets ``busy`` instead of the daemon failing accept(2)."""
        self.partial_bytes = 0
        """Bytes charged to frames being received: a big frame is charged its
        announced weight once admitted (so its body can never outgrow the
        budget), a frame waiting for admission what it already holds."""
        self._partial_waiting: deque[PartialHolder] = deque()
        self.pending_bytes = 0
        """Pre-message entries held across every session."""
        self.parked = 0
        """Requests waiting for a file scan before they can run."""
        self.refused = 0
        """Requests and connections refused with ``busy`` so far."""
        self._not_reading: set[OutputHolder] = set()
        """Connections whose unsent answers passed their high-water mark."""

    # ------------------------------------------------------------ partial frames

    def admit_partial(self, charged: int, weight: int, held: int, queued: bool) -> str:
        """May a connection charged ``charged``, holding ``held`` bytes of a frame
        of ``weight``, go on? ``ADMIT``: small frames always, a big one when it
        fits (or nobody else holds any: the budget is at least one frame, see
        the config check) and nobody waits before it (``queued``: it is the
        head of the queue). ``WAIT``: it may not go on yet, but what it already
        holds fits. ``REFUSE``: even that does not (``busy``, its frame dropped)."""
        others = self.partial_bytes - charged
        if weight <= SMALL_FRAME:
            return ADMIT
        if (queued or not self._partial_waiting) and (others <= 0 or others + weight <= self.settings.max_partial_bytes):
            return ADMIT
        if others + held <= self.settings.max_partial_bytes:
            return WAIT
        self.refused += 1
        return REFUSE

    def charge_partial(self, old: int, new: int) -> None:
        self.partial_bytes += new - old
        if new < old and self._partial_waiting:
            self._wake_partial()

    def wait_partial(self, holder: PartialHolder) -> None:
        if holder not in self._partial_waiting:
            self._partial_waiting.append(holder)

    def forget_partial(self, holder: PartialHolder) -> None:
        try:
            self._partial_waiting.remove(holder)
        except ValueError:
            pass

    def _wake_partial(self) -> None:
        """First come, first served: the oldest waiter is admitted first, and
        nobody jumps a waiter that does not fit yet."""
        while self._partial_waiting:
            holder = self._partial_waiting[0]
            if not holder.retry_partial():
                break
            self.forget_partial(holder)  # it may have left the queue itself already

    @property
    def partial_waiting(self) -> int:
        return len(self._partial_waiting)

    # ----------------------------------------------------------------- output

    def stopped_reading(self, holder: OutputHolder) -> bool:
        """``holder`` does not read its answers (its transport paused writing):
        False when the answers all such clients leave unread pass
        ``max_output_total_bytes`` with it, and it must be disconnected."""
        self._not_reading.add(holder)
        total = sum(h.output_bytes for h in self._not_reading)
        if total > self.settings.max_output_total_bytes:
            self._not_reading.discard(holder)
            self.refused += 1
            return False
        return True

    def reading_again(self, holder: OutputHolder) -> None:
        self._not_reading.discard(holder)

    # ---------------------------------------------------------------- pending

    def check_pending(self, extra: int) -> None:
        """Refuse (``busy``, nothing accepted) pre-message entries that would take
        every session's pending buffers together past their budget."""
        limit = self.settings.max_pending_total_bytes
        if extra and self.pending_bytes + extra > limit:
            self.refused += 1
            raise busy(
                f"the daemon already holds {self.pending_bytes} bytes of entries of sessions with no message "
                f"yet (budget {limit}); send a message to materialize a session, or retry later"
            )

    def pending_changed(self, delta: int) -> None:
        self.pending_bytes += delta

    # ----------------------------------------------------------------- parking

    def park(self) -> None:
        """A request is about to wait for a file scan; ``busy`` when too many do."""
        limit = self.settings.max_parked_requests
        if self.parked >= limit:
            self.refused += 1
            raise busy(f"{self.parked} requests are already waiting for file scans (budget {limit}); retry later")
        self.parked += 1

    def unpark(self, count: int = 1) -> None:
        self.parked -= count

    # ------------------------------------------------------------------ clients

    def check_sessions(self, sessions: int) -> None:
        limit = self.settings.max_sessions
        if sessions >= limit:
            self.refused += 1
            raise busy(f"the daemon already holds {sessions} sessions in use (budget {limit}); close some, or retry later")

    def check_attached(self, attached: int) -> None:
        """One connection may hold a quarter of ``max_sessions``: room is left
        for everyone else's."""
        limit = max(1, self.settings.max_sessions // 4)
        if attached >= limit:
            self.refused += 1
            raise busy(f"this connection already holds {attached} sessions (a quarter of the daemon's "
                       f"{self.settings.max_sessions}); close some first")

    def check_clients(self, clients: int) -> None:
        limit = self.max_clients
        if clients >= limit:
            self.refused += 1
            raise busy(f"the daemon already serves {clients} connections (budget {limit})")

    # ------------------------------------------------------------------ report

    def report(self, clients: int, sessions: int, queued_bytes: int,
               per_connection: list[tuple[int, int, int, int]],
               list_views: tuple[int, int] = (0, 0), expensive_jobs: int = 0) -> dict[str, dict[str, int]]:
        """Every budget as ``{"used", "limit"}``; per-connection ones also say
        their ``total`` over all connections (``used`` is the largest one's).
        ``per_connection`` holds (output bytes, in-flight requests, in-flight
        bytes, partial frame bytes) of each connection; ``list_views`` the List
        scopes kept ready and the sessions they hold (``pages.py``);
        ``expensive_jobs`` the clients' read-pool jobs waiting or running."""
        s = self.settings

        def per(i: int, limit: int) -> dict[str, int]:
            values = [row[i] for row in per_connection]
            return {"used": max(values, default=0), "limit": limit, "total": sum(values)}

        return {
            "clients": {"used": clients, "limit": self.max_clients},
            "sessions": {"used": sessions, "limit": s.max_sessions},
            "partialBytes": {"used": self.partial_bytes, "limit": s.max_partial_bytes, "waiting": self.partial_waiting},
            "pendingBytes": {"used": self.pending_bytes, "limit": s.max_pending_total_bytes},
            "parkedRequests": {"used": self.parked, "limit": s.max_parked_requests},
            "queuedBytes": {"used": queued_bytes, "limit": s.max_queued_bytes},
            "frameBytes": per(3, s.max_frame + HEADER_SIZE),
            "outputBytes": per(0, s.max_output_bytes),
            "unreadOutputBytes": {"used": sum(h.output_bytes for h in self._not_reading), "limit": s.max_output_total_bytes,
                                  "clients": len(self._not_reading)},
            "inflightRequests": per(1, s.max_inflight_requests),
            "inflightBytes": per(2, s.max_inflight_bytes),
            "listViews": {"used": list_views[0], "limit": s.max_list_views, "sessions": list_views[1]},
            "expensiveJobs": {"used": expensive_jobs, "limit": s.max_expensive_jobs},
        }
