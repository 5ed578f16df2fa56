"""The async client (anyio): many tasks may call it at once and share one socket.

It drives the same sans-IO core as the blocking client (``core.py``): the
request ids and answers (``Channel``), what each session has not had
acknowledged as written (``Outbox``), what to resend after the daemon comes
back and how long to wait for it (``deliver``, ``Backoff``). So it gives what
``Client``/``Session`` give: a lost daemon is reconnected to (autostarting one
when allowed) and every entry not known written is resent, deduplicated by the
daemon; when no daemon can be reached within ``reconnect_timeout``, ``append``
and ``close_session`` write directly into the files (``fallback.py``).

A reader task owns the receiving side and wakes the task waiting for each
answer, so calls from different tasks pipeline. One session's appends go one at
a time (its entries keep their order, and an ack confirms what came before);
different sessions' go concurrently. Use it as an async context manager; a
missing daemon is not an error at entry (the first request reconnects, or
falls back).
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Generator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskGroup

from sessiond.store.reencode import encode_entry
from sessiond.wire import messages as m
from sessiond.wire.errors import DaemonUnavailable, ProtocolError, UnsafeSocketDir, WrongRoot

from .autostart import start_daemon
from .connection import Endpoint, check_socket_owner, raise_for
from .core import MAX_UNCONFIRMED_BYTES, Backoff, Call, Channel, Connect, Held, Outbox, Sleep, confirming, deliver
from .fallback import FallbackResult, write_outbox

T = TypeVar("T")

_LOST = (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError)


class AsyncClient(Endpoint):
    """The client for anyio/asyncio code: one socket shared by every task, each
    answer handed to the task waiting for its request id, so concurrent calls
    pipeline. On the same sans-IO core as ``Client`` (``core.py``): it starts the
    daemon when none runs, reconnects and resends what a lost daemon had not
    acknowledged, and writes directly when no daemon can be had."""

    def __init__(self, socket_path: Path | str | None = None, *, reconnect_timeout: float = 10.0, **kw: Any) -> None:
        kw.setdefault("name", "sessiond-py-async")
        super().__init__(socket_path, **kw)
        self.reconnect_timeout = reconnect_timeout
        """How long a request waits for a lost daemon to come back (reconnecting
        with backoff) before it gives up: then ``append`` writes directly."""
        self.channel = Channel()
        self._stream: SocketStream | None = None
        self._broken: DaemonUnavailable | None = None
        self._tg: TaskGroup | None = None
        self._waiting: dict[int, anyio.Event] = {}
        self._send_lock = anyio.Lock()
        self._connect_lock = anyio.Lock()
        self._outboxes: dict[str, Outbox] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._held = Held()
        self.max_unconfirmed = MAX_UNCONFIRMED_BYTES
        """Above this many bytes acknowledged only as ``queued`` over all its
        sessions, the client flushes the sessions holding the most until it is
        under again: what it keeps for resending stays bounded."""

    # ----------------------------------------------------------------- connection

    async def __aenter__(self) -> AsyncClient:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        try:
            await self._connect()
        except UnsafeSocketDir:
            await self._shut()
            raise  # waiting does not make the directory ours
        except DaemonUnavailable:
            pass  # requests reconnect, or write directly
        except BaseException:
            await self._shut()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Make what every session sent written (flushing it, or writing it
        directly when the daemon is gone), then disconnect."""
        try:
            with anyio.CancelScope(shield=True):
                gone = False
                for session in list(self._outboxes):
                    if not gone:
                        try:
                            await self.flush(session)
                            continue
                        except DaemonUnavailable:
                            gone = True  # the other sessions do not wait for it again
                    async with self._session(session) as outbox:
                        await self._fall_back(outbox)
        finally:
            await self._shut()

    async def _shut(self) -> None:
        if self._stream is not None:
            await self._stream.aclose()
            self._stream = None
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
            await self._tg.__aexit__(None, None, None)
            self._tg = None

    async def _connect(self) -> None:
        """Make sure there is a live connection: dial (autostarting a daemon if
        allowed), start its reader, do the handshake. Tasks that find the
        connection lost at once share one reconnect."""
        if self._stream is not None and self._broken is None:
            return
        async with self._connect_lock:
            if self._stream is not None and self._broken is None:
                return
            if self._stream is not None:
                await self._stream.aclose()
                self._stream = None
            stream = await self._dial_or_start()
            self._stream, self._broken = stream, None
            self.channel.opened()
            assert self._tg is not None, "use AsyncClient as an async context manager"
            self._tg.start_soon(self._reader, stream)
            welcome = await self._exchange(self.channel.hello(self.name, os.getpid()))
            try:
                self.welcomed(raise_for(welcome))  # type: ignore[arg-type]  # the answer to a Hello: Welcome
            except WrongRoot as exc:
                self._lose(stream, exc)
                raise

    async def _dial_or_start(self) -> SocketStream:
        try:
            return await self._dial()
        except (FileNotFoundError, ConnectionRefusedError):
            if not self.autostart:
                raise DaemonUnavailable(f"no daemon is running on {self.socket_path}") from None
            await anyio.to_thread.run_sync(start_daemon, self.socket_path, self.root)
            try:
                return await self._dial()
            except OSError as exc:
                raise DaemonUnavailable(f"cannot reach the daemon on {self.socket_path}: {exc}") from None
        except OSError as exc:
            raise DaemonUnavailable(f"cannot reach the daemon on {self.socket_path}: {exc}") from None

    async def _dial(self) -> SocketStream:
        check_socket_owner(self.socket_path)
        try:
            with anyio.fail_after(self.timeout):
                return await anyio.connect_unix(self.socket_path)
        except TimeoutError:
            raise DaemonUnavailable(f"the daemon on {self.socket_path} did not accept within {self.timeout:.0f}s") from None

    async def _reader(self, stream: SocketStream) -> None:
        try:
            while True:
                data = await stream.receive()
                for rid in self.channel.feed(data):
                    if rid == 0:  # a refusal of the connection answers everything
                        for waiter in self._waiting.values():
                            waiter.set()
                    elif (event := self._waiting.get(rid)) is not None:
                        event.set()
        except (*_LOST, ProtocolError) as exc:
            self._lose(stream, DaemonUnavailable(f"lost the daemon: {exc or 'connection closed'}"))

    def _lose(self, stream: SocketStream, why: DaemonUnavailable | WrongRoot) -> None:
        """``stream`` is dead: every task waiting on it is woken to find no answer.

        The socket is shut down at once (a daemon that stalled finds this
        client gone, and the reader its end); its descriptor is closed by the
        next connect or the client's exit, which own the stream. A task started
        here to close it could be left unrun by an exit under way (a coroutine
        never awaited). The first reason a stream was lost is the one kept."""
        if stream is not self._stream or self._broken is not None:
            return
        self._broken = why if isinstance(why, DaemonUnavailable) else DaemonUnavailable(str(why))
        try:
            stream.extra(SocketAttribute.raw_socket).shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already shut by the other end
        for event in self._waiting.values():
            event.set()

    async def _exchange(self, req: m.Request) -> m.Response:
        """Send ``req`` on the current connection and wait for its answer."""
        stream = self._stream
        if stream is None or self._broken is not None:
            raise self._lost()
        event = anyio.Event()
        self._waiting[req.id] = event
        try:
            async with self._send_lock:
                try:
                    await stream.send(self.channel.encode(req))
                except _LOST as exc:
                    self._lose(stream, DaemonUnavailable(f"lost the daemon while sending: {exc}"))
                    raise self._lost() from None
            try:
                with anyio.fail_after(self.timeout):
                    await event.wait()
            except TimeoutError:
                # As the blocking client: a daemon that does not answer is left,
                # and what was sent goes again (deduplicated) on a new connection.
                self._lose(stream, DaemonUnavailable(f"the daemon did not answer within {self.timeout:g}s"))
                raise DaemonUnavailable(f"the daemon did not answer within {self.timeout:g}s") from None
        finally:
            self._waiting.pop(req.id, None)
        resp = self.channel.answer(req.id) if stream is self._stream else None
        if resp is None:
            self.channel.forget(req.id)
            raise self._lost()
        return resp

    def _lost(self) -> DaemonUnavailable:
        """A fresh error for one more task that found the connection dead."""
        return DaemonUnavailable(str(self._broken) if self._broken is not None else "not connected to the daemon")

    async def _drive(self, steps: Generator[Connect | Call | Sleep, Any, T]) -> T:
        """Run one of the core's state machines (``core.deliver``) on this
        client's connection, as ``Client.drive`` does on a blocking socket."""
        answer: Any = None
        failed: Exception | None = None
        while True:
            try:
                op = steps.send(answer) if failed is None else steps.throw(failed)
            except StopIteration as done:
                return done.value
            answer = failed = None
            try:
                if isinstance(op, Call):
                    answer = await self.call(op.request)
                elif isinstance(op, Sleep):
                    await anyio.sleep(op.seconds)
                else:
                    await self._connect()
            except Exception as exc:  # noqa: BLE001 (thrown into the state machine, which re-raises what it does not handle)
                failed = exc

    # ------------------------------------------------------------------- requests

    def next_id(self) -> int:
        return self.channel.next_id()

    async def call(self, req: m.Request) -> m.Response:
        """Send one request and return its answer (an ``Error`` answer raises its
        typed exception). Reconnects first when the connection was lost; the
        request itself is not resent (``append`` is what resends)."""
        await self._connect()
        return raise_for(await self._exchange(req))

    @asynccontextmanager
    async def _session(self, session: str) -> AsyncIterator[Outbox]:
        """The session's outbox, held by one task at a time; forgotten once it
        holds nothing and nobody waits for it (what the client keeps is bounded
        by the sessions with entries not known written)."""
        lock = self._locks.setdefault(session, anyio.Lock())
        async with lock:
            outbox = self._outboxes.get(session)
            if outbox is None:
                outbox = self._outboxes[session] = Outbox(session, m, held=self._held)
            try:
                yield outbox
            finally:
                if outbox.empty and lock.statistics().tasks_waiting == 0:
                    self._outboxes.pop(session, None)
                    self._locks.pop(session, None)

    def _backoff(self) -> Backoff:
        return Backoff(self.reconnect_timeout)

    async def _fall_back(self, outbox: Outbox) -> FallbackResult:
        return await anyio.to_thread.run_sync(write_outbox, outbox, self.root, self.socket_path)

    async def append(self, session: str, cwd: str, entries: list[dict[str, Any] | bytes], *,
                     durability: m.Durability = "queued", agent: str | None = None, run: str | None = None,
                     resend: bool = False, lease: bool = False, **fields: Any) -> m.Appended:
        """Store raw entries: one request, or several in order when one frame
        cannot hold them (an entry no frame can hold: ``EntryTooLarge``).

        Kept until the daemon acknowledges them as written, and resent after a
        reconnect. When no daemon answers within ``reconnect_timeout`` they are
        written directly (with whatever the session still had unconfirmed);
        ``DaemonUnavailable`` only when a daemon holds the socket but does not
        answer (they stay queued here, sent before the session's next entries).
        ``fields``: any other field of ``Append``, sent as given; entries sent
        with one are never written by the fallback (it does not implement
        them): ``DaemonUnavailable`` instead."""
        # a lone surrogate (a string cut inside an emoji) is written as JSON.stringify writes it: its escape
        lines = [e if isinstance(e, bytes) else encode_entry(e) for e in entries]
        try:
            await self._connect()  # the daemon's frame cap sizes the batches
        except DaemonUnavailable:
            pass
        async with self._session(session) as outbox:
            batches = outbox.batches(False, lines, self.max_frame_bytes, cwd=cwd, durability=durability, agent=agent,
                                     run=run, lease=lease, resend=resend, fields=fields)
            outbox.add(batches)
            try:
                await self._drive(deliver(outbox, self.channel, self._backoff()))
            except DaemonUnavailable as exc:
                done = await self._fall_back(outbox)
                if done.undelivered:
                    raise DaemonUnavailable(f"{exc}; {done.undelivered} entries of session {session} not delivered") from None
                return m.Appended(id=0, accepted=done.written, duplicates=done.duplicates)
        merged = outbox.merge([b.response for b in batches if b.response is not None])
        assert merged is not None  # delivered: every batch was acknowledged
        await self._within_budget()
        return merged

    @property
    def unreachable(self) -> DaemonUnavailable | None:
        """Why this client has no connection to use now (none could be made, or
        the one made was lost: a handshake no daemon answered included), or
        None while it has one. Its next request tries to connect again."""
        if self._stream is not None and self._broken is None:
            return None
        return self._lost()

    @property
    def unconfirmed_bytes(self) -> int:
        """Bytes acknowledged only as ``queued``, kept for resending (all sessions)."""
        return self._held.bytes

    async def _within_budget(self) -> None:
        while self._held.bytes > self.max_unconfirmed:
            largest = max(self._outboxes.values(), key=lambda o: o.unconfirmed_bytes)
            if not largest.unconfirmed_bytes:
                return
            try:
                await self.flush(largest.session)
            except DaemonUnavailable:
                return  # kept: the next append (or the exit) tries again

    async def flush(self, session: str | None = None, durable: bool = False) -> m.Flushed:
        """Have the daemon write (``durable``: and fsync) one session, or all.
        What the session sent is delivered first (resent after a reconnect), and
        once this returns nothing of it is kept for resending."""
        if session is None:
            for sid in list(self._outboxes):
                await self.flush(sid, durable)
            return await self.call(m.Flush(id=self.next_id(), durable=durable))  # type: ignore[return-value]  # the answer to a Flush (an Error raises)
        async with self._session(session) as outbox:
            flushed = await self._drive(confirming(outbox, self.channel, self._backoff(),
                                                   lambda rid: m.Flush(id=rid, session=session, durable=durable)))
        assert isinstance(flushed, m.Flushed)  # the answer to a Flush (an Error raises)
        return flushed

    async def close_session(self, session: str) -> FallbackResult | None:
        """Detach the session (its exit cleanup runs), once everything sent to it
        is written. When the daemon is gone, what it may not have written is
        written directly: the fallback's result is returned then."""
        async with self._session(session) as outbox:
            try:
                await self._drive(confirming(outbox, self.channel, self._backoff(),
                                             lambda rid: m.Close(id=rid, session=session)))
                return None
            except DaemonUnavailable:
                return await self._fall_back(outbox)

    async def status(self) -> m.StatusResult:
        return await self.call(m.Status(id=self.next_id()))  # type: ignore[return-value]  # the answer to a Status (an Error raises)
