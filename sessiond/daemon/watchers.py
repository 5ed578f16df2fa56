"""Subscriptions: a session's entries streamed to watchers as they are written.

A ``Subscribe`` gets ``Subscribed``, then ``Entries`` frames (its own request id)
with the lines of the main transcript, and of the session's agent files when
asked, in file order, each byte once, until ``Unsubscribe``, the connection's
end, or its main file going away (``Unsubscribed``).

Live lines come from the write observers (``Writer.observers``: every write of
the daemon, and what the follower of foreign writers reports through
``Writer.publish``): nothing is read back from disk for them. Where a watcher
starts in the past (a byte offset, the last N entries), or the lines it is told
about do not start where it stands (a gap: a write it was not told about), the
missing bytes are read from the file in the read pool (the watcher's
connection's fair share of it, ``workers.py``), ``READ_CHUNK`` at a time,
while live lines wait for the reads to catch up.

A watcher never grows the daemon's memory past its connection's output budget
(``max_output_bytes``, the one every answer of that connection counts against,
``bounds.py``): a frame that does not fit beside what the connection has not
read yet is not made; the cursor stays where the watcher stands and, once the
client reads again, the rest is read from the file, ``read_chunk`` at a time
(a quarter of the budget, at most ``READ_CHUNK``; at once when the client
drained its socket, ``drained``). A slow watcher is fed at its own pace and
loses nothing; a stalled one costs the daemon its cursor, and no buffer of
lines beside it.

The one thing a watcher does not get is a line no frame can carry: longer
than the shared line cap (``linecap.MAX_LINE``) or than this daemon's frame
cap. It is passed over (the catch-up read looks for its end holding one scan
chunk of it, ``linecap.read_span``), the next frame says how many bytes were
(``Entries.skipped``), and the lines after it come as ever. A line longer than
one read but under the cap is read once, whole, and sent alone.

A subscription with agents finds the agent files that exist already in the
read pool (``agents.agent_files``: the layout only, no symlink followed, a
bounded number of entries), after ``Subscribed`` went out; until it has, an
agent file written to is watched from that write on, and a file it finds is
watched from what the follower has reported of it (so a file made just after
``Subscribed`` is seen whole).

A write seen by many watchers costs its lines' encoding once: the lines of an
``Entries`` frame are encoded apart from its head (``EntriesFrame``), once per
write for every watcher that stands where the write starts, and those same
bytes are queued to each watcher's connection (``Connection.push``) behind a
head of its own (its subscription id, the file's name); the frame a watcher
reads is byte for byte ``encode(Entries(...))``. Each connection still counts
the whole frame against its own output budget.

A write's frame goes out in the pass of the write when no frame went to a
watcher within ``watch_coalesce`` (a lone write waits for nothing); a write
within that of the last frame is held, and with it the writes after it to the
same file, and they go out as one frame when the timer fires, or with the
first write after it if the loop was too busy to run it, at most
``watch_coalesce`` after the last frame (``_hold``). At a high write rate each
watcher then gets one frame, one socket write and one wake-up, for many
writes. A subscription holds the lines of one file at a time (a write to
another of its files sends what it held first), so its frames come in the
order of the writes as before; held bytes count against the connection's
output budget like unread frames, and a frame held reaches a quarter of that
budget (``read_chunk``) at most before it goes. Held lines go out before
anything else of their subscription: a catch-up read's frame, a ``reset``,
``Unsubscribed``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from sessiond.store.agents import MAX_ENTRIES as AGENT_ENTRIES
from sessiond.store.agents import AgentFiles, agent_files
from sessiond.store.linecap import MAX_LINE, Span, read_span
from sessiond.store.regular import open_regular
from sessiond.wire import messages as m
from sessiond.wire.errors import TOO_LARGE, SessiondError, bad_request
from sessiond.wire.frames import HEADER
from sessiond.wire.fsnames import pack

if TYPE_CHECKING:
    from .connection import Connection

log = logging.getLogger("sessiond")

READ_CHUNK = 1024 * 1024
"""Bytes of a file read at once when a watcher catches up (at most)."""
MIN_CHUNK = 4096
FRAME_OVERHEAD = 128
"""An ``Entries`` frame's bytes beyond its lines (header, ids, the file name)."""
LAST_WINDOW = 8 * 1024 * 1024
"""How far back from the end ``last`` looks for its entries."""
RECHECK = 0.1
"""A watcher whose connection has no room for its next frame is looked at again this often."""
FRAME_SLACK = 4096
"""What an ``Entries`` frame of one line needs beyond the line (its file name
may be a few hundred bytes): the longest line sent is the frame cap less this."""
SCAN_LIMIT = 8 * 1024 * 1024
"""Bytes one catch-up read looks at for newlines at most: a line of a GB is
looked at over many reads, each a turn in the connection's fair share of the
read pool, not in one read that holds a thread of it for the whole line."""
MAX_PER_CONNECTION = 64
MAX_TOTAL = 4096
"""Subscriptions one connection, and all of them together, may hold."""


class _Head(msgspec.Struct, tag="Entries", tag_field="op"):
    """The fields of an ``Entries`` frame before its lines, in ``m.Entries``'s
    order: encoded per watcher, the lines once for all of them."""

    id: int
    file: str
    offset: int


_encoder = msgspec.msgpack.Encoder()
_LINES = b"\xa5lines"
"""The msgpack key before an ``Entries`` frame's lines."""
_RESET = b"\xa5reset\xc3"
"""``reset: true``, as ``m.Entries`` encodes it (omitted when false)."""
_SKIPPED = b"\xa7skipped"
_FIXMAP = 0x80
_HEAD_FIELDS = 4
"""``op``, ``id``, ``file``, ``offset``: the map ``_Head`` encodes to."""


class EntriesFrame:
    """One ``Entries`` frame's lines, encoded once and shared by the frames of
    every watcher that is sent them (a write seen by ten watchers is encoded
    once, not ten times): ``parts`` gives one watcher's frame as the bytes to
    queue, its own head, these lines, its own tail; joined, they are exactly
    ``encode(m.Entries(...))``. ``joined`` gives one frame of the lines of
    several writes in a row (``items``: one write's lines without their
    array's header, also made once however many watchers get them)."""

    __slots__ = ("lines", "_packed", "_items")

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines
        self._packed: bytes | None = None
        self._items: bytes | None = None

    @property
    def is_packed(self) -> bool:
        """The lines were encoded already (for another watcher's frame)."""
        return self._packed is not None

    def packed(self) -> bytes:
        """The lines as the frame carries them (the ``lines`` key and its array), made on first use."""
        packed = self._packed
        if packed is None:
            packed = self._packed = _LINES + _encoder.encode(self.lines)
        return packed

    def items(self) -> bytes:
        """The lines' encodings one after the other (no key, no array header), made on first use."""
        items = self._items
        if items is None:
            items = self._items = self.packed()[len(_LINES) + len(_array_header(len(self.lines))):]
        return items

    def parts(self, rid: int, file: str, offset: int, reset: bool, skipped: int) -> tuple[bytes, ...]:
        """The frame of subscription ``rid`` for these lines at ``offset`` of ``file``."""
        return _frame(self.packed(), rid, file, offset, reset, skipped)

    @staticmethod
    def joined(frames: list[EntriesFrame], count: int, rid: int, file: str, offset: int,
               reset: bool) -> tuple[bytes, ...]:
        """One frame of subscription ``rid`` for the lines of ``frames`` (``count``
        of them), written one after the other from ``offset`` of ``file``: exactly
        ``encode(m.Entries(...))`` of all their lines."""
        if len(frames) == 1:
            return frames[0].parts(rid, file, offset, reset, 0)
        lines = _LINES + _array_header(count)
        head = _frame(lines, rid, file, offset, reset, 0, sum(len(f.items()) for f in frames))
        return (head[0] + lines, *(f.items() for f in frames), *head[2:])


def _array_header(count: int) -> bytes:
    """The msgpack header of an array of ``count`` elements."""
    if count < 16:
        return bytes((0x90 | count,))
    if count < 0x10000:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def _frame(lines: bytes, rid: int, file: str, offset: int, reset: bool, skipped: int,
           more: int = 0) -> tuple[bytes, ...]:
    """An ``Entries`` frame as parts to queue: its length header and head, then
    ``lines`` (the ``lines`` key and array, ``more`` bytes of it not given),
    then its tail (``reset``, ``skipped``) when it has one."""
    head = pack(_encoder, _Head(rid, file, offset))  # a name that is not UTF-8 as fsnames' extension
    fields = _HEAD_FIELDS + 1
    tail = b""
    if reset:
        tail, fields = _RESET, fields + 1
    if skipped:
        tail, fields = tail + _SKIPPED + _encoder.encode(skipped), fields + 1
    framed = HEADER.pack(len(head) + len(lines) + more + len(tail)) + bytes((_FIXMAP | fields,)) + head[1:]
    return (framed, lines, tail) if tail else (framed, lines)


class _Write:
    """One write the observers were told of, as every cursor of its file looks
    at it: where its lines start and end, whether one is too long for a frame
    (looked at once, not per watcher), and its lines' frame (encoded at most once)."""

    __slots__ = ("lines", "start", "end", "too_long", "frame")

    def __init__(self, lines: list[bytes], start: int, end: int, line_cap: int) -> None:
        self.lines = lines
        self.start = start
        self.end = end
        self.too_long = bool(lines) and max(map(len, lines)) > line_cap
        self.frame = EntriesFrame(lines)


class Cursor:
    """Where one watcher stands in one file."""

    __slots__ = ("sub", "path", "rel", "pos", "reading", "waiting", "seen_end", "reset", "scanned")

    def __init__(self, sub: Subscription, path: Path, rel: str, pos: int) -> None:
        self.sub = sub
        self.path = path
        self.rel = rel
        self.pos = pos
        self.reading = False
        """A catch-up read is in flight: live lines wait for it."""
        self.waiting = False
        """Its connection had no room: a catch-up is due once it has."""
        self.seen_end = pos
        """The furthest file end the observers reported meanwhile."""
        self.reset = False
        self.scanned = 0
        """Bytes [pos, scanned) were looked at and hold no newline (``Span.scanned``)."""


class _Held:
    """Lines of writes in a row to one cursor's file, held to go out as one
    frame (``Watchers._hold``): the writes' shared frames, where the first
    starts, how many lines, the bytes they count against the connection's
    output budget, and whether the frame says ``reset``."""

    __slots__ = ("cursor", "frames", "start", "count", "size", "reset")

    def __init__(self, cursor: Cursor, start: int, reset: bool) -> None:
        self.cursor = cursor
        self.frames: list[EntriesFrame] = []
        self.start = start
        self.count = 0
        self.size = 0
        self.reset = reset


class Subscription:
    """One ``Subscribe`` of one connection: the session, its main transcript and (if
    asked) agent files, a cursor per file, and whether it has ended."""

    __slots__ = ("id", "conn", "session", "main", "session_dir", "agents", "cursors", "ended", "finding", "held")

    def __init__(self, rid: int, conn: Connection, session: str, main: Path, agents: bool) -> None:
        self.id = rid
        self.conn = conn
        self.session = session
        self.main = main
        self.session_dir = main.with_suffix("")
        self.agents = agents
        self.cursors: dict[Path, Cursor] = {}
        self.ended = False
        self.finding = False
        """Its existing agent files are being looked for (``Watchers._found``)."""
        self.held: _Held | None = None
        """Lines of its latest writes not sent yet (``Watchers._hold``): of one
        file at a time, so its frames still come in the order of the writes."""


def agent_session_dir(path: Path) -> Path | None:
    """``<project>/<id>`` for an agent file (``<id>/subagents/agent-x.jsonl`` or
    ``<id>/subagents/workflows/<run>/agent-x.jsonl``), else None."""
    if not path.name.startswith("agent-"):
        return None
    for up in (path.parent, path.parent.parent.parent):
        if up.name == "subagents":
            return up.parent
    return None


class Watchers:
    """Every subscription of the daemon: each watcher gets the lines written to its
    files, live from the writer's observers or read back from the file, within its
    connection's output budget."""

    def __init__(self, daemon) -> None:
        self.daemon = daemon
        self.loop = daemon.loop
        self.by_path: dict[Path, list[Cursor]] = {}
        self.by_dir: dict[Path, list[Subscription]] = {}
        self.subs: dict[tuple[int, int], Subscription] = {}
        budget = daemon.settings.max_output_bytes
        self.budget = budget
        self.read_chunk = max(MIN_CHUNK, min(READ_CHUNK, budget // 4))
        self.line_cap = min(MAX_LINE, daemon.settings.max_frame - FRAME_SLACK)
        """The longest line a frame takes to a watcher; longer ones are skipped."""
        self.encoded = 0
        """Line arrays encoded for ``Entries`` frames: one per write however many watch it."""
        self.delay = daemon.settings.watch_coalesce
        """How long live lines may be held for more of their file's writes (``_hold``)."""
        self._holding: list[Subscription] = []
        """Subscriptions holding lines, sent together when ``_timer`` fires."""
        self._held_bytes: dict[int, int] = {}
        """Bytes held per connection id: they count against its output budget."""
        self._timer: asyncio.TimerHandle | None = None
        self._quiet_at = 0.0
        """Loop time from which a write is sent at once, not held."""

    def _room(self, conn: Connection, size: int, alone: bool) -> bool:
        """Does a frame of ``size`` bytes fit in ``conn``'s output budget beside
        what it has not read (and what is held for it)? ``alone``: a frame that
        cannot be made smaller (one line longer than a read) goes when nothing
        else waits."""
        used = conn.output_bytes + self.held(conn)
        return used + size <= self.budget or alone and used == 0

    def held(self, conn: Connection) -> int:
        """Bytes of lines held for ``conn``'s watchers (``_hold``), counted
        against its output budget like the frames it has not read."""
        return self._held_bytes.get(conn.id, 0)

    @property
    def due(self) -> float | None:
        """When the held lines go out (loop time), None when none are held."""
        return self._timer.when() if self._timer is not None else None

    @property
    def count(self) -> int:
        return len(self.subs)

    # ------------------------------------------------------------ subscribing

    def subscribe(self, conn: Connection, req: m.Subscribe, main: Path) -> m.Subscribed:
        if (conn.id, req.id) in self.subs:
            raise bad_request(f"subscription {req.id} already exists on this connection")
        mine = sum(1 for cid, _ in self.subs if cid == conn.id)
        if mine >= MAX_PER_CONNECTION or len(self.subs) >= MAX_TOTAL:
            raise SessiondError(f"too many subscriptions ({mine} on this connection, {len(self.subs)} in all; "
                                f"budgets {MAX_PER_CONNECTION} and {MAX_TOTAL})", code=TOO_LARGE)
        sub = Subscription(req.id, conn, req.session, main, req.agents)
        self.subs[(conn.id, req.id)] = sub
        size = _size(main)
        start = size if req.offset is None else min(req.offset, size)
        cursor = self._add(sub, main, start)
        if req.last is not None and req.offset is None:
            try:
                fut = self.daemon.fair.submit(_read_last, main, req.last, size, self.read_chunk, owner=conn.id,
                                              answer=True)
            except SessiondError:  # its share of the read pool is full (busy): refused whole
                del self.subs[(conn.id, req.id)]
                self._remove(sub)
                raise
            cursor.reading = True
            fut.add_done_callback(lambda f: self._read_done(cursor, f))
        elif start < size:
            self._catch_up(cursor)
        if req.agents:
            try:  # the watcher's connection's fair share of the read pool
                fut = self.daemon.fair.submit(agent_files, sub.session_dir, owner=conn.id)
            except SessiondError:  # its share is full (busy): refused whole
                del self.subs[(conn.id, req.id)]
                self._remove(sub)
                raise
            sub.finding = True
            self.by_dir.setdefault(sub.session_dir, []).append(sub)
            fut.add_done_callback(lambda f: self._found(sub, f))
        return m.Subscribed(id=req.id, session=req.session, path=str(main), offset=cursor.pos)

    def _found(self, sub: Subscription, fut) -> None:
        """The agent files that existed: each watched from where the follower's
        reports of it stand (one written to meanwhile already is, from that
        write): the lookup ran off the loop, so it may have seen lines whose
        report is still to come, and the watcher gets them with it."""
        sub.finding = False
        if sub.ended or fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            log.warning("watching %s: looking for its agent files failed: %s", sub.session_dir, exc)
            return
        found: AgentFiles = fut.result()
        if not found.complete:
            log.warning("watching %s: looked for agent files in the first %d entries only",
                        sub.session_dir, AGENT_ENTRIES)
        passed_on = self.daemon.follower.files
        for f in found.files:
            if f.path not in sub.cursors:
                # From what the follower has passed on of it: lines the lookup saw in the file that are not
                # reported yet (a file made just after Subscribed) reach this watcher with their report.
                known = passed_on.get(f.path)
                self._add(sub, f.path, min(known.offset, f.size) if known is not None else 0)

    def _add(self, sub: Subscription, path: Path, pos: int) -> Cursor:
        rel = os.path.relpath(path, sub.main.parent)
        cursor = sub.cursors[path] = Cursor(sub, path, rel, pos)
        self.by_path.setdefault(path, []).append(cursor)
        return cursor

    def unsubscribe(self, conn: Connection, rid: int, reason: str) -> bool:
        sub = self.subs.pop((conn.id, rid), None)
        if sub is None:
            return False
        self._release(sub)  # the lines written before it ends go out before Unsubscribed
        self._remove(sub)
        conn.reply(m.Unsubscribed(id=rid, reason=reason))
        return True

    def _remove(self, sub: Subscription) -> None:
        sub.ended = True
        self._drop_held(sub)
        for path, cursor in sub.cursors.items():
            cursors = self.by_path.get(path)
            if cursors is not None:
                cursors.remove(cursor)
                if not cursors:
                    del self.by_path[path]
        subs = self.by_dir.get(sub.session_dir)
        if subs is not None and sub in subs:
            subs.remove(sub)
            if not subs:
                del self.by_dir[sub.session_dir]

    def drop_connection(self, conn: Connection) -> None:
        for key in [k for k in self.subs if k[0] == conn.id]:
            self._remove(self.subs.pop(key))

    # ------------------------------------------------------------- observers

    def written(self, path: Path, lines: list[bytes], end: int) -> None:
        """The write observer: ``lines`` are in ``path`` now, ending at ``end``."""
        cursors = self.by_path.get(path)
        start = end - sum(map(len, lines)) - len(lines)
        if cursors is None:
            if not self.by_dir:
                return
            session_dir = agent_session_dir(path)
            subs = self.by_dir.get(session_dir) if session_dir is not None else None
            if not subs:
                return
            for sub in list(subs):  # a new agent file (or one not seen before): from its start
                self._add(sub, path, start if sub.finding else 0)
            cursors = self.by_path[path]
        write = _Write(lines, start, end, self.line_cap)
        due = self.loop.time() >= self._quiet_at
        for cursor in list(cursors):
            self._deliver(cursor, write)
        if due:  # no frame within the window (or the timer is late): what is held goes now, this write with it
            self.flush()
        elif self._holding and self._timer is None:
            self._timer = self.loop.call_at(self._quiet_at, self.flush)

    def gone(self, path: Path) -> None:
        """What was reported of ``path`` no longer stands (deleted, replaced,
        truncated): a watcher of a main file that is gone is ended, others
        start the file over."""
        for cursor in list(self.by_path.get(path, ())):
            sub = cursor.sub
            if sub.held is not None and sub.held.cursor is cursor:
                self._release(sub)  # what it was told of before: sent as it was
            if not path.exists() and path == sub.main:
                self.unsubscribe(sub.conn, sub.id, "gone")
                continue
            cursor.pos = cursor.seen_end = cursor.scanned = 0
            cursor.reset = True

    def _deliver(self, cursor: Cursor, write: _Write) -> None:
        end = write.end
        if end > cursor.seen_end:
            cursor.seen_end = end
        if cursor.reading or end <= cursor.pos:
            return  # a read in flight covers it, or it was had already
        start = write.start
        if start > cursor.pos:
            self._catch_up(cursor)  # a write we were not told of: read the gap
            return
        if start == cursor.pos:  # the common case: the write's frame, shared with its other watchers
            if write.too_long:  # no frame takes it: the catch-up read skips it
                self._catch_up(cursor)
                return
            self._hold(cursor, write)
            return
        lines = write.lines  # partly had already: only the rest
        skip = 0
        while skip < len(lines) and start < cursor.pos:
            start += len(lines[skip]) + 1
            skip += 1
        lines = lines[skip:]
        if write.too_long and any(len(x) > self.line_cap for x in lines):
            self._catch_up(cursor)
            return
        self._send(cursor, lines, start, end, alone=False)

    def _send(self, cursor: Cursor, lines: list[bytes], start: int, end: int, alone: bool, skipped: int = 0,
              frame: EntriesFrame | None = None) -> None:
        """Send ``lines`` (``start``..``end`` of the file, ``start`` where the
        cursor stands) if they fit the connection's output budget; else the
        cursor stays and the file is read from there once they can.
        ``skipped``: bytes of over-long lines just before ``start``; ``frame``:
        these lines' frame, shared with the other watchers of the same write."""
        sub = cursor.sub
        conn = sub.conn
        if conn.transport is None or sub.ended:
            return
        if sub.held is not None:  # the lines before these first
            self._release(sub)
        if not self._room(conn, end - start + 2 * len(lines) + FRAME_OVERHEAD, alone):
            self._wait(cursor)
            return
        if frame is None:
            frame = EntriesFrame(lines)
        if not frame.is_packed:
            self.encoded += 1
        conn.push(frame.parts(sub.id, cursor.rel, start, cursor.reset, skipped))
        cursor.pos = end
        cursor.reset = False

    # ---------------------------------------------------------------- holding

    def _hold(self, cursor: Cursor, write: _Write) -> None:
        """Hold ``write``'s lines (at the cursor's position) to go out with the
        writes that follow them to the same file, as one frame: at the end of
        ``written`` when no frame went within ``delay`` (a write after a quiet
        spell waits for nothing), else when the timer fires, at most ``delay``
        after the last frame. At a high write rate a watcher gets one frame
        (one wake-up, one socket write) for many writes."""
        sub = cursor.sub
        conn = sub.conn
        if conn.transport is None or sub.ended:
            return
        held = sub.held
        size = write.end - write.start + 2 * len(write.lines) + FRAME_OVERHEAD
        if held is not None and (held.cursor is not cursor or held.size + size > self.read_chunk):
            self._release(sub)  # another file's lines, or a frame big enough: out first
            held = None
        if not self._room(conn, size, alone=False):
            self._wait(cursor)
            return
        if held is None:
            held = sub.held = _Held(cursor, write.start, cursor.reset)
            self._holding.append(sub)
            cursor.reset = False
        held.frames.append(write.frame)
        held.count += len(write.lines)
        held.size += size
        self._held_bytes[conn.id] = self._held_bytes.get(conn.id, 0) + size
        cursor.pos = write.end

    def flush(self) -> None:
        """Send every subscription's held lines: at the end of a write that
        came after a quiet spell (or after the timer was due), when the timer
        fires, and when the daemon stops (before its connections close)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        holding, self._holding = self._holding, []
        for sub in holding:
            self._release(sub)
        self._quiet_at = self.loop.time() + self.delay

    def _release(self, sub: Subscription) -> None:
        """Queue ``sub``'s held lines, as one frame, to its connection."""
        held = sub.held
        if held is None:
            return
        self._drop_held(sub)
        for frame in held.frames:
            if not frame.is_packed:
                self.encoded += 1
        sub.conn.push(EntriesFrame.joined(held.frames, held.count, sub.id, held.cursor.rel, held.start, held.reset))

    def _drop_held(self, sub: Subscription) -> None:
        held = sub.held
        if held is None:
            return
        sub.held = None
        cid = sub.conn.id
        left = self._held_bytes[cid] - held.size
        if left:
            self._held_bytes[cid] = left
        else:
            del self._held_bytes[cid]

    # ---------------------------------------------------------------- reading

    def _wait(self, cursor: Cursor) -> None:
        """Catch up in ``RECHECK`` (one timer per cursor): it reads slowly, hold nothing."""
        if not cursor.waiting:
            cursor.waiting = True
            self.loop.call_later(RECHECK, self._recheck, cursor)

    def _recheck(self, cursor: Cursor) -> None:
        cursor.waiting = False
        self._catch_up(cursor)

    def drained(self, conn: Connection) -> None:
        """``conn``'s client read its answers (the transport resumed writing):
        its watchers that had no room go on now, not at their next recheck."""
        for (cid, _), sub in list(self.subs.items()):
            if cid == conn.id:
                for cursor in list(sub.cursors.values()):
                    if cursor.waiting:
                        self._recheck(cursor)

    def _catch_up(self, cursor: Cursor) -> None:
        if cursor.reading or cursor.waiting or cursor.sub.ended or cursor.sub.conn.transport is None:
            return
        if not self._room(cursor.sub.conn, self.read_chunk + FRAME_OVERHEAD, alone=True):
            self._wait(cursor)
            return
        try:  # the watcher's connection's fair share of the read pool
            fut = self.daemon.fair.submit(_read_from, cursor.path, cursor.pos, self.read_chunk, self.line_cap,
                                          cursor.scanned, owner=cursor.sub.conn.id, answer=True)
        except SessiondError:  # its share is full (busy): try again shortly, holding nothing
            self._wait(cursor)
            return
        cursor.reading = True
        fut.add_done_callback(lambda f: self._read_done(cursor, f))

    def _read_done(self, cursor: Cursor, fut) -> None:
        cursor.reading = False
        if cursor.sub.ended:
            return
        if fut.cancelled():  # its client went, or the read pool shut down (the daemon is exiting)
            return
        exc = fut.exception()
        if exc is not None:
            if isinstance(exc, FileNotFoundError) and cursor.path == cursor.sub.main:
                self.unsubscribe(cursor.sub.conn, cursor.sub.id, "gone")
            elif isinstance(exc, SessiondError):  # made room for another client's job (busy): try again shortly
                self._wait(cursor)
            else:
                log.warning("watching %s: %s", cursor.path, exc)
            return
        span, more = fut.result()
        lines, end = span.lines(), span.end
        if span.offset < cursor.pos:  # what ``last`` found before where the cursor stood
            cursor.pos = span.offset
        elif span.offset > cursor.pos:  # read from further on than it stands now (reset meanwhile): read again
            lines, end = [], cursor.pos
        if span.offset == cursor.pos:
            cursor.scanned = span.scanned
        if lines or span.skipped and end > cursor.pos:
            if span.skipped:
                log.info("watching %s: skipped %d bytes at %d (%d lines longer than %d bytes)",
                         cursor.path, span.skipped_bytes, span.offset, span.skipped, self.line_cap)
            self._send(cursor, lines, span.start, end, alone=len(lines) <= 1, skipped=span.skipped_bytes)
        else:
            cursor.pos = max(cursor.pos, end)
        if more or cursor.seen_end > cursor.pos:
            self._catch_up(cursor)


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _read_from(path: Path, offset: int, chunk: int, cap: int, scanned: int = 0) -> tuple[Span, bool]:
    """Whole lines of ``path`` from ``offset`` (worker thread): at most ``chunk``
    bytes of them, or one line up to ``cap`` alone; lines over ``cap`` skipped
    (``linecap.read_span``), at most ``SCAN_LIMIT`` looked at for newlines,
    from ``scanned`` on in an unfinished line. The span, and whether more may be left."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        span = read_span(fd, offset, chunk, cap, scanned=scanned, limit=SCAN_LIMIT)
    finally:
        os.close(fd)
    # a full read, or the look stopped by its limit: more may follow
    return span, offset < span.end < size and size - offset >= chunk or span.scanned < size


def _read_last(path: Path, count: int, size: int, chunk: int) -> tuple[Span, bool]:
    """Where the last ``count`` whole lines of ``path`` up to ``size`` start,
    looking back at most ``LAST_WINDOW`` bytes, ``chunk`` at a time (worker
    thread); the lines themselves are then read forward like any catch-up, so
    they count against the watcher's output budget like everything else."""
    if count <= 0 or size == 0:
        return Span(size, size, b"", 0), False
    newlines: list[int] = []  # newest first, up to count + 1
    floor = max(0, size - LAST_WINDOW)
    fd = open_regular(path)
    try:
        top = size
        while top > floor and len(newlines) <= count:
            base = max(floor, top - chunk)
            data = os.pread(fd, top - base, base)
            at = len(data)
            while len(newlines) <= count and (at := data.rfind(b"\n", 0, at)) >= 0:
                newlines.append(base + at)
            top = base
    finally:
        os.close(fd)
    if not newlines:
        return Span(size, size, b"", 0), False
    if len(newlines) > count:
        start = newlines[count] + 1
    elif floor == 0:
        start = 0
    else:  # the first line found may be cut by the window
        start = newlines[-1] + 1
    return Span(start, start, b"", 0), start <= newlines[0]
