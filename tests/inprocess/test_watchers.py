"""Watchers of one session: each write's lines encoded once for all of them,
and what every watcher reads is still exactly its own ``Entries`` frame."""

from __future__ import annotations

import uuid

import pytest

from sessiond.wire import messages as m
from sessiond.wire.framing import FrameBuffer, decode_response, encode

from .conftest import CWD, entry, in_process, until

pytestmark = pytest.mark.anyio


async def test_a_write_is_encoded_once_for_all_its_watchers(tmp_path):
    """Ten watchers (on ten connections, each subscription with its own id) of
    one session, three ``written`` appends: each watcher reads every batch,
    in order, as the very bytes ``encode(Entries(...))`` makes for its own
    subscription; and the daemon encoded the lines of each write once, not
    once per watcher. (Without coalescing: writes that come within
    ``watch_coalesce`` of each other share one frame, test_watch_coalesce.py.)"""
    async with in_process(tmp_path, watch_coalesce=0) as d:
        writer = await d.greeted()
        sid = str(uuid.uuid4())
        writer.send(m.Append(id=1, session=sid, cwd=CWD, entries=[entry("first")], durability="written"))
        await writer.wait_answers(1)
        watchers = []
        for k in range(10):
            peer = await d.greeted()
            peer.send(m.Subscribe(id=50 + k, session=sid, cwd=CWD))
            (subscribed,) = await peer.wait_answers(1)
            assert isinstance(subscribed, m.Subscribed)
            peer.transport.taken.clear()
            watchers.append(peer)
        start = subscribed.offset
        encoded = d.daemon.watchers.encoded
        batches = [[entry(f"b{b}e{i}") for i in range(b + 1)] for b in range(3)]
        expected: list[tuple[int, list[bytes]]] = []  # (offset, lines) of each write
        offset = start
        for b, lines in enumerate(batches):
            writer.send(m.Append(id=10 + b, session=sid, cwd=CWD, entries=lines, durability="written"))
            await writer.wait_answers(2 + b)
            expected.append((offset, lines))
            offset += sum(len(x) + 1 for x in lines)
        name = f"{sid}.jsonl"
        for k, peer in enumerate(watchers):
            await until(lambda peer=peer: len(FrameBuffer(1 << 30).feed(bytes(peer.transport.taken))) >= len(batches))
            bodies = FrameBuffer(1 << 30).feed(bytes(peer.transport.taken))
            frames = [m.Entries(id=50 + k, file=name, offset=at, lines=lines) for at, lines in expected]
            assert [decode_response(body) for body in bodies] == frames
            assert bytes(peer.transport.taken) == b"".join(encode(f) for f in frames)
        assert d.daemon.watchers.encoded - encoded == len(batches)


async def test_the_writer_s_ack_leaves_before_the_watchers_pushes(tmp_path):
    """A ``written`` append to a session five connections watch: its ack and
    their pushes leave in the same pass, the ack first (the client waiting on
    it is not held behind one socket write per watcher)."""
    async with in_process(tmp_path) as d:
        writer = await d.greeted()
        sid = str(uuid.uuid4())
        writer.send(m.Append(id=1, session=sid, cwd=CWD, entries=[entry("first")], durability="written"))
        await writer.wait_answers(1)
        order: list[str] = []
        watchers = []
        for k in range(5):
            peer = await d.greeted()
            peer.send(m.Subscribe(id=7, session=sid, cwd=CWD))
            await peer.wait_answers(1)
            peer.transport.on_write = lambda data, k=k: order.append(f"watcher {k}")
            watchers.append(peer)
        writer.transport.on_write = lambda data: order.append("writer")
        writer.send(m.Append(id=2, session=sid, cwd=CWD, entries=[entry("second")], durability="written"))
        await until(lambda: len(order) == 6)
        assert order[0] == "writer" and sorted(order[1:]) == [f"watcher {k}" for k in range(5)]
        for peer in watchers:
            (pushed,) = peer.answers()[1:]
            assert isinstance(pushed, m.Entries) and len(pushed.lines) == 1
