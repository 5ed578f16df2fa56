"""Watching a session live: the client side of ``Subscribe`` (sessiond/daemon/watchers.py).

``subscribe`` sends the request and yields what the daemon pushes for it
(``Entries``, then one ``Unsubscribed`` when the stream ends) on the blocking
client's socket. The socket waits without a timeout while watching: a quiet
session sends nothing for as long as it stays quiet, and a daemon that goes
away closes the socket, which ends the stream with ``DaemonUnavailable``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from sessiond.wire import messages as m
from sessiond.wire.errors import DaemonUnavailable

from .connection import Client, raise_for


def subscribe(client: Client, req: m.Subscribe) -> Iterator[m.Subscribed | m.Entries | m.Unsubscribed]:
    """``Subscribed`` first (or the error raised), then the pushed frames."""
    client.send(req)
    ready: deque[m.Response] = deque()
    with client.untimed():
        while True:
            while ready:
                resp = ready.popleft()
                raise_for(resp)
                yield resp  # type: ignore[misc]  # the answers to a Subscribe
                if isinstance(resp, m.Unsubscribed):
                    return
            for resp in client.read_answers():
                if resp.id == req.id or (resp.id == 0 and isinstance(resp, m.Error)):
                    ready.append(resp)
                else:
                    client.channel.file(resp)


__all__ = ["DaemonUnavailable", "subscribe"]
