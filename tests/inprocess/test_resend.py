"""A resend's entries without a uuid: which were already written.

A client that lost its daemon sends a batch that may have reached it again,
marked ``resend``; an entry without a uuid is then dropped when the same line
is already near the end of its file. Claude Code writes some such lines byte
for byte at every API request (``atis-latch``, ``api-request-route``), so that
match alone cannot tell a line the lost daemon wrote from the same line of an
earlier request. But a daemon writes each file's lines of a batch in order:
what the lost one wrote of it is a prefix, so once a line of the batch is found
new, every line after it in that file is new too."""

from __future__ import annotations

import json
import uuid

import msgspec
import pytest

from sessiond.wire import messages as m
from tests.helpers import api_request_lines

from .conftest import CWD, entry, in_process

pytestmark = pytest.mark.anyio




async def append(peer, rid: int, sid: str, lines: list[bytes], *, resend: bool = False) -> m.Appended:
    peer.send(m.Append(id=rid, session=sid, cwd=CWD, entries=lines, durability="written", resend=resend))
    answer = (await peer.wait_answers(rid))[-1]
    assert isinstance(answer, m.Appended), answer
    return answer


def lines_of(d, sid: str) -> list[bytes]:
    return d.transcript(sid).read_bytes().splitlines()


async def test_a_resent_batch_whose_first_line_is_new_is_written_whole(tmp_path):
    """The batch the lost daemon never wrote: its first line is in no tail, so
    the two lines after it, byte for byte those of the request before, are
    written too (a test of the tail alone dropped them as already written)."""
    async with in_process(tmp_path) as d:
        peer = await d.greeted()
        sid = str(uuid.uuid4())
        first, second = str(uuid.uuid4()), str(uuid.uuid4())
        await append(peer, 1, sid, [entry("one", uid=first), *api_request_lines(sid, first)])
        await append(peer, 2, sid, [entry("two", uid=second)])
        resent = await append(peer, 3, sid, api_request_lines(sid, second), resend=True)
        assert (resent.accepted, resent.duplicates) == (3, 0)
        kinds = [json.loads(line)["type"] for line in lines_of(d, sid)]
        assert kinds.count("atis-latch") == kinds.count("api-request-route") == 2


async def test_a_resent_batch_after_a_new_uuid_is_written_whole(tmp_path):
    """The same when the batch starts with an entry whose uuid the file lacks."""
    async with in_process(tmp_path) as d:
        peer = await d.greeted()
        sid = str(uuid.uuid4())
        first, second = str(uuid.uuid4()), str(uuid.uuid4())
        await append(peer, 1, sid, [entry("one", uid=first), *api_request_lines(sid, first)[1:]])
        resent = await append(peer, 2, sid, [entry("two", uid=second), *api_request_lines(sid, first)[1:]], resend=True)
        assert (resent.accepted, resent.duplicates) == (3, 0)
        kinds = [json.loads(line)["type"] for line in lines_of(d, sid)]
        assert kinds.count("atis-latch") == kinds.count("api-request-route") == 2


async def test_a_resent_batch_the_lost_daemon_wrote_is_not_written_twice(tmp_path):
    """The batch written whole before the daemon was lost: every line of it,
    with a uuid or not, is already there and none is written again."""
    async with in_process(tmp_path) as d:
        peer = await d.greeted()
        sid = str(uuid.uuid4())
        first = str(uuid.uuid4())
        batch = [entry("one", uid=first), *api_request_lines(sid, first)]
        await append(peer, 1, sid, batch)
        before = lines_of(d, sid)
        resent = await append(peer, 2, sid, batch, resend=True)
        assert (resent.accepted, resent.duplicates) == (0, 4)
        assert lines_of(d, sid) == before


async def test_a_first_send_never_drops_a_line_without_a_uuid(tmp_path):
    """Only a resend is compared with the tail: the same lines sent as a first
    send are all written."""
    async with in_process(tmp_path) as d:
        peer = await d.greeted()
        sid = str(uuid.uuid4())
        first = str(uuid.uuid4())
        await append(peer, 1, sid, [entry("one", uid=first), *api_request_lines(sid, first)])
        again = await append(peer, 2, sid, api_request_lines(sid, first))
        assert (again.accepted, again.duplicates) == (3, 0)


async def test_the_rule_is_per_file(tmp_path):
    """A new line of the batch in a subagent's file says nothing of the main
    transcript's lines: a repeated main-file line after it is still taken for
    one the lost daemon wrote."""
    async with in_process(tmp_path) as d:
        peer = await d.greeted()
        sid = str(uuid.uuid4())
        first = str(uuid.uuid4())
        await append(peer, 1, sid, [entry("one", uid=first), *api_request_lines(sid, first)])
        sidechain = msgspec.json.encode({"type": "assistant", "uuid": str(uuid.uuid4()), "isSidechain": True,
                                         "agentId": "ag1", "message": {"role": "assistant", "content": "sub"}})
        resent = await append(peer, 2, sid, [sidechain, api_request_lines(sid, first)[1]], resend=True)
        assert (resent.accepted, resent.duplicates) == (1, 1)
        kinds = [json.loads(line)["type"] for line in lines_of(d, sid)]
        assert kinds.count("atis-latch") == 1
