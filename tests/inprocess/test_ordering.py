"""Pipelined requests: the order of acks and of bytes, and request ids reused."""

from __future__ import annotations

import json
import uuid

import pytest

from sessiond.wire import messages as m
from sessiond.wire.errors import BAD_REQUEST
from sessiond.wire.framing import FrameBuffer, decode_response

from .conftest import CWD, entry, in_process, until

pytestmark = pytest.mark.anyio


def uuids(path) -> list[str]:
    return [json.loads(line)["uuid"] for line in path.read_bytes().splitlines()] if path.exists() else []


async def test_written_acks_come_after_their_bytes_in_request_order_and_batched(tmp_path):
    """Fifty ``written`` appends to three sessions, pipelined in one read:
    when the write carrying an ack is made, the acknowledged entry is in its
    file; each session's acks keep the order asked, each file the order sent;
    and the acks go out batched (a write per session's drain at most, never
    one per ack)."""
    async with in_process(tmp_path) as d:
        peer = await d.greeted()
        peer.transport.writes.clear()
        sessions = [str(uuid.uuid4()) for _ in range(3)]
        sent: dict[str, list[str]] = {sid: [] for sid in sessions}
        of_request: dict[int, tuple[str, str]] = {}
        requests = []
        for i in range(50):
            sid, uid = sessions[i % 3], str(uuid.uuid4())
            sent[sid].append(uid)
            of_request[100 + i] = sid, uid
            requests.append(m.Append(id=100 + i, session=sid, cwd=CWD, entries=[entry(f"n{i}", uid=uid)], durability="written"))
        early: list[int] = []

        def check(data: bytes) -> None:
            for ack in map(decode_response, FrameBuffer(1 << 20).feed(data)):
                sid, uid = of_request[ack.id]
                if uid not in uuids(d.transcript(sid)):
                    early.append(ack.id)

        peer.transport.on_write = check
        peer.send(*requests)
        acks = await peer.wait_answers(50)
        assert early == []
        assert sorted((a.id, type(a), a.accepted) for a in acks) == [(100 + i, m.Appended, 1) for i in range(50)]
        for sid in sessions:
            assert [a.id for a in acks if of_request[a.id][0] == sid] == sorted(i for i, (s, _) in of_request.items() if s == sid)
            assert uuids(d.transcript(sid)) == sent[sid]
        assert len(peer.transport.writes) <= len(sessions)


async def test_each_durability_is_acknowledged_in_request_order(tmp_path):
    """Mixed durabilities on one session: a ``queued`` ack may pass a
    ``durable`` one (it waits for nothing), but within each durability the
    acks keep the request order, and the file keeps the order sent."""
    async with in_process(tmp_path) as d:
        peer = await d.greeted()
        sid = str(uuid.uuid4())
        kinds = ["queued", "written", "durable"]
        sent, requests = [], []
        for i in range(30):
            uid = str(uuid.uuid4())
            sent.append(uid)
            requests.append(m.Append(id=i, session=sid, cwd=CWD, entries=[entry(uid=uid)], durability=kinds[i % 3]))  # type: ignore[arg-type]
        peer.send(*requests)
        acks = await peer.wait_answers(30)
        assert sorted(a.id for a in acks) == list(range(30)) and all(isinstance(a, m.Appended) for a in acks)
        for k, kind in enumerate(kinds):
            assert [a.id for a in acks if a.id % 3 == k] == list(range(k, 30, 3)), kind
        await until(lambda: d.transcript(sid).exists() and len(uuids(d.transcript(sid))) == 30)
        assert uuids(d.transcript(sid)) == sent


async def test_an_id_still_awaiting_its_answer_is_refused_and_the_first_request_stands(tmp_path):
    async with in_process(tmp_path) as d:
        peer = await d.greeted()
        sid = str(uuid.uuid4())
        first, second, third = (str(uuid.uuid4()) for _ in range(3))
        peer.send(m.Append(id=5, session=sid, cwd=CWD, entries=[entry(uid=first)], durability="durable"),
                  m.Append(id=5, session=sid, cwd=CWD, entries=[entry(uid=second)], durability="written"))
        refused, ack = await peer.wait_answers(2)
        assert isinstance(refused, m.Error) and (refused.id, refused.code) == (5, BAD_REQUEST)
        assert "still awaiting" in refused.message
        assert isinstance(ack, m.Appended) and (ack.id, ack.accepted) == (5, 1)
        # answered: the id is free again
        peer.send(m.Append(id=5, session=sid, cwd=CWD, entries=[entry(uid=third)], durability="written"))
        *_, again = await peer.wait_answers(3)
        assert isinstance(again, m.Appended) and (again.id, again.accepted) == (5, 1)
        assert uuids(d.transcript(sid)) == [first, third]
        assert peer.conn.budget_use()[1:3] == (0, 0)  # nothing owed, no bytes counted in flight


async def test_ids_answered_at_once_may_repeat_within_one_read(tmp_path):
    async with in_process(tmp_path) as d:
        peer = await d.greeted()
        peer.send(m.Status(id=1), m.Status(id=1), m.Status(id=1))
        answers = await peer.wait_answers(3)
        assert [(type(a), a.id) for a in answers] == [(m.StatusResult, 1)] * 3


def test_the_fake_transports_frames_decode_like_the_clients():
    """Guard for the harness: ``answers`` splits frames as a client does."""
    from sessiond.wire.framing import encode

    data = encode(m.Error(id=1, code="x", message="y")) + encode(m.Done(id=2))
    assert [type(decode_response(b)) for b in FrameBuffer(1 << 20).feed(data)] == [m.Error, m.Done]
