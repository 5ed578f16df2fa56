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
import uuid as uuidlib
from typing import Any

import msgspec

from sessiond.protocol import __version__
from sessiond.protocol.locations import daemon_holds_lock, default_root
from sessiond.protocol.transcript.entries import decode_header
from sessiond.protocol.transcript.recording import chain_messages
from sessiond.protocol.wire import messages as m
from sessiond.protocol.wire.errors import DaemonUnavailable

from .connection import Client
from .envelope import stamp
from .fallback import FallbackResult, direct_append

_json = msgspec.json.Encoder()
log = logging.getLogger("sessiond.client")


class Session:
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
    ) -> None:
        self.client = client
        self.id = session_id or str(uuidlib.uuid4())
        self.cwd = cwd or os.getcwd()
        self.agent = agent
        self.run = run
        self.version = version
        self.durability = durability
        self.hint: str | None = None
        self.accepted = 0
        self.duplicates = 0
        self._unsent: list[tuple[bool, list[bytes]]] = []  # (is_record, lines)
        self.closed = False

    # ------------------------------------------------------------------- writing

    def encode(self, message: dict[str, Any]) -> bytes:
        return _json.encode(stamp(message, session_id=self.id, cwd=self.cwd, agent=self.agent, version=self.version))

    def record(self, messages: list[dict[str, Any]], durability: m.Durability | None = None) -> str | None:
        """Record the new tail of the conversation; returns the chain's last uuid."""
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
        self._resend()
        self.client.flush(self.id, durable=durable)

    def _request(self, is_record: bool, lines: list[bytes], durability: m.Durability | None) -> m.Request:
        rid = self.client.next_id()
        level = durability or self.durability
        if is_record:
            return m.Record(id=rid, session=self.id, cwd=self.cwd, messages=lines, parent=self.hint,
                            durability=level, agent=self.agent, run=self.run)
        return m.Append(id=rid, session=self.id, cwd=self.cwd, entries=lines, durability=level,
                        agent=self.agent, run=self.run)

    def _send(self, is_record: bool, lines: list[bytes], durability: m.Durability | None) -> m.Appended | None:
        try:
            self._resend()
            resp = self.client.call(self._request(is_record, lines, durability))
        except DaemonUnavailable:
            self._unsent.append((is_record, lines))
            return None
        assert isinstance(resp, m.Appended)
        self._count(resp)
        return resp

    def _count(self, resp: m.Appended) -> None:
        self.accepted += resp.accepted
        self.duplicates += resp.duplicates

    def _resend(self) -> None:
        while self._unsent:
            is_record, lines = self._unsent[0]
            resp = self.client.call(self._request(is_record, lines, None))
            assert isinstance(resp, m.Appended)
            self._count(resp)
            if is_record:
                self.hint = resp.last or self.hint
            self._unsent.pop(0)

    # ------------------------------------------------------------------- closing

    def close(self, timeout: float = 5.0) -> FallbackResult | None:
        """Detach from the daemon (running exit cleanup if last); if the daemon is
        unreachable, write undelivered entries directly. Returns the fallback's
        result when it was used."""
        if self.closed:
            return None
        self.closed = True
        old = self.client.timeout
        self.client.timeout = timeout
        try:
            self._resend()
            self.client.call(m.Close(id=self.client.next_id(), session=self.id))
            return None
        except DaemonUnavailable:
            return self._fallback()
        finally:
            self.client.timeout = old

    def close_at_exit(self) -> None:
        atexit.register(self.close)

    def _fallback(self) -> FallbackResult:
        if daemon_holds_lock(self.client.socket_path):
            count = sum(len(lines) for _, lines in self._unsent)
            log.warning("sessiond is alive but did not answer; %d entries of session %s not delivered", count, self.id)
            return FallbackResult(undelivered=count)
        lines: list[bytes] = []
        parent = self.hint
        for is_record, batch in self._unsent:
            if is_record:
                chained = chain_messages([(decode_header(b), b) for b in batch], lambda _u: False, parent)
                lines.extend(line for _, line in chained.lines)
                parent = chained.last
            else:
                lines.extend(batch)
        self._unsent.clear()
        root = self.client.root or default_root()
        return direct_append(root, self.cwd, self.id, lines, agent=self.agent, run=self.run)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
