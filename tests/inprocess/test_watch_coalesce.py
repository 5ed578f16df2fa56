"""Watchers during a burst of writes: the writes within ``watch_coalesce`` of
the last frame go to each watcher together, in one frame, when the timer fires
(or before anything else of their subscription); a write after a quiet spell
goes at once. Every byte once, in file order, frames in the order of the
writes, held bytes within the connection's output budget."""

from __future__ import annotations

import json
import uuid

import pytest

from sessiond.wire import messages as m
from sessiond.wire.framing import FrameBuffer, decode_response, encode

from .conftest import CWD, Peer, entry, in_process, until

pytestmark = pytest.mark.anyio

LONG = 60.0
"""A window no test waits out: held lines go out by an Unsubscribe, another
file's write, a catch-up, never by the timer."""


def pushed(peer: Peer, rid: int) -> list:
    """The frames ``peer`` read for subscription ``rid``, decoded."""
    bodies = FrameBuffer(1 << 30).feed(bytes(peer.transport.taken))
    return [r for r in map(decode_response, bodies) if r.id == rid and not isinstance(r, m.Subscribed)]


def side(text: str) -> bytes:
    """An entry of the session's agent ``helper`` (its own file)."""
    return json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "isSidechain": True, "agentId": "helper",
                       "message": {"role": "user", "content": text}}).encode()


async def watched(d, sid: str, rid: int = 9, agents: bool = False) -> tuple[Peer, Peer, int]:
    """A writer that wrote the session's first line, and a watcher subscribed
    from its end (what it read so far cleared); where the watcher starts."""
    writer = await d.greeted()
    writer.send(m.Append(id=1, session=sid, cwd=CWD, entries=[entry("first")], durability="written"))
    await writer.wait_answers(1)
    watcher = await d.greeted()
    watcher.send(m.Subscribe(id=rid, session=sid, cwd=CWD, agents=agents))
    (subscribed,) = await watcher.wait_answers(1)
    assert isinstance(subscribed, m.Subscribed)
    watcher.transport.taken.clear()
    return writer, watcher, subscribed.offset


async def write(writer: Peer, sid: str, rid: int, lines: list[bytes]) -> None:
    """One ``written`` append to session ``sid``, its ack awaited."""
    writer.send(m.Append(id=rid, session=sid, cwd=CWD, entries=lines, durability="written"))
    await until(lambda: any(a.id == rid for a in writer.answers()))


async def test_a_burst_of_writes_reaches_a_watcher_in_one_frame_after_the_first(tmp_path):
    """Six writes, each acknowledged before the next: the first after a quiet
    spell goes at once (the watcher holds it when the writer holds its ack);
    the five after it are held and go as one frame, exactly
    ``encode(Entries(...))`` of their lines from where the first ended, before
    ``Unsubscribed``. Without coalescing: six frames."""
    async with in_process(tmp_path, watch_coalesce=LONG) as d:
        sid = str(uuid.uuid4())
        writer, watcher, start = await watched(d, sid)
        batches = [[entry(f"w{w}l{i}") for i in range(w + 1)] for w in range(6)]
        await write(writer, sid, 10, batches[0])
        (first,) = pushed(watcher, 9)
        assert first == m.Entries(id=9, file=f"{sid}.jsonl", offset=start, lines=batches[0])
        for w, lines in enumerate(batches[1:], 1):
            await write(writer, sid, 10 + w, lines)
            assert len(pushed(watcher, 9)) == 1  # held
        assert d.daemon.watchers.held(watcher.conn) > 0
        before = bytes(watcher.transport.taken)
        watcher.send(m.Unsubscribe(id=99, subscription=9))
        await until(lambda: any(isinstance(r, m.Unsubscribed) for r in pushed(watcher, 9)))
        rest = [line for lines in batches[1:] for line in lines]
        frame = m.Entries(id=9, file=f"{sid}.jsonl", offset=start + sum(len(x) + 1 for x in batches[0]), lines=rest)
        assert pushed(watcher, 9)[1:] == [frame, m.Unsubscribed(id=9, reason="cancelled")]
        assert bytes(watcher.transport.taken).startswith(before + encode(frame))
        assert d.daemon.watchers.held(watcher.conn) == 0


async def test_without_coalescing_every_write_is_its_own_frame_at_once(tmp_path):
    """``watch_coalesce = 0``: each write's frame is with the watcher when the
    writer holds its ack, one frame per write, as before holding existed."""
    async with in_process(tmp_path, watch_coalesce=0) as d:
        sid = str(uuid.uuid4())
        writer, watcher, start = await watched(d, sid)
        offset = start
        for w in range(4):
            lines = [entry(f"w{w}")]
            await write(writer, sid, 10 + w, lines)
            assert pushed(watcher, 9)[-1] == m.Entries(id=9, file=f"{sid}.jsonl", offset=offset, lines=lines)
            offset += len(lines[0]) + 1
        assert len(pushed(watcher, 9)) == 4


async def test_a_held_write_is_due_within_the_window_and_arrives_on_its_own(tmp_path):
    """A write within the window of the last frame is held, due at most the
    window after it; it reaches the watcher by the timer, nothing else
    written, and the next write after a quiet spell goes at once again."""
    window = 0.05
    async with in_process(tmp_path, watch_coalesce=window) as d:
        sid = str(uuid.uuid4())
        writer, watcher, start = await watched(d, sid)
        loop = d.daemon.loop
        await write(writer, sid, 10, [entry("lone")])
        assert len(pushed(watcher, 9)) == 1 and d.daemon.watchers.due is None
        at = loop.time()
        await write(writer, sid, 11, [entry("close behind")])
        due = d.daemon.watchers.due
        if due is not None:  # held (else the machine took longer than the window to get here)
            assert due <= at + window
            assert len(pushed(watcher, 9)) == 1
        await until(lambda: len(pushed(watcher, 9)) == 2)
        assert d.daemon.watchers.due is None and d.daemon.watchers.held(watcher.conn) == 0
        sent = loop.time()  # the held frame went out before this
        await until(lambda: loop.time() >= sent + window)
        await write(writer, sid, 12, [entry("after a quiet spell")])
        assert len(pushed(watcher, 9)) == 3
        lines = [f.lines for f in pushed(watcher, 9)]
        offsets = [f.offset for f in pushed(watcher, 9)]
        assert offsets == [start, start + len(lines[0][0]) + 1, start + len(lines[0][0]) + len(lines[1][0]) + 2]


async def test_frames_of_a_subscription_keep_the_order_of_the_writes_across_its_files(tmp_path):
    """Main, main, agent, agent, main: the subscription holds one file's lines
    at a time, so a write to another of its files sends what it held first:
    frames [m1] (at once), [m2], [a1 a2], [m3] (at the Unsubscribe), in the
    order written, each file's bytes once and in order."""
    async with in_process(tmp_path, watch_coalesce=LONG) as d:
        sid = str(uuid.uuid4())
        writer, watcher, start = await watched(d, sid, agents=True)
        await until(lambda: not d.daemon.watchers.subs[(watcher.conn.id, 9)].finding)
        m1, m2, a1, a2, m3 = [entry("m1")], [entry("m2")], [side("a1")], [side("a2")], [entry("m3")]
        for k, lines in enumerate((m1, m2, a1, a2, m3)):
            await write(writer, sid, 10 + k, lines)
        watcher.send(m.Unsubscribe(id=99, subscription=9))
        await until(lambda: any(isinstance(r, m.Unsubscribed) for r in pushed(watcher, 9)))
        frames = [(f.file, f.offset, f.lines) for f in pushed(watcher, 9)[:-1]]
        main, agent = f"{sid}.jsonl", f"{sid}/subagents/agent-helper.jsonl"
        assert frames == [
            (main, start, m1),
            (main, start + len(m1[0]) + 1, m2),
            (agent, 0, a1 + a2),
            (main, start + len(m1[0]) + len(m2[0]) + 2, m3),
        ]


async def test_held_lines_count_against_the_output_budget_and_a_slow_watcher_loses_nothing(tmp_path):
    """A watcher that stops reading during a long burst: what is held for it
    plus what it has not read never passes its connection's output budget
    (beyond, its cursor waits and the rest is read from the file later; held
    bytes not counted, it went 3 KB over); once it reads again it gets every
    byte once, in order, frame after frame, the held lines before the catch-up
    read's (no timer: the window is one no test waits out)."""
    budget = 64 * 1024
    async with in_process(tmp_path, watch_coalesce=LONG, max_output_bytes=budget) as d:
        sid = str(uuid.uuid4())
        writer, watcher, start = await watched(d, sid)
        watcher.transport.peer_reads = False
        watchers = d.daemon.watchers
        worst = 0
        written: list[bytes] = []
        for w in range(50):
            lines = [entry("x" * 700 + f"{w}.{i}") for i in range(4)]
            await write(writer, sid, 10 + w, lines)
            written += lines
            worst = max(worst, watcher.conn.output_bytes + watchers.held(watcher.conn))
        assert sum(len(x) + 1 for x in written) > 2 * budget  # the burst is bigger than the budget
        assert worst <= budget
        watcher.transport.peer_reads = True
        watcher.transport.take()
        end = start + sum(len(x) + 1 for x in written)

        def reached() -> bool:
            watcher.transport.take()
            frames = pushed(watcher, 9)
            return bool(frames) and frames[-1].offset + sum(len(x) + 1 for x in frames[-1].lines) == end

        await until(reached)
        frames = pushed(watcher, 9)
        at = start
        for f in frames:
            assert f.offset == at and not f.reset
            at += sum(len(x) + 1 for x in f.lines)
        assert [line for f in frames for line in f.lines] == written
