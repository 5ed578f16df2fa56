"""The first frame and bad frames: what a connection answers, and whether it stays open."""

from __future__ import annotations

import os
import uuid

import msgspec
import pytest

from sessiond.wire import messages as m
from sessiond.wire.errors import BAD_REQUEST, TOO_LARGE, VERSION_MISMATCH
from sessiond.wire.framing import HEADER

from .conftest import CWD, entry, in_process, until

pytestmark = pytest.mark.anyio


async def test_hello_is_welcomed_with_what_the_client_must_know(tmp_path):
    async with in_process(tmp_path, max_frame=1 << 20) as d:
        peer = d.connect()
        peer.send(m.Hello(id=7, protocol_version=m.PROTOCOL_VERSION, client="probe", pid=42))
        (welcome,) = await peer.wait_answers(1)
        assert isinstance(welcome, m.Welcome)
        assert (welcome.id, welcome.protocol_version, welcome.max_frame_bytes) == (7, m.PROTOCOL_VERSION, 1 << 20)
        assert welcome.root == os.path.abspath(d.root) and welcome.pid == os.getpid()
        assert peer.conn.greeted and (peer.conn.pid, peer.conn.client_name) == (42, "probe")
        assert peer.conn in d.daemon.connections and not peer.transport.closed


async def test_another_protocol_version_is_refused_and_nothing_after_it_is_served(tmp_path):
    async with in_process(tmp_path) as d:
        peer = d.connect()
        sid = str(uuid.uuid4())
        peer.send(m.Hello(id=1, protocol_version=m.PROTOCOL_VERSION + 1),
                  m.Append(id=2, session=sid, cwd=CWD, entries=[entry()]))
        await until(lambda: peer.transport.lost)
        (err,) = peer.answers()
        assert isinstance(err, m.Error) and (err.id, err.code) == (1, VERSION_MISMATCH)
        assert not peer.conn.greeted and sid not in d.daemon.registry.sessions
        assert peer.conn not in d.daemon.connections


async def test_a_first_frame_that_is_not_hello_is_refused(tmp_path):
    async with in_process(tmp_path) as d:
        peer = d.connect()
        peer.send(m.Status(id=3))
        await until(lambda: peer.transport.lost)
        (err,) = peer.answers()
        assert isinstance(err, m.Error) and (err.id, err.code) == (3, BAD_REQUEST)
        assert "Hello" in err.message


async def test_an_undecodable_hello_is_answered_and_the_connection_may_try_again(tmp_path):
    async with in_process(tmp_path) as d:
        peer = d.connect()
        bad = msgspec.msgpack.encode({"op": "Hello", "id": 5, "protocol_version": "one"})
        peer.send(HEADER.pack(len(bad)) + bad)
        await peer.wait_answers(1)
        peer.send(m.Hello(id=6, protocol_version=m.PROTOCOL_VERSION))
        err, welcome = await peer.wait_answers(2)
        assert isinstance(err, m.Error) and (err.id, err.code) == (5, BAD_REQUEST) and "protocol_version" in err.message
        assert isinstance(welcome, m.Welcome) and welcome.id == 6


async def test_an_announced_length_over_max_frame_is_refused_before_its_body_and_closes(tmp_path):
    async with in_process(tmp_path, max_frame=4096) as d:
        peer = await d.greeted()
        peer.send(HEADER.pack(4097) + b"\x00" * 10)  # the body need not come: the header decides
        await until(lambda: peer.transport.lost)
        (err,) = peer.answers()
        assert isinstance(err, m.Error) and (err.id, err.code) == (0, TOO_LARGE)
        assert peer.conn.frames.pending == 0 and d.daemon.bounds.partial_bytes == 0


@pytest.mark.parametrize("body, rid, says", [
    (msgspec.msgpack.encode({"op": "NoSuchOp", "id": 11}), 11, "NoSuchOp"),  # unknown tag
    (msgspec.msgpack.encode({"op": "Append", "id": 12, "session": 3}), 12, "session"),  # a field of the wrong type
    (msgspec.msgpack.encode([1, 2, 3]), 0, ""),  # not a map: no id to echo
    (b"\xc1", 0, ""),  # not msgpack at all (0xc1 is never used)
])
async def test_a_bad_frame_gets_an_error_with_its_id_and_the_connection_goes_on(tmp_path, body, rid, says):
    async with in_process(tmp_path) as d:
        peer = await d.greeted()
        sid = str(uuid.uuid4())
        peer.send(HEADER.pack(len(body)) + body, m.Append(id=13, session=sid, cwd=CWD, entries=[entry()], durability="written"))
        err, ack = await peer.wait_answers(2)
        assert isinstance(err, m.Error) and (err.id, err.code) == (rid, BAD_REQUEST) and says in err.message
        assert isinstance(ack, m.Appended) and (ack.id, ack.accepted) == (13, 1)
        assert not peer.transport.closed
        assert d.transcript(sid).read_bytes().count(b"\n") == 1
