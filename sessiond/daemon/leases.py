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
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from sessiond.store.entries import EntryHeader
from sessiond.store.paths import is_session_id
from sessiond.store.safeopen import StoreRoot
from sessiond.store.statefile import read_state
from sessiond.wire.core import MAX_CLIENT_NAME, MAX_PID, StateFileProblem
from sessiond.wire.errors import LeaseLost, SessionBusy
from sessiond.wire.lease import CHAIN_TYPES, LeaseHolder, iso

from .filework import FileWork

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
    """One session's lease: the holding connection (None while a holder of the
    previous daemon has not reconnected), its pid and client name, since when, and
    its last write."""

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
    """Every live session's lease (SPEC 7): checked on every append, granted,
    released and taken over here, and saved to a file so that holders get theirs
    back after a daemon restart."""

    def __init__(self, loop: asyncio.AbstractEventLoop, store: StoreRoot, files: FileWork, grace: float,
                 problems: list[StateFileProblem]) -> None:
        self.loop = loop
        self.store = store
        self.files = files
        self.path = store.path / LEASE_FILE
        self.problems = problems
        """Where a lease file that cannot be used is reported (``status``)."""
        self._saving = threading.Lock()
        self._writing = threading.Lock()
        self._unsaved: bytes | None = None
        """The latest table not written yet (a worker is writing it)."""
        self.held: dict[str, Lease] = {}
        self.lost: dict[str, set[int]] = {}
        """Per session: connections whose lease was taken over from them."""
        self._by_conn: dict[int, set[str]] = {}
        self._frozen = False
        self.grace_until = time.monotonic() + grace
        self._remove_stale_temps()
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
            self.lost.setdefault(session, set()).add(lease.conn)
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
                del self._by_conn[conn]  # type: ignore[arg-type]  # not None: sessions was found under it

    def _holder(self, session: str) -> LeaseHolder | None:
        return self.holder(session)

    def _who(self, session: str) -> str:
        holder = self.holder(session)
        return holder.describe() if holder is not None else "another client (since gone)"

    # -------------------------------------------------------------- persistence

    def _restore(self) -> None:
        """The table the previous daemon left, read as any state file is
        (``read_state``: bounded, set aside when unusable); each entry is
        checked on its own and a bad one skipped with a warning."""
        saved = read_state(self.path, MAX_LEASE_FILE_BYTES, _decode_table, self.problems)
        if not saved:
            return
        kept = 0
        for sid, raw in saved.items():
            entry = _entry(sid, raw)
            if isinstance(entry, str):
                log.warning("%s: lease of %r ignored: %s", self.path, sid[:64], entry)
                continue
            kept += 1
            if kept > MAX_LEASES_KEPT:
                log.warning("%s: more than %d leases; the rest are ignored", self.path, MAX_LEASES_KEPT)
                break
            if _alive(entry.pid):  # a holder that died with the daemon (or a reboot) cannot come back
                self.held[sid] = Lease(None, entry.pid, entry.client, entry.since, entry.last_write)
        if self.held:
            log.info("%d leases kept for their holders to reconnect", len(self.held))
        if len(self.held) != len(saved):
            self._save()

    def _remove_stale_temps(self) -> None:
        """Delete the temp files of saves a killed daemon left
        (``StoreRoot.write_atomic``'s ``.NAME.<pid>.<hex>.tmp``, never renamed
        into place): this daemon holds the root, so no other save is under way,
        and every crash in the middle of one would leave one more. A symlink of
        that name is removed itself, never followed."""
        try:
            names = os.listdir(self.store.path)
        except OSError:
            return
        for name in names:
            if _STALE_TEMP.fullmatch(name):
                try:
                    os.unlink(self.store.path / name)
                except OSError as exc:
                    log.warning("cannot delete %s: %s", self.store.path / name, exc.strerror or exc)
                else:
                    log.info("deleted %s, left by a save a killed daemon did not finish", name)

    def snapshot(self) -> bytes:
        return msgspec.json.encode({sid: _Saved(lease.pid, lease.client, lease.since, lease.last_write)
                                    for sid, lease in self.held.items()})

    def _save(self) -> None:
        """Write the table at once, off the loop, on the writer's file thread
        (``FileWork``): ahead of the creation of the transcript whose append
        took the lease, so a daemon killed once that append is answered still
        knows it. A change made while a save runs is written right after it,
        the latest table last. Grants and releases are rare (a session's start
        and end) and the file is small."""
        if self._frozen:
            return
        with self._saving:
            busy = self._unsaved is not None
            self._unsaved = self.snapshot()
        if not busy:
            self.files.submit(self._write_unsaved)

    def _write_unsaved(self) -> None:
        """Worker thread: write the latest table until none is left unsaved.
        ``_saving`` guards only the hand-over (the loop never waits for a
        write), ``_writing`` the write itself, against ``freeze``'s."""
        while True:
            with self._saving:
                data = self._unsaved
                if data is None:
                    return
            with self._writing:
                if self._frozen:
                    return
                self._write(data)
            with self._saving:
                if self._unsaved is data:
                    self._unsaved = None
                    return

    def _write(self, data: bytes) -> None:
        try:
            self.store.write_atomic(self.path, data)
        except OSError as exc:
            log.error("saving leases to %s failed: %s", self.path, exc)

    def freeze(self) -> None:
        """Shutdown: save the table as it is, so the holders still connected get
        their leases back from the next daemon; the connections closed after
        this do not change it."""
        with self._writing:
            self._frozen = True
            self._write(self.snapshot())


_STALE_TEMP = re.compile(rf"\.{re.escape(LEASE_FILE)}\.[0-9]+\.[0-9a-f]{{8}}\.tmp")
"""The name of a temp file ``write_atomic`` makes for the lease table."""
MAX_LEASE_FILE_BYTES = 8 * 1024 * 1024
"""The lease table's cap on disk: a lease takes 80 to 400 bytes, so this holds
the ``MAX_LEASES_KEPT`` a table may bring back; past it the file is set aside
unread."""
MAX_LEASES_KEPT = 65_536
"""Leases restored at most (each one a held session of the previous daemon)."""
CLOCK_SLACK = 86_400.0
"""How far in the future a saved time may be (a clock set back since) and still be believed."""


def _decode_table(data: bytes) -> dict[str, msgspec.Raw]:
    return msgspec.json.decode(data, type=dict[str, msgspec.Raw])


def _entry(sid: str, raw: msgspec.Raw) -> _Saved | str:
    """One saved lease, checked; why it is not used otherwise."""
    if not is_session_id(sid):
        return "not a session id"
    try:
        s = msgspec.json.decode(raw, type=_Saved)
    except msgspec.DecodeError as exc:
        return str(exc)
    if not 0 < s.pid <= MAX_PID:
        return f"pid {s.pid} out of range"
    if len(s.client) > MAX_CLIENT_NAME:
        return "client name too long"
    latest = time.time() + CLOCK_SLACK
    for name, when in (("since", s.since), ("last_write", s.last_write)):
        if when is not None and not (0 <= when <= latest):  # NaN fails this too
            return f"{name} {when!r} out of range"
    return s


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
