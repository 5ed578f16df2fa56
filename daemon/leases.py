"""Live sessions (SPEC 7): at most one writing client per conversation.

A session's main chain has at most one holder, a connection. A client claims the
lease with ``lease=True`` on its Append/Record/Open/Adopt; it keeps it until it
closes the session or its connection goes away (a crash included: the daemon
sees the drop). While a session is held, chain entries (``CHAIN_TYPES`` bound for
the main transcript) from any other connection are refused with
``session_busy`` naming the holder; metadata entries and sidechain entries
routed to agent files are never blocked. Writers that never claim keep working
as before while nobody holds the session, several at once included.

A take-over (``take_over=True`` on Open/Adopt) moves the lease on purpose; the
old holder's connection is remembered as having lost it, so its chain entries
get ``lease_lost`` from then on (until it closes the session or goes away),
even once the new holder has let go: it no longer knows the conversation.

The leases are kept in ``<root>/.sessiond-leases.json`` (rewritten at each
grant and release) so that after a daemon restart a holder reconnecting and
resending with its claim gets its lease back first: for ``lease_grace``
seconds after start, such a lease waits for a client with the holder's pid and
name; anyone else is refused as if it were held (a take-over still works).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from sessiond.protocol.lease import CHAIN_TYPES, LeaseHolder, iso
from sessiond.protocol.transcript.appendfile import FILE_MODE, ensure_dir
from sessiond.protocol.transcript.entries import EntryHeader
from sessiond.protocol.wire.errors import LeaseLost, SessionBusy

if TYPE_CHECKING:
    from .connection import Connection

log = logging.getLogger("sessiond")

LEASE_FILE = ".sessiond-leases.json"


class _Saved(msgspec.Struct):
    pid: int
    client: str
    since: float
    last_write: float | None = None


class Lease:
    __slots__ = ("conn", "pid", "client", "since", "last_write")

    def __init__(self, conn: int | None, pid: int, client: str, since: float, last_write: float | None = None) -> None:
        self.conn = conn
        """The holding connection's id; None for a lease restored after a restart,
        waiting for its holder to reconnect."""
        self.pid = pid
        self.client = client
        self.since = since
        self.last_write = last_write

    def holder(self, session: str) -> LeaseHolder:
        return LeaseHolder(session=session, pid=self.pid, client=self.client, since=iso(self.since),
                           lastWrite=iso(self.last_write) if self.last_write is not None else None,
                           reconnecting=self.conn is None)


def is_chain(headers: list[EntryHeader], agent: str | None) -> bool:
    """Does a batch hold entries of the main chain? Not when it is routed to an
    agent file, nor for sidechain entries (their own files, or inline 1.0.x
    sidechains, which the main chain never walks) and metadata."""
    if agent is not None:
        return False
    return any(h.type in CHAIN_TYPES and not h.isSidechain for h in headers)


class Leases:
    def __init__(self, loop: asyncio.AbstractEventLoop, root: Path, grace: float) -> None:
        self.loop = loop
        self.path = root / LEASE_FILE
        self.held: dict[str, Lease] = {}
        self.lost: dict[str, set[int]] = {}
        """Per session: connections whose lease was taken over from them."""
        self._by_conn: dict[int, set[str]] = {}
        self._frozen = False
        self.grace_until = time.monotonic() + grace
        self._restore()
        if any(lease.conn is None for lease in self.held.values()):
            loop.call_later(grace, self._grace_over)

    # ------------------------------------------------------------------ checks

    def guard(self, session: str, conn: Connection, claim: bool, chain: Callable[[], bool]) -> None:
        """Before a batch of ``conn`` is accepted for ``session``: raise
        ``SessionBusy``/``LeaseLost`` when it holds chain entries (``chain()``,
        asked only when it matters) and someone else holds the session; grant
        the lease when ``claim`` and nobody does. Runs on every append: the
        common cases (the holder itself, nobody holding) are one dict probe."""
        lease = self.held.get(session)
        if lease is not None and lease.conn == conn.id:
            lease.last_write = time.time()
            return
        lost = self.lost.get(session)
        if lease is None and lost is None:
            if claim:
                self._grant(session, conn).last_write = time.time()
            return
        if lease is not None and lease.conn is None:
            if self._returning(lease, conn) and claim:
                self._rebind(session, lease, conn)
                return
            if time.monotonic() >= self.grace_until:
                self._drop(session)
                lease = None
        if not chain():
            return  # metadata, sidechains: never blocked, never a claim on a held session
        if lost is not None and conn.id in lost:
            raise LeaseLost(f"session {session} was taken over by {self._who(session)}; this client no longer "
                            "holds it and its chain entries are refused", holder=self._holder(session))
        if lease is None:
            if claim:
                self._grant(session, conn).last_write = time.time()
            return
        raise self.busy(session, lease)

    def claim(self, session: str, conn: Connection, take_over: bool) -> LeaseHolder:
        """Open/Adopt with a claim: the lease for ``conn``, taken from its holder
        when ``take_over``; else ``session_busy`` while someone else holds it."""
        lease = self.held.get(session)
        if lease is not None and lease.conn not in (None, conn.id) and take_over:
            log.info("session %s taken over from %s by %s", session, lease.holder(session).describe(), conn.peer)
            self.lost.setdefault(session, set()).add(lease.conn)  # type: ignore[arg-type]
            self._forget_conn(lease.conn, session)
            del self.held[session]
        elif lease is not None and lease.conn is None and take_over:
            self._drop(session)
        else:
            self.guard(session, conn, True, lambda: True)
        lease = self.held.get(session)
        if lease is None or lease.conn != conn.id:
            lease = self._grant(session, conn)
        return lease.holder(session)

    def take_away(self, session: str, conn: Connection) -> None:
        """A take-over that leaves the lease free: the holder loses it."""
        lease = self.held.get(session)
        if lease is not None and lease.conn != conn.id:
            log.info("session %s taken over from %s by %s", session, lease.holder(session).describe(), conn.peer)
            if lease.conn is not None:
                self.lost.setdefault(session, set()).add(lease.conn)
                self._forget_conn(lease.conn, session)
            self._drop(session)

    def refuse_if_held(self, session: str, conn: Connection) -> None:
        lease = self.held.get(session)
        if lease is not None and lease.conn != conn.id:
            if lease.conn is None and time.monotonic() >= self.grace_until:
                self._drop(session)
                return
            raise self.busy(session, lease)

    def busy(self, session: str, lease: Lease) -> SessionBusy:
        holder = lease.holder(session)
        return SessionBusy(f"session {session} is live: held by {holder.describe()}", holder=holder)

    def holder(self, session: str) -> LeaseHolder | None:
        lease = self.held.get(session)
        return lease.holder(session) if lease is not None else None

    def live(self) -> list[LeaseHolder]:
        return [lease.holder(sid) for sid, lease in self.held.items()]

    # ------------------------------------------------------------------ changes

    def release(self, session: str, conn: int) -> None:
        """``conn`` left the session (Close, or its connection went away)."""
        lease = self.held.get(session)
        if lease is not None and lease.conn == conn:
            del self.held[session]
            self._save()
        lost = self.lost.get(session)
        if lost is not None:
            lost.discard(conn)
            if not lost:
                del self.lost[session]
        self._forget_conn(conn, session)

    def release_all(self, conn: int) -> None:
        """A connection went away: every lease it held or lost goes with it."""
        for session in list(self._by_conn.get(conn, ())):
            self.release(session, conn)
        for session in [s for s, lost in self.lost.items() if conn in lost]:
            self.release(session, conn)

    def _grant(self, session: str, conn: Connection) -> Lease:
        lease = self.held[session] = Lease(conn.id, conn.pid, conn.client_name, time.time())
        self._by_conn.setdefault(conn.id, set()).add(session)
        self._save()
        return lease

    def _rebind(self, session: str, lease: Lease, conn: Connection) -> None:
        log.info("session %s: lease given back to %s after the restart", session, conn.peer)
        lease.conn = conn.id
        lease.last_write = time.time()
        self._by_conn.setdefault(conn.id, set()).add(session)
        self._save()

    @staticmethod
    def _returning(lease: Lease, conn: Connection) -> bool:
        return bool(lease.pid) and lease.pid == conn.pid and lease.client == conn.client_name

    def _drop(self, session: str) -> None:
        del self.held[session]
        self._save()

    def _grace_over(self) -> None:
        stale = [sid for sid, lease in self.held.items() if lease.conn is None]
        for sid in stale:
            log.info("session %s: its holder did not come back after the restart; lease released", sid)
            del self.held[sid]
        if stale:
            self._save()

    def _forget_conn(self, conn: int | None, session: str) -> None:
        sessions = self._by_conn.get(conn) if conn is not None else None
        if sessions is not None:
            sessions.discard(session)
            if not sessions:
                del self._by_conn[conn]  # type: ignore[arg-type]

    def _holder(self, session: str) -> LeaseHolder | None:
        return self.holder(session)

    def _who(self, session: str) -> str:
        holder = self.holder(session)
        return holder.describe() if holder is not None else "another client (since gone)"

    # -------------------------------------------------------------- persistence

    def _restore(self) -> None:
        try:
            with open(self.path, "rb") as f:
                saved = msgspec.json.decode(f.read(), type=dict[str, _Saved])
        except FileNotFoundError:
            return
        except (OSError, msgspec.DecodeError) as exc:
            log.warning("%s unreadable (%s): no lease kept from the previous daemon", self.path, exc)
            return
        for sid, s in saved.items():
            if _alive(s.pid):  # a holder that died with the daemon (or a reboot) cannot come back
                self.held[sid] = Lease(None, s.pid, s.client, s.since, s.last_write)
        if self.held:
            log.info("%d leases kept for their holders to reconnect", len(self.held))
        if len(self.held) != len(saved):
            self._save()

    def snapshot(self) -> bytes:
        return msgspec.json.encode({sid: _Saved(lease.pid, lease.client, lease.since, lease.last_write)
                                    for sid, lease in self.held.items()})

    def _save(self) -> None:
        """Write the table at once, before the change is answered, so a daemon
        killed right after still knows it. Grants and releases are rare (a
        session's start and end) and the file is small; it is renamed into
        place but not fsynced: a power cut takes the holders down with it."""
        if self._frozen:
            return
        try:
            _write_atomic(self.path, self.snapshot())
        except OSError as exc:
            log.error("saving leases to %s failed: %s", self.path, exc)

    def freeze(self) -> None:
        """Shutdown: save the table as it is, so the holders still connected get
        their leases back from the next daemon; the connections closed after
        this do not change it."""
        self._save()
        self._frozen = True


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now: not our holder
        return False
    return True


def _write_atomic(path: Path, data: bytes) -> None:
    if not path.parent.is_dir():
        ensure_dir(path.parent)  # the root of a daemon that has written nothing yet
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)
