"""A peer that goes away: what it asked for stops, what it sent stays accepted,
and nothing it held stays held; a peer that only half-closes is still answered."""

from __future__ import annotations

import json
import uuid

import pytest

from sessiond.daemon.handlers import completion
from sessiond.daemon.index.pipe import Done, Rescan
from sessiond.wire import messages as m
from sessiond.wire.errors import SESSION_BUSY

from .conftest import CWD, FakeIndexer, entry, in_process, until

pytestmark = pytest.mark.anyio


async def test_a_search_waiting_for_writes_is_cancelled_when_its_peer_hangs_up(tmp_path, monkeypatch):
    """A Search waits for the writes accepted before it (it asks for their
    drain; the transcript's creation, held back here, keeps them unwritten);
    its peer hangs up meanwhile: the waiting task is cancelled, counted as
    dropped, and nothing is written to the gone peer (the fake transport fails
    the test on a write after the loss). The wait's own bound (``WRITE_WAIT``,
    1 s) is lifted, so a loaded machine that takes a second to get from the ack
    to the hang-up does not let the search start."""
    monkeypatch.setattr(completion, "WRITE_WAIT", 600.0)
    async with in_process(tmp_path, search_index=True) as d:
        peer = await d.greeted()
        sid = str(uuid.uuid4())
        with d.files_held():
            peer.send(m.Append(id=1, session=sid, cwd=CWD, entries=[entry("needle")]),
                      m.Search(id=2, query="needle"))
            await peer.wait_answers(1)
            assert d.daemon.fair.dropped == 0
            peer.transport.hang_up()
            await until(lambda: d.daemon.fair.dropped == 1)  # cancelled before its job was queued
        assert peer.conn.gone.is_set()
        assert [type(a) for a in peer.answers()] == [m.Appended]
    assert d.transcript(sid).read_bytes().count(b"needle") == 1  # accepted stays accepted


async def test_a_search_whose_peer_hangs_up_as_the_indexer_answers_is_cancelled(tmp_path):
    """A Search waits for the indexer to catch up; the indexer's answer and the
    peer's hang-up come in the same loop pass: the search is still cancelled
    and counted as dropped, and no query runs for the gone peer."""
    async with in_process(tmp_path, search_index=True) as d:
        indexer = FakeIndexer(d.daemon.index)
        peer = await d.greeted()
        peer.send(m.Search(id=1, query="needle"))
        await until(lambda: any(isinstance(msg, Rescan) for msg in indexer.sent))
        (question,) = [msg for msg in indexer.sent if isinstance(msg, Rescan)]
        indexer.answer(Done(token=question.token))
        peer.transport.hang_up()
        fair = d.daemon.fair
        await until(lambda: fair.dropped or fair.started)
        assert (fair.dropped, fair.started) == (1, 0)
        assert peer.answers() == []


async def test_a_durable_append_owed_to_a_gone_peer_is_still_written(tmp_path):
    async with in_process(tmp_path) as d:
        peer = await d.greeted()
        sid, uid = str(uuid.uuid4()), str(uuid.uuid4())
        peer.send(m.Append(id=1, session=sid, cwd=CWD, entries=[entry(uid=uid)], durability="durable"))
        peer.transport.hang_up()  # before its fsync is done: the ack is owed to nobody
        await until(lambda: d.transcript(sid).exists() and uid.encode() in d.transcript(sid).read_bytes())
        assert peer.answers() == [] and peer.conn not in d.daemon.connections


async def test_a_lease_and_a_session_go_with_the_peer_that_hangs_up(tmp_path):
    async with in_process(tmp_path) as d:
        holder, other = await d.greeted(), await d.greeted()
        sid = str(uuid.uuid4())
        holder.send(m.Open(id=1, session=sid, cwd=CWD, lease=True))
        (opened,) = await holder.wait_answers(1)
        assert isinstance(opened, m.Opened)
        other.send(m.Open(id=1, session=sid, cwd=CWD, lease=True))
        (busy,) = await other.wait_answers(1)
        assert isinstance(busy, m.Error) and busy.code == SESSION_BUSY
        holder.transport.hang_up()
        assert sid not in holder.conn.sessions and sid not in d.daemon.leases.held
        other.send(m.Open(id=2, session=sid, cwd=CWD, lease=True))
        _, taken = await other.wait_answers(2)
        assert isinstance(taken, m.Opened) and taken.id == 2


async def test_a_half_closed_peer_gets_every_answer_it_is_owed_then_the_connection_closes(tmp_path):
    async with in_process(tmp_path) as d:
        peer = await d.greeted()
        sid = str(uuid.uuid4())
        peer.send(*(m.Append(id=i, session=sid, cwd=CWD, entries=[entry(f"e{i}")], durability="durable") for i in range(10)))
        peer.transport.shut_write()
        assert peer.conn.read_eof and not peer.transport.closed  # answers are owed: still open
        await until(lambda: peer.transport.lost)
        assert sorted(a.id for a in peer.answers()) == list(range(10))
        assert all(isinstance(a, m.Appended) for a in peer.answers()) and not peer.transport.aborted
        lines = d.transcript(sid).read_bytes().splitlines()
        assert [json.loads(line)["message"]["content"] for line in lines] == [f"e{i}" for i in range(10)]
