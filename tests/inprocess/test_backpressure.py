"""Answers a client does not read: the connection's output bound, the
daemon-wide one, and a frame that never completes."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from sessiond.wire import messages as m
from sessiond.wire.errors import BAD_REQUEST
from sessiond.wire.framing import HEADER, encode

from .conftest import CWD, entry, in_process, until

pytestmark = pytest.mark.anyio

OUTPUT = 16 * 1024
"""max_output_bytes in these tests: half of it the transport's high-water mark,
half the answers one pass may collect."""
REQUESTS = 300


async def passes(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def read_all(peer, timeout: float = 10.0) -> None:
    """The peer reads until it has every answer to its ``REQUESTS`` requests."""
    async with asyncio.timeout(timeout):
        while len(peer.answers()) < REQUESTS:
            peer.transport.take()
            await passes()


async def test_a_client_that_does_not_read_is_neither_read_nor_served_past_its_output_bound(tmp_path):
    """Like Redis's client output buffer: three hundred pipelined Status
    requests from a client that reads nothing hold at most ``max_output_bytes``
    (plus one answer) of answers at any write; the connection stops reading and serving,
    and goes on, in order, as the client reads."""
    async with in_process(tmp_path, max_output_bytes=OUTPUT) as d:
        peer = await d.greeted()
        peer.send(m.Status(id=0))
        await peer.wait_answers(1)
        answer = len(peer.transport.taken)
        peer.transport.taken.clear()
        peer.transport.peer_reads = False
        held: list[int] = []
        peer.transport.on_write = lambda _data: held.append(peer.conn.output_bytes)
        peer.send(*(m.Status(id=i) for i in range(REQUESTS)))
        await until(lambda: peer.transport.writing_paused)
        await passes()
        assert not peer.transport.reading  # its next bytes stay in the socket
        assert 0 < len(peer.answers()) + _frames(peer.transport.unread) < REQUESTS
        served = _frames(peer.transport.unread)
        await passes()
        assert _frames(peer.transport.unread) == served  # nothing more served while it does not read
        await read_all(peer)
        assert [a.id for a in peer.answers()] == list(range(REQUESTS))
        assert OUTPUT // 2 < max(held) <= OUTPUT + answer
        assert peer.transport.reading and peer.conn.budget_use() == (0, 0, 0, 0)


async def test_past_the_daemon_wide_budget_the_newest_client_not_reading_is_disconnected(tmp_path):
    async with in_process(tmp_path, max_output_bytes=OUTPUT, max_output_total_bytes=OUTPUT) as d:
        first, second = await d.greeted(), await d.greeted()
        for peer in (first, second):
            peer.transport.peer_reads = False
            peer.send(*(m.Status(id=i) for i in range(REQUESTS)))
            await until(lambda p=peer: p.transport.writing_paused or p.transport.lost)  # type: ignore[misc]
        assert not first.transport.lost and first.conn in d.daemon.connections
        await until(lambda: second.transport.lost)
        assert second.transport.aborted and second.conn not in d.daemon.connections
        assert d.daemon.bounds.refused == 1
        await read_all(first)  # the one kept is served to the end
        assert [a.id for a in first.answers()] == list(range(REQUESTS))


async def test_a_frame_that_stops_half_way_is_cut_off_after_frame_timeout(tmp_path):
    async with in_process(tmp_path, frame_timeout=0.05) as d:
        peer = await d.greeted()
        body = encode(m.Status(id=9))[HEADER.size:]
        peer.send(HEADER.pack(len(body)) + body[:2])
        await until(lambda: peer.transport.lost)
        (err,) = peer.answers()
        assert isinstance(err, m.Error) and (err.id, err.code) == (0, BAD_REQUEST) and "inside a frame" in err.message
        assert d.daemon.bounds.partial_bytes == 0


async def test_the_frame_clock_does_not_run_while_the_daemon_holds_the_client_back(tmp_path):
    """Paused for a reason of the daemon's own (here: its rate limit), a
    client in the middle of a frame is not the one stalling: it is served
    once let go, however long that took."""
    async with in_process(tmp_path, frame_timeout=0.05, rate_bytes=1024, rate_burst=1024) as d:
        peer = await d.greeted()
        peer.send(HEADER.pack(8192) + b"\x00" * 4096)  # half a frame, over its burst: not read for ~3 s
        await asyncio.sleep(0.2)  # four frame timeouts
        assert not peer.transport.lost and not peer.transport.reading


def _frames(data: bytes | bytearray) -> int:
    n, pos = 0, 0
    while pos + HEADER.size <= len(data):
        pos += HEADER.size + HEADER.unpack_from(data, pos)[0]
        n += 1
    return n


async def test_a_big_frame_waits_unread_for_the_partial_frame_budget_then_is_served(tmp_path):
    """Two 200 KB frames arriving at once against a 300 KB budget for frames
    being received: the second waits, unread and charged only what it holds,
    until the first is complete; then it is read and served."""
    budget = 300 * 1024
    async with in_process(tmp_path, max_frame=budget, max_partial_bytes=budget) as d:
        first, second = await d.greeted(), await d.greeted()
        frames = [encode(m.Append(id=1, session=str(uuid.uuid4()), cwd=CWD, entries=[entry("x" * 200_000)],
                                  durability="written")) for _ in range(2)]
        first.transport.send(frames[0][:1000])
        second.transport.send(frames[1][:1000])
        assert first.transport.reading and not second.transport.reading
        assert d.daemon.bounds.partial_bytes == len(frames[0]) + 1000
        second.transport.send(frames[1][1000:])  # stays in its socket meanwhile
        await passes()
        assert second.answers() == [] and d.daemon.bounds.partial_bytes <= budget
        first.transport.send(frames[0][1000:])
        (a,) = await first.wait_answers(1)
        (b,) = await second.wait_answers(1)
        assert isinstance(a, m.Appended) and isinstance(b, m.Appended) and a.accepted == b.accepted == 1
        assert d.daemon.bounds.partial_bytes == 0 and second.transport.reading


async def test_a_client_is_not_read_while_the_write_queues_are_over_their_budget(tmp_path):
    """``queued`` appends past ``max_queued_bytes`` (their coalescing window
    long): the connection stops being read, not refused; once the queues are
    written it is read again, and every entry is in the file, in order."""
    async with in_process(tmp_path, max_queued_bytes=16 * 1024, flush_interval=0.05) as d:
        peer = await d.greeted()
        sid = str(uuid.uuid4())
        texts = [f"{i:03d}" + "q" * 4000 for i in range(20)]
        samples: list[tuple[bool, int]] = []

        async def sample() -> None:
            while True:
                samples.append((peer.transport.reading, d.daemon.writer.queued_bytes))
                await asyncio.sleep(0)

        sampler = asyncio.create_task(sample())
        for i, text in enumerate(texts):
            peer.send(m.Append(id=i, session=sid, cwd=CWD, entries=[entry(text)]))
            samples.append((peer.transport.reading, d.daemon.writer.queued_bytes))
        answers = await peer.wait_answers(len(texts))
        sampler.cancel()
        assert [a.id for a in answers] == list(range(len(texts))) and all(isinstance(a, m.Appended) for a in answers)
        assert not all(reading for reading, _ in samples)
        assert max(queued for _, queued in samples) <= 16 * 1024 + 4100  # one append past the budget at most
        await until(lambda: peer.transport.reading)
        await until(lambda: d.transcript(sid).exists() and d.transcript(sid).read_bytes().count(b"\n") == len(texts))
        lines = d.transcript(sid).read_bytes().splitlines()
        assert [json.loads(line)["message"]["content"] for line in lines] == texts
