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
import os
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

import msgspec

from sessiond import __version__
from sessiond.store.paths import check_session_id
from sessiond.store.reencode import encode_entry
from sessiond.wire import messages as m
from sessiond.wire.errors import DaemonUnavailable, LeaseLost
from sessiond.wire.lease import LeaseHolder

from .connection import Client
from .core import Backoff, Outbox, confirming, deliver
from .envelope import Clock, stamp
from .fallback import FallbackResult, write_outbox

_json = msgspec.json.Encoder()

__all__ = ["Session"]


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
        self.reconnect_timeout = reconnect_timeout
        self.outbox = Outbox(self.id, m)
        """What was sent and is not known written, and what the daemon said
        back (the sans-IO core, ``core.py``; this class drives it)."""
        self.closed = False
        self.lease = lease
        """Every request claims (or keeps) the session's lease (SPEC 7): while
        another client holds it, chain entries raise ``SessionBusy``. False for
        tools that only add metadata or import files."""
        client.handles[self.id] = client.handles.get(self.id, 0) + 1

    @property
    def hint(self) -> str | None:
        """The chain's last uuid: what the next record hangs off."""
        return self.outbox.hint

    @hint.setter
    def hint(self, value: str | None) -> None:
        self.outbox.hint = value

    @property
    def accepted(self) -> int:
        return self.outbox.accepted

    @property
    def duplicates(self) -> int:
        return self.outbox.duplicates

    @property
    def pending(self) -> int:
        """Entries held before the session's first message (``Appended.pending``
        of the last answer): no file yet, and none if it closes without one."""
        return self.outbox.pending

    @property
    def lease_lost(self) -> LeaseLost | None:
        """Set once the session was taken over from this client: its chain
        entries are refused from then on, here before they are even sent."""
        return self.outbox.lease_lost

    # ------------------------------------------------------------------- writing

    def encode(self, message: dict[str, Any]) -> bytes:
        return encode_entry(stamp(message, session_id=self.id, cwd=self.cwd, agent=self.agent, version=self.version, clock=self.clock))

    def claim(self, take_over: bool = False) -> LeaseHolder | None:
        """Hold the session now rather than from the first entry (an agent about
        to resume it): ``SessionBusy`` names the holder when another client has
        it. ``take_over`` moves the lease here on purpose: once this returns,
        everything the old holder had acknowledged is in the file, ready to be
        loaded, and the old holder's further chain entries are refused."""
        resp = self._deliver(lambda rid: m.Open(id=rid, session=self.id, cwd=self.cwd, lease=True, take_over=take_over))
        self.outbox.lease_lost = None
        return resp.holder  # type: ignore[union-attr]  # the answer to an Open: Opened

    def record(self, messages: list[dict[str, Any]], durability: m.Durability | None = None) -> str | None:
        """Record the new tail of the conversation; returns the chain's last uuid."""
        if self.lease_lost is not None:
            raise LeaseLost(str(self.lease_lost), holder=self.lease_lost.holder)
        self._send(True, [self.encode(msg) for msg in messages], durability)
        return self.hint

    def append(self, entry: dict[str, Any] | bytes, durability: m.Durability | None = None) -> m.Appended | None:
        """Store one raw entry as it is (deduplicated and routed by the daemon)."""
        line = entry if isinstance(entry, bytes) else encode_entry(entry)  # a lone surrogate as its escape
        return self._send(False, [line], durability)

    def set_metadata(self, kind: str, durability: m.Durability = "written", **fields: Any) -> None:
        """Append a ``kind`` metadata entry; one a person names (a title, a
        tag) is refused (``too_large``) past what a listing shows (``lite.METADATA_MAX``)."""
        line = _json.encode({"type": kind, **fields, "sessionId": self.id})
        if kind in ("custom-title", "tag"):
            from sessiond.store.lite import check_metadata  # (the listing's module: not every client loads it)

            check_metadata(kind, line)
        self.append(line, durability)

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
        self.client.drive(confirming(self.outbox, self.client.channel, Backoff(self.reconnect_timeout),
                                     lambda rid: m.Flush(id=rid, session=self.id, durable=durable)))

    # ------------------------------------------------------------------ delivery
    #
    # What to send, resend after a reconnect, and when to give up is the core's
    # (``core.deliver``); this class only runs it on the blocking client.

    def _send(self, is_record: bool, lines: list[bytes], durability: m.Durability | None) -> m.Appended | None:
        """Queue ``lines`` as one request, or several when one frame cannot hold
        them all; an entry no frame can hold raises ``EntryTooLarge`` and
        nothing of the call is queued. None when the daemon stays away: kept,
        resent by the next call, or written by ``close()``."""
        batches = self.outbox.batches(is_record, lines, self.client.max_frame_bytes, cwd=self.cwd,
                                      durability=durability or self.durability, agent=self.agent, run=self.run,
                                      lease=self.lease)
        self.outbox.add(batches)
        try:
            self._deliver()
        except DaemonUnavailable:
            return None
        return self.outbox.merge([b.response for b in batches if b.response is not None])

    def _deliver(self, then: Callable[[int], m.Request] | None = None) -> m.Response | None:
        return self.client.drive(deliver(self.outbox, self.client.channel, Backoff(self.reconnect_timeout), then))

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
                self.flush()
            else:
                self.client.drive(confirming(self.outbox, self.client.channel, Backoff(timeout),
                                             lambda rid: m.Close(id=rid, session=self.id)))
            return None
        except DaemonUnavailable:
            return write_outbox(self.outbox, self.client.root, self.client.socket_path)
        finally:
            self.client.timeout, self.reconnect_timeout = old

    def close_at_exit(self) -> None:
        atexit.register(self.close)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
