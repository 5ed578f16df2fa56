"""The ``Session`` handle: what an agent process uses to record its conversation.

``record(messages)`` sends the new tail of the process's message list as one
Record request (the daemon chains it, SPEC 3.1) and keeps the returned hint for
the next call. ``append`` stores raw entries. Metadata setters write the entry kinds
listing reads. ``close()`` is safe at exit: when the daemon cannot be reached it
writes whatever it could not deliver directly into the file (the fallback of SPEC
3.3), chained and deduplicated by the same rules the daemon applies.
"""

from __future__ import annotations

import atexit
import logging
import os
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

import msgspec

from sessiond import __version__
from sessiond.store.entries import decode_header
from sessiond.store.locations import daemon_holds_lock, default_root
from sessiond.store.paths import check_session_id
from sessiond.store.recording import chain_messages
from sessiond.store.reencode import encode_entry
from sessiond.wire import messages as m
from sessiond.wire.errors import DaemonUnavailable, LeaseLost, SessionBusy, SessiondError, UnsafeSocketDir
from sessiond.wire.lease import LeaseHolder

from .batching import request_overhead, split
from .connection import Client
from .envelope import Clock, stamp
from .fallback import FallbackResult, direct_append

_json = msgspec.json.Encoder()
log = logging.getLogger("sessiond.client")


MAX_UNCONFIRMED_BYTES = 16 * 1024 * 1024
"""Above this many bytes acknowledged only as ``queued``, the session asks for a
flush, which confirms them: what a session keeps for resending stays bounded."""


class _Batch:
    """One request's entries, kept until known written."""

    __slots__ = ("is_record", "lines", "parent", "sent", "durability", "response", "size")

    def __init__(self, is_record: bool, lines: list[bytes], durability: m.Durability | None) -> None:
        self.is_record = is_record
        self.lines = lines
        self.parent: str | None = None
        """Record: the hint it was first sent with (a resend chains the same way)."""
        self.sent = False
        self.durability = durability
        self.response: m.Appended | None = None
        self.size = sum(len(x) for x in lines)


class Session:
    """An agent process's handle on one conversation: ``record`` chains its messages,
    ``append`` stores raw entries, setters write metadata. It claims the lease by
    default, keeps each batch until it is known written (to resend it to a restarted
    daemon), and at ``close`` writes what no daemon took straight into the file."""

    def __init__(
        self,
        client: Client,
        session_id: str | None = None,
        cwd: str | None = None,
        *,
        agent: str | None = None,
        run: str | None = None,
        version: str = __version__,
        durability: m.Durability = "queued",
        reconnect_timeout: float = 10.0,
        lease: bool = True,
    ) -> None:
        self.client = client
        self.id = check_session_id(session_id) if session_id else str(uuidlib.uuid4())
        self.cwd = cwd or os.getcwd()
        self.agent = agent
        self.run = run
        self.version = version
        """The envelope's ``version`` for messages that lack one: the agent's own."""
        self.clock = Clock()
        self.durability = durability
        self.hint: str | None = None
        self.accepted = 0
        self.duplicates = 0
        self.pending = 0
        """Entries held before the session's first message (``Appended.pending``
        of the last answer): no file yet, and none if it closes without one."""
        self.reconnect_timeout = reconnect_timeout
        self._unsent: list[_Batch] = []  # not yet acknowledged at all
        self._unconfirmed: list[_Batch] = []  # acknowledged ``queued``, not known written
        self._unconfirmed_bytes = 0
        self._lost = False
        self.closed = False
        self.lease = lease
        """Every request claims (or keeps) the session's lease (SPEC 7): while
        another client holds it, chain entries raise ``SessionBusy``. False for
        tools that only add metadata or import files."""
        self.lease_lost: LeaseLost | None = None
        """Set once the session was taken over from this client: its chain
        entries are refused from then on, here before they are even sent."""
        client.handles[self.id] = client.handles.get(self.id, 0) + 1

    # ------------------------------------------------------------------- writing

    def encode(self, message: dict[str, Any]) -> bytes:
        return encode_entry(stamp(message, session_id=self.id, cwd=self.cwd, agent=self.agent, version=self.version, clock=self.clock))

    def claim(self, take_over: bool = False) -> LeaseHolder | None:
        """Hold the session now rather than from the first entry (an agent about
        to resume it): ``SessionBusy`` names the holder when another client has
        it. ``take_over`` moves the lease here on purpose: once this returns,
        everything the old holder had acknowledged is in the file, ready to be
        loaded, and the old holder's further chain entries are refused."""
        resp = self._deliver(lambda: self.client.call(
            m.Open(id=self.client.next_id(), session=self.id, cwd=self.cwd, lease=True, take_over=take_over)))
        self.lease_lost = None
        return resp.holder

    def record(self, messages: list[dict[str, Any]], durability: m.Durability | None = None) -> str | None:
        """Record the new tail of the conversation; returns the chain's last uuid."""
        if self.lease_lost is not None:
            raise LeaseLost(str(self.lease_lost), holder=self.lease_lost.holder)
        lines = [self.encode(msg) for msg in messages]
        resp = self._send(True, lines, durability)
        if resp is not None:
            self.hint = resp.last or self.hint
        return self.hint

    def append(self, entry: dict[str, Any] | bytes, durability: m.Durability | None = None) -> m.Appended | None:
        """Store one raw entry as it is (deduplicated and routed by the daemon)."""
        line = entry if isinstance(entry, bytes) else _json.encode(entry)
        return self._send(False, [line], durability)

    def set_metadata(self, kind: str, durability: m.Durability = "written", **fields: Any) -> None:
        self.append({"type": kind, **fields, "sessionId": self.id}, durability)

    def set_title(self, title: str) -> None:
        self.set_metadata("custom-title", customTitle=title)

    def set_tag(self, tag: str) -> None:
        self.set_metadata("tag", tag=tag)

    def set_last_prompt(self, prompt: str) -> None:
        self.set_metadata("last-prompt", lastPrompt=prompt, durability="queued")

    def set_agent_name(self, name: str) -> None:
        self.set_metadata("agent-name", agentName=name)

    def set_mode(self, mode: str) -> None:
        self.set_metadata("mode", mode=mode)

    def set_agent_meta(self, agent: str, meta: dict[str, Any]) -> None:
        self.client.call(
            m.SetAgentMeta(id=self.client.next_id(), session=self.id, cwd=self.cwd, agent=agent, meta=_json.encode(meta), run=self.run)
        )

    def flush(self, durable: bool = False) -> None:
        self._deliver(lambda: self.client.flush(self.id, durable=durable))
        self._unconfirmed.clear()

    # ------------------------------------------------------------------ delivery
    #
    # Every batch is kept until the daemon has acknowledged it as WRITTEN: a
    # ``queued`` ack only means a daemon holds it in memory, and a daemon can be
    # SIGKILLed. When the daemon goes away, the session reconnects (with backoff,
    # autostarting one if the client may) and resends every batch not known to be
    # written, in order, with ``resend=True``. Entries with a uuid are deduped by
    # the daemon; an entry WITHOUT a uuid is dropped on resend only if a
    # byte-identical line is already near the end of its file (the lost daemon
    # wrote it) — so nothing acknowledged is lost and nothing is written twice.
    # A ``written``/``durable`` ack or a flush confirms every earlier batch of the
    # session (its file is written in order).

    def _request(self, batch: _Batch, durability: m.Durability | None, resend: bool) -> m.Append | m.Record:
        rid = self.client.next_id()
        level = durability or batch.durability or self.durability
        if batch.is_record:
            return m.Record(id=rid, session=self.id, cwd=self.cwd, messages=batch.lines, parent=batch.parent,
                            durability=level, agent=self.agent, run=self.run, resend=resend, lease=self.lease)
        return m.Append(id=rid, session=self.id, cwd=self.cwd, entries=batch.lines, durability=level,
                        agent=self.agent, run=self.run, resend=resend, lease=self.lease)

    def _send(self, is_record: bool, lines: list[bytes], durability: m.Durability | None) -> m.Appended | None:
        """Queue ``lines`` as one request, or several when one frame cannot hold
        them all; an entry no frame can hold raises ``EntryTooLarge`` and
        nothing of the call is queued."""
        overhead = request_overhead(self._request(_Batch(is_record, [], durability), None, False))
        batches = [_Batch(is_record, part, durability) for part in split(lines, overhead, self.client.max_frame_bytes)]
        self._unsent += batches
        try:
            self._deliver(lambda: None)
        except DaemonUnavailable:
            return None  # kept in _unsent: resent by the next call, or written by close()
        if len(batches) == 1:
            return batches[0].response
        responses = [b.response for b in batches if b.response is not None]
        return m.Appended(id=responses[-1].id, accepted=sum(r.accepted for r in responses),
                          duplicates=sum(r.duplicates for r in responses), last=responses[-1].last)

    def _deliver(self, then: Callable[[], Any]) -> Any:
        """Send what is unsent (after a reconnect: resend what is unconfirmed
        first), then run ``then``; retry with backoff while the daemon is away."""
        deadline = time.monotonic() + self.reconnect_timeout
        delay = 0.05
        while True:
            try:
                if self._lost:
                    self.client.close()
                    self.client.connect()
                    self._unsent[:0] = self._unconfirmed
                    self._unconfirmed = []
                    resend = len(self._unsent)
                    self._lost = False
                else:
                    resend = 0
                while self._unsent:
                    batch = self._unsent[0]
                    if not batch.sent:
                        batch.parent, batch.sent = self.hint, True
                    try:
                        resp = self.client.call(self._request(batch, None, resend > 0))
                    except SessionBusy as exc:
                        self._refused(exc)
                        raise
                    resend -= 1
                    assert isinstance(resp, m.Appended)
                    self._count(resp)
                    batch.response = resp
                    if batch.is_record:
                        self.hint = resp.last or self.hint
                    self._unsent.pop(0)
                    if (batch.durability or self.durability) == "queued":
                        self._unconfirmed.append(batch)
                        self._unconfirmed_bytes += batch.size
                    else:
                        self._unconfirmed.clear()
                        self._unconfirmed_bytes = 0
                result = then()
                if self._unconfirmed_bytes > MAX_UNCONFIRMED_BYTES:
                    self.client.flush(self.id)
                    self._unconfirmed.clear()
                    self._unconfirmed_bytes = 0
                return result
            except UnsafeSocketDir:
                self._lost = True
                raise  # waiting does not make the directory ours
            except DaemonUnavailable:
                self._lost = True
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _refused(self, exc: SessionBusy) -> None:
        """The first unsent batch was refused for the lease: it is never to be
        written (not resent, not by the fallback). After a take-over, what was
        acknowledged before it is in the file already (the take-over wrote it)."""
        self._unsent.pop(0)
        if isinstance(exc, LeaseLost):
            self.lease_lost = exc
            self._unconfirmed.clear()
            self._unconfirmed_bytes = 0

    def _count(self, resp: m.Appended) -> None:
        self.accepted += resp.accepted
        self.duplicates += resp.duplicates
        self.pending = resp.pending

    # ------------------------------------------------------------------- closing

    def close(self, timeout: float = 5.0) -> FallbackResult | None:
        """Detach from the daemon (running exit cleanup if last), within about
        ``timeout`` seconds; if the daemon is gone, write what it may not have
        written directly into the files. Returns the fallback's result then.

        Another handle of the session still open on this client keeps it
        attached (its lease, its held entries): this one then only flushes the
        session, so what it sent is written all the same when this returns."""
        if self.closed:
            return None
        self.closed = True
        left = self.client.handles.get(self.id, 1) - 1
        if left > 0:
            self.client.handles[self.id] = left
        else:
            self.client.handles.pop(self.id, None)
        old = self.client.timeout, self.reconnect_timeout
        self.client.timeout = self.reconnect_timeout = timeout
        try:
            if left > 0:
                self._deliver(lambda: self.client.flush(self.id))
            else:
                self._deliver(lambda: self.client.call(m.Close(id=self.client.next_id(), session=self.id)))
            return None
        except DaemonUnavailable:
            return self._fallback()
        finally:
            self.client.timeout, self.reconnect_timeout = old

    def close_at_exit(self) -> None:
        atexit.register(self.close)

    def _fallback(self) -> FallbackResult:
        pending = self._unconfirmed + self._unsent
        count = sum(len(b.lines) for b in pending)
        try:
            alive = daemon_holds_lock(self.client.socket_path)
        except PermissionError as exc:
            # Not our directory or lock: no daemon of ours can run there, so
            # nobody else writes these files; say so loudly and write them here.
            log.error("sessiond: %s; no daemon can serve there: writing %d entries of session %s directly",
                      exc, count, self.id)
            alive = False
        if alive:
            log.error("sessiond is alive but did not answer within the timeout: %d entries of session %s NOT DELIVERED "
                      "(writing beside a stalled daemon could reorder its file)", count, self.id)
            return FallbackResult(undelivered=count)
        lines: list[bytes] = []
        parent = None
        cursor = None
        for batch in pending:
            if batch.is_record:
                start = batch.parent if batch.parent is not None else parent
                chained = chain_messages([(decode_header(b), b) for b in batch.lines], lambda _u: False, start, cursor)
                lines.extend(line for _, line in chained.lines)
                parent, cursor = chained.last, chained.cursor
            else:
                lines.extend(batch.lines)
        self._unsent.clear()
        self._unconfirmed.clear()
        root = self.client.root or default_root()
        try:
            return direct_append(root, self.cwd, self.id, lines, agent=self.agent, run=self.run, resend=True)
        except (OSError, SessiondError) as exc:  # a refused path (a FIFO, a symlink out of the root), a failing disk
            log.error("sessiond is unreachable and writing directly failed (%s): %d entries of session %s NOT DELIVERED",
                      exc, count, self.id)
            return FallbackResult(undelivered=count)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
