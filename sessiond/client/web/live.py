"""A conversation's changes as server-sent events, fed by the daemon's Subscribe.

Why its own module: a live page holds a stream open for as long as it is
open, so what each one may make the server hold is decided here: one socket
to the daemon and at most one frame read from it (the next is read only once
the event for the last was sent, so a slow browser slows its own stream and
nothing piles up), ``MAX_STREAMS`` streams at once (the next is refused with
503), a comment every ``KEEPALIVE`` seconds (a closed tab is noticed when
writing to it fails). An event says only *that* the conversation changed
(``changed``) or went away (``gone``); the page fetches the rendered body
again, so what it shows is always the renderer's whole conversation.

With no daemon serving the root (none runs, or it serves another one), the
file is watched instead: its size and identity looked at every ``POLL``
seconds.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from pathlib import Path

import anyio

from sessiond.client.connection import Endpoint, check_socket_owner, raise_for
from sessiond.client.core import Channel
from sessiond.wire import messages as m
from sessiond.wire.errors import DaemonUnavailable, RemoteError, SessiondError, WrongRoot

MAX_STREAMS = 32
"""Live streams the server holds at once (each: one daemon connection)."""

KEEPALIVE = 15.0
"""Seconds between two comments on a quiet stream."""

POLL = 0.25
"""Seconds between two looks at a file when no daemon streams it."""

CONNECT_TIMEOUT = 10.0


class Streams:
    """The count of open streams, refused past ``limit`` (one event loop
    counts them: no lock)."""

    def __init__(self, limit: int = MAX_STREAMS) -> None:
        self.limit = limit
        self.open = 0

    @property
    def full(self) -> bool:
        return self.open >= self.limit

    def take(self) -> bool:
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def give_back(self) -> None:
        self.open -= 1


def event(name: str, data: str = "") -> bytes:
    """One server-sent event (``data`` one line: ours, never a transcript's)."""
    return f"event: {name}\ndata: {' '.join(data.split())}\n\n".encode()


async def _daemon_frames(socket_path: Path, root: Path | None, session: str, path: Path,
                         offset: int) -> AsyncGenerator[m.Response | None, None]:
    """The daemon's answers to one Subscribe of ``path`` from ``offset``:
    ``Subscribed``, then ``Entries`` until ``Unsubscribed``; None after each
    ``KEEPALIVE`` seconds without one.
    ``DaemonUnavailable`` when none answers, ``WrongRoot`` for another root's."""
    endpoint = Endpoint(socket_path, root=root, autostart=False, name="sessiond-web")
    try:
        check_socket_owner(socket_path)
        with anyio.fail_after(CONNECT_TIMEOUT):
            stream = await anyio.connect_unix(socket_path)
    except (OSError, TimeoutError) as exc:
        raise DaemonUnavailable(f"no daemon on {socket_path}: {exc}") from None
    async with stream:
        channel = Channel()
        channel.opened()

        async def frames() -> AsyncGenerator[m.Response | None, None]:
            while True:
                data = None
                with anyio.move_on_after(KEEPALIVE):
                    try:
                        data = await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                        raise DaemonUnavailable("lost the daemon") from None
                if data is None:
                    yield None
                    continue
                for resp in channel.decode(data):
                    yield raise_for(resp)

        async with aclosing(frames()) as answers:
            await stream.send(channel.encode(channel.hello(endpoint.name, os.getpid())))
            welcome = await anext(answers)
            if welcome is None:
                raise DaemonUnavailable("the daemon did not answer")
            endpoint.welcomed(welcome)  # type: ignore[arg-type]  # the answer to a Hello: Welcome (an Error raised)
            req = m.Subscribe(id=channel.next_id(), session=session, path=str(path), offset=offset)
            await stream.send(channel.encode(req))
            async for resp in answers:
                if resp is None or resp.id == req.id:
                    yield resp


async def changes(socket_path: Path, root: Path | None, session: str, path: Path, offset: int) -> AsyncIterator[bytes]:
    """The event stream of one open conversation (see the module doc)."""
    yield b"retry: 2000\n\n"
    try:
        async with aclosing(_daemon_frames(socket_path, root, session, path, offset)) as frames:
            async for frame in frames:
                if frame is None:
                    yield b": keepalive\n\n"
                elif isinstance(frame, m.Subscribed):
                    yield event("ready", "daemon")
                elif isinstance(frame, m.Unsubscribed):
                    yield event("gone", frame.reason)
                    return
                elif isinstance(frame, m.Entries) and (frame.lines or frame.reset):
                    yield event("changed", str(len(frame.lines)))
    except (DaemonUnavailable, WrongRoot, RemoteError, SessiondError):
        pass  # no daemon streams it (or it went away): the file is watched
    yield event("ready", "file")
    async for chunk in _poll(path, offset):
        yield chunk


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size)


async def _poll(path: Path, offset: int) -> AsyncIterator[bytes]:
    """``changed`` whenever the file grows, shrinks or is replaced."""
    seen = _identity(path)
    if seen is not None and seen[2] != offset:
        yield event("changed", "file")
    quiet = 0.0
    while True:
        await anyio.sleep(POLL)
        now = _identity(path)
        if now != seen:
            seen = now
            quiet = 0.0
            yield event("changed", "file") if now is not None else event("gone", "the file went away")
        else:
            quiet += POLL
            if quiet >= KEEPALIVE:
                quiet = 0.0
                yield b": keepalive\n\n"
