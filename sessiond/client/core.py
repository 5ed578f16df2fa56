"""The sans-IO core of both Python clients: every decision, no I/O.

``Client``/``Session`` (blocking sockets) and ``AsyncClient`` (anyio streams)
are thin drivers over this module, as httpx's ``Client`` and ``AsyncClient``
share one core and h11 is a protocol without a socket. Nothing here reads or
writes a socket, sleeps, or opens a file, so the whole delivery logic is
driven in-process by the tests with a fake clock (tests/client/test_core.py).

- ``Channel``: one client's wire state: request ids, the frame splitter, the
  answers waiting for their caller, and which connection is the current one
  (``generation``, bumped on every connect).
- ``Outbox``: one session's entries from the moment a caller hands them over
  until the daemon acknowledges them as WRITTEN. A ``queued`` ack only means a
  daemon holds them in memory, and a daemon can be SIGKILLed.
- ``deliver``: the state machine that sends an outbox: a generator that yields
  what the driver must do (``CONNECT``, ``Call``, ``Sleep``), is sent the
  answer (or has the driver's exception thrown in), and returns the answer to
  the request it was asked to end with.
- ``Backoff``: how long to wait before the next reconnect, and when to give up,
  on an injectable clock.

Resend rule (what makes a daemon restart lose nothing and double nothing): an
outbox remembers the connection it last delivered on; when the client is on
another one (it reconnected, for this session or any other), every batch not
known to be written is sent again, in order, with ``resend=True``, before
anything new. Entries with a uuid are deduped by the daemon; an entry without
one is dropped on resend only if a byte-identical line is already near the end
of its file (the lost daemon wrote it) and no line before it in the batch, for
that file, was new. A ``written``/``durable`` ack, a flush
or a close confirms every earlier batch of the session (its file is written in
order).
"""

from __future__ import annotations

import time

from sessiond.wire import core as wire
from sessiond.wire.errors import (
    BUSY,
    IO_ERROR,
    SHUTTING_DOWN,
    DaemonUnavailable,
    LeaseLost,
    RemoteError,
    UnsafeSocketDir,
)
from sessiond.wire.frames import PROTOCOL_VERSION, FrameBuffer
from sessiond.wire.framing import decode_response, encode

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the lite CLI path imports Channel)
if TYPE_CHECKING:
    from collections.abc import Callable, Generator
    from types import ModuleType
    from typing import Any

    from sessiond.wire import messages as m

MAX_UNCONFIRMED_BYTES = 16 * 1024 * 1024
"""Above this many bytes acknowledged only as ``queued``, an outbox asks for a
flush, which confirms them: what a session keeps for resending stays bounded."""

NOT_NOW = frozenset({SHUTTING_DOWN, BUSY})
"""Error codes that refuse a request for now only (the daemon is stopping, or
a bound is full and it closes the connection): retried as when the daemon is
away, on a new connection."""

FIRST_DELAY = 0.05
MAX_DELAY = 1.0


# --------------------------------------------------------------------- channel


class Channel:
    """What a client knows of its wire, apart from the socket itself."""

    __slots__ = ("generation", "_ids", "_frames", "_answers", "_refusal")

    def __init__(self) -> None:
        self.generation = 0
        """Which connection is the current one: 0 before the first, bumped by
        ``opened``. An outbox that last delivered on another one resends."""
        self._ids = 0
        self._frames = FrameBuffer()
        self._answers: dict[int, m.Response] = {}
        self._refusal: m.Response | None = None

    def next_id(self) -> int:
        """A fresh request id (never reused across connections: a late answer
        of a lost connection cannot be taken for a new request's)."""
        self._ids += 1
        return self._ids

    def opened(self) -> None:
        """A new connection is up: a fresh stream, nothing of the old one kept."""
        self.generation += 1
        self._frames = FrameBuffer()
        self._answers.clear()
        self._refusal = None

    def hello(self, name: str, pid: int) -> m.Hello:
        return wire.Hello(id=0, protocol_version=PROTOCOL_VERSION, client=name, pid=pid)

    def encode(self, req: m.Request) -> bytes:
        return encode(req)

    def decode(self, data: bytes | memoryview) -> list[m.Response]:
        """The answers completed by ``data`` (``ProtocolError`` for a bad stream)."""
        return [decode_response(body) for body in self._frames.feed(data)]

    def feed(self, data: bytes) -> list[int]:
        """File the answers in ``data`` for their callers; the ids answered
        (0: the daemon refused the connection, which answers every request)."""
        ids = []
        for resp in self.decode(data):
            self.file(resp)
            ids.append(resp.id)
        return ids

    def file(self, resp: m.Response) -> None:
        if resp.id == 0 and isinstance(resp, wire.Error):
            self._refusal = resp
        else:
            self._answers[resp.id] = resp

    def answer(self, rid: int) -> m.Response | None:
        """The answer to request ``rid`` once it came (taken), else None."""
        resp = self._answers.pop(rid, None)
        return resp if resp is not None else self._refusal

    def forget(self, rid: int) -> None:
        """A caller gave up on ``rid``: its late answer is not kept."""
        self._answers.pop(rid, None)


# --------------------------------------------------------------------- backoff


class Backoff:
    """Waits between reconnect attempts: doubling from ``first`` up to ``cap``,
    and none that would end past ``budget`` seconds from now (then: give up).
    ``clock`` is injectable so a test need not wait out a real budget."""

    __slots__ = ("clock", "deadline", "delay", "cap")

    def __init__(self, budget: float, clock: Callable[[], float] = time.monotonic, first: float = FIRST_DELAY,
                 cap: float = MAX_DELAY) -> None:
        self.clock = clock
        self.deadline = clock() + budget
        self.delay = first
        self.cap = cap

    def next(self) -> float | None:
        """The wait before the next attempt; None when the budget is spent."""
        if self.clock() + self.delay > self.deadline:
            return None
        delay = self.delay
        self.delay = min(delay * 2, self.cap)
        return delay


# ---------------------------------------------------------------------- outbox


class Batch:
    """One request's entries, kept until known written."""

    __slots__ = ("is_record", "lines", "cwd", "durability", "agent", "run", "lease", "resend", "fields", "parent", "sent",
                 "response", "size")

    def __init__(self, is_record: bool, lines: list[bytes], cwd: str, durability: m.Durability, agent: str | None,
                 run: str | None, lease: bool, resend: bool = False, fields: dict[str, Any] | None = None) -> None:
        self.is_record = is_record
        self.lines = lines
        self.cwd = cwd
        self.durability = durability
        self.agent = agent
        self.run = run
        self.lease = lease
        self.resend = resend
        self.fields = fields or {}
        """More fields of the request, as the caller gave them (fields a newer
        protocol adds): sent as they are; the direct write does not implement
        them, so a batch with any is never written by the fallback."""
        """The caller asked for ``resend`` itself (its own retry): every send is one."""
        self.parent: str | None = None
        """Record: the hint it was first sent with (a resend chains the same way)."""
        self.sent = False
        self.response: m.Appended | None = None
        self.size = sum(len(x) for x in lines)


class Held:
    """Bytes acknowledged only as ``queued`` across all the sessions of one
    client: what it keeps for resending, bounded as a whole (many sessions each
    under their own bound could still add up without end)."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        self.bytes = 0


class Outbox:
    """One session's undelivered and unconfirmed batches, and what the daemon
    told it back (counts, the record hint, a lost lease)."""

    def __init__(self, session: str, messages: ModuleType, max_unconfirmed: int = MAX_UNCONFIRMED_BYTES,
                 held: Held | None = None) -> None:
        self.session = session
        self.messages = messages
        self.max_unconfirmed = max_unconfirmed
        self.held = held or Held()
        """The client's total, kept up to date by this outbox."""
        self.unsent: list[Batch] = []
        """Not yet acknowledged at all (the head may have been sent)."""
        self.unconfirmed: list[Batch] = []
        """Acknowledged ``queued``, not known written."""
        self._unconfirmed_bytes = 0
        self.generation: int | None = None
        """The connection it last delivered on."""
        self.resends = 0
        """How many batches at the head of ``unsent`` go out as resends."""
        self.hint: str | None = None
        self.accepted = 0
        self.duplicates = 0
        self.pending = 0
        self.lease_lost: LeaseLost | None = None

    def batches(self, is_record: bool, lines: list[bytes], cap: int, *, cwd: str, durability: m.Durability,
                agent: str | None = None, run: str | None = None, lease: bool = False, resend: bool = False,
                fields: dict[str, Any] | None = None) -> list[Batch]:
        """``lines`` as batches whose requests fit under ``cap`` (``EntryTooLarge``,
        and nothing made, when one entry cannot fit in any frame)."""
        from .batching import request_overhead, split  # not on the blocking CLI's path, which imports Channel

        empty = Batch(is_record, [], cwd, durability, agent, run, lease, resend)
        overhead = request_overhead(self._request(empty, 0, False))
        if fields:
            import msgspec

            overhead += len(msgspec.msgpack.encode(fields))  # keys and values as the request carries them
        return [Batch(is_record, part, cwd, durability, agent, run, lease, resend, fields)
                for part in split(lines, overhead, cap)]

    def add(self, batches: list[Batch]) -> None:
        if self.lease_lost is not None and any(b.is_record for b in batches):
            raise LeaseLost(str(self.lease_lost), holder=self.lease_lost.holder)
        self.unsent += batches

    @property
    def unconfirmed_bytes(self) -> int:
        return self._unconfirmed_bytes

    @unconfirmed_bytes.setter
    def unconfirmed_bytes(self, value: int) -> None:
        self.held.bytes += value - self._unconfirmed_bytes
        self._unconfirmed_bytes = value

    @property
    def empty(self) -> bool:
        return not self.unsent and not self.unconfirmed

    def _request(self, batch: Batch, rid: int, resend: bool) -> m.Append | m.Record:
        msgs = self.messages
        resend = resend or batch.resend
        if batch.is_record:
            return msgs.Record(id=rid, session=self.session, cwd=batch.cwd, messages=batch.lines, parent=batch.parent,
                               durability=batch.durability, agent=batch.agent, run=batch.run, resend=resend,
                               lease=batch.lease, **batch.fields)
        return msgs.Append(id=rid, session=self.session, cwd=batch.cwd, entries=batch.lines, durability=batch.durability,
                           agent=batch.agent, run=batch.run, resend=resend, lease=batch.lease, **batch.fields)

    def on(self, generation: int) -> None:
        """About to send on connection ``generation``: if it is not the one this
        outbox last delivered on, what is unconfirmed goes first, and all that
        is unsent goes as resends (the lost daemon may have written any of it)."""
        if self.generation == generation:
            return
        if self.generation is not None:
            self.unsent[:0] = self.unconfirmed
            self.resends = len(self.unsent)
        self.confirm_all()
        self.generation = generation

    def next_request(self, rid: int) -> m.Append | m.Record:
        """The request for the head batch (there is one: ``unsent``)."""
        batch = self.unsent[0]
        if not batch.sent:
            batch.parent, batch.sent = self.hint, True
        return self._request(batch, rid, self.resends > 0)

    def acknowledged(self, resp: m.Appended) -> None:
        batch = self.unsent.pop(0)
        self.resends = max(0, self.resends - 1)
        self.accepted += resp.accepted
        self.duplicates += resp.duplicates
        self.pending = resp.pending
        batch.response = resp
        if batch.is_record:
            self.hint = resp.last or self.hint
        if batch.durability == "queued":
            self.unconfirmed.append(batch)
            self.unconfirmed_bytes += batch.size
        else:
            self.confirm_all()

    def refused(self, exc: RemoteError) -> None:
        """The daemon answered the head batch with an error (raised to the
        caller). ``io_error``: it holds the entries queued and retries the write
        itself, so the batch is kept as if acknowledged ``queued`` (resent only
        if that daemon is lost). Any other refusal (a lease held by another
        client, a bad request): the batch is never to be written, not resent,
        not by the fallback. After a take-over (``LeaseLost``), what was
        acknowledged before it is in the file already (the take-over wrote it)."""
        batch = self.unsent.pop(0)
        self.resends = max(0, self.resends - 1)
        if exc.code == IO_ERROR:
            self.unconfirmed.append(batch)
            self.unconfirmed_bytes += batch.size
        elif isinstance(exc, LeaseLost):
            self.lease_lost = exc
            self.confirm_all()

    def confirm_all(self) -> None:
        """A written ack, a flush or a close of the session was answered: every
        batch acknowledged before it (one session's requests go one at a time)
        is in its file."""
        self.unconfirmed = []
        self.unconfirmed_bytes = 0

    @property
    def over_budget(self) -> bool:
        return self.unconfirmed_bytes > self.max_unconfirmed

    def merge(self, results: list[m.Appended]) -> m.Appended | None:
        """One answer for a caller's batches (None when none was acknowledged)."""
        if not results:
            return None
        if len(results) == 1:
            return results[0]
        return self.messages.Appended(id=results[-1].id, accepted=sum(r.accepted for r in results),
                                      duplicates=sum(r.duplicates for r in results), last=results[-1].last,
                                      pending=results[-1].pending)

    def take_for_fallback(self) -> list[tuple[str, str | None, str | None, list[bytes]]]:
        """Everything not known written, emptied out of the outbox, as runs of
        ``(cwd, agent, run, lines)`` to write directly: record batches chained as
        the daemon would have (from the hint each was first sent with)."""
        from sessiond.store.entries import decode_header
        from sessiond.store.recording import chain_messages

        pending = self.unconfirmed + self.unsent
        self.unsent, self.resends = [], 0
        self.confirm_all()
        runs: list[tuple[str, str | None, str | None, list[bytes]]] = []
        parent = cursor = None
        for batch in pending:
            if batch.is_record:
                start = batch.parent if batch.parent is not None else parent
                chained = chain_messages([(decode_header(b), b) for b in batch.lines], lambda _u: False, start, cursor)
                lines = [line for _, line in chained.lines]
                parent, cursor = chained.last, chained.cursor
            else:
                lines = batch.lines
            key = (batch.cwd, batch.agent, batch.run)
            if runs and runs[-1][:3] == key:
                runs[-1][3].extend(lines)
            else:
                runs.append((*key, list(lines)))
        return runs


# -------------------------------------------------------------------- delivery


class Connect:
    """Op: make sure the client is connected (dial, autostarting a daemon if it
    may, and the handshake, which calls ``Channel.opened``)."""

    __slots__ = ()


CONNECT = Connect()


class Call:
    """Op: send ``request`` and answer with the daemon's answer (an ``Error``
    answer, or a lost connection, is thrown in as its typed exception)."""

    __slots__ = ("request",)

    def __init__(self, request: m.Request) -> None:
        self.request = request


class Sleep:
    """Op: wait ``seconds`` (the daemon is away)."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


def deliver(outbox: Outbox, channel: Channel, backoff: Backoff,
            then: Callable[[int], m.Request] | None = None,
            ) -> Generator[Connect | Call | Sleep, Any, m.Response | None]:
    """Send what ``outbox`` holds (after a reconnect: resend what is not known
    written, first), then the request ``then`` makes from a fresh id; retry
    with ``backoff`` while the daemon is away. Returns the answer to ``then``
    (each batch's ack is its ``response``).

    An error answer to a batch is raised after ``Outbox.refused`` (except
    ``NOT_NOW``: waited out like a lost daemon); ``UnsafeSocketDir`` is raised
    at once (waiting does not make the directory ours); ``DaemonUnavailable``
    once ``backoff`` gives up, with everything kept in the outbox."""
    msgs = outbox.messages
    while True:
        try:
            yield CONNECT
            outbox.on(channel.generation)
            while outbox.unsent:
                req = outbox.next_request(channel.next_id())
                try:
                    resp = yield Call(req)
                except RemoteError as exc:
                    if exc.code not in NOT_NOW:
                        outbox.refused(exc)
                    raise
                outbox.acknowledged(resp)
            result = None
            if then is not None:
                result = yield Call(then(channel.next_id()))
            if outbox.over_budget:
                yield Call(msgs.Flush(id=channel.next_id(), session=outbox.session))
                outbox.confirm_all()
            return result
        except UnsafeSocketDir:
            raise
        except (DaemonUnavailable, RemoteError) as exc:
            if isinstance(exc, RemoteError) and exc.code not in NOT_NOW:
                raise
            delay = backoff.next()
            if delay is None:
                raise
            yield Sleep(delay)


def confirming(outbox: Outbox, channel: Channel, backoff: Backoff, request: Callable[[int], m.Request],
               ) -> Generator[Connect | Call | Sleep, Any, m.Response | None]:
    """``deliver`` ending with a flush or close of the session: once answered,
    everything the outbox holds is written."""
    result = yield from deliver(outbox, channel, backoff, request)
    outbox.confirm_all()
    return result
