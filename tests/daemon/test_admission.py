"""The one admission step of Append and Record, in process: the daemon's own
objects (a ``Daemon`` on a loop that is not run, real files under a temp
root, real ``Connection`` objects that never got a socket) and the step
itself, ``handlers.append.admit``. Both request types go through it and come
out as the same ``Batch``, or are refused by it the same way before anything
is attached."""

from __future__ import annotations

import asyncio
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from sessiond.config import Settings
from sessiond.daemon.connection import Connection
from sessiond.daemon.handlers.append import admit
from sessiond.daemon.routing import Batch
from sessiond.daemon.server import Daemon
from sessiond.wire import messages as m
from sessiond.wire.errors import SESSION_BUSY, SHUTTING_DOWN, SessiondError

CWD = "/work/project"


def line(kind: str, **fields: object) -> bytes:
    obj: dict = {"type": kind, "uuid": str(uuidlib.uuid4()), **fields}
    if kind in ("user", "assistant"):
        obj["message"] = {"role": kind, "content": "x"}
    return msgspec.json.encode(obj)


@pytest.fixture
def daemon(short_tmp: Path) -> Iterator[Daemon]:
    loop = asyncio.new_event_loop()
    d = Daemon(Settings(root=short_tmp / "root", socket=short_tmp / "s.sock", search_index=False), loop)
    try:
        yield d
    finally:
        d.writer.drain_everything()
        d.writer.close()
        d.follower.close()
        d.reads.shutdown(wait=True)
        loop.close()


def request(kind: str, sid: str, entries: list[bytes], **extra: object) -> m.Append | m.Record:
    if kind == "append":
        return m.Append(id=1, session=sid, cwd=CWD, entries=entries, **extra)
    return m.Record(id=1, session=sid, cwd=CWD, messages=entries, **extra)


def entries_of(req: m.Append | m.Record) -> list[bytes]:
    return req.entries if isinstance(req, m.Append) else req.messages


@pytest.mark.parametrize("kind", ["append", "record"])
def test_append_and_record_admit_the_same_batch(daemon, kind):
    conn = Connection(daemon)
    sid = str(uuidlib.uuid4())
    lines = [line("user"), line("assistant")]
    req = request(kind, sid, lines, agent="a1", run="r1", resend=True)
    batch = admit(conn, req, entries_of(req))
    assert isinstance(batch, Batch)
    assert batch.state is daemon.registry.sessions[sid]
    assert batch.lines == lines and [h.type for h in batch.headers] == ["user", "assistant"]
    assert (batch.agent, batch.run, batch.resend) == ("a1", "r1", True)
    assert conn.sessions == {sid: batch.state}  # attached by the step


@pytest.mark.parametrize("kind", ["append", "record"])
def test_one_bad_entry_refuses_the_batch_before_anything_is_attached(daemon, kind):
    conn = Connection(daemon)
    req = request(kind, str(uuidlib.uuid4()), [line("user"), b"{not json"])
    with pytest.raises(SessiondError):
        admit(conn, req, entries_of(req))
    assert conn.sessions == {}


@pytest.mark.parametrize("kind", ["append", "record"])
def test_a_stopping_daemon_admits_nothing(daemon, kind):
    daemon.stopping = True
    req = request(kind, str(uuidlib.uuid4()), [line("user")])
    with pytest.raises(SessiondError) as err:
        admit(Connection(daemon), req, entries_of(req))
    assert err.value.code == SHUTTING_DOWN
    assert daemon.registry.sessions == {}


@pytest.mark.parametrize("kind", ["append", "record"])
def test_another_clients_lease_refuses_chain_entries_not_metadata(daemon, kind):
    holder, other = Connection(daemon), Connection(daemon)
    sid = str(uuidlib.uuid4())
    first = request(kind, sid, [line("user")], lease=True)
    assert admit(holder, first, entries_of(first)) is not None
    chain = request(kind, sid, [line("assistant")])
    with pytest.raises(SessiondError) as err:
        admit(other, chain, entries_of(chain))
    assert err.value.code == SESSION_BUSY
    assert sid not in other.sessions
    title = request("append", sid, [line("custom-title", customTitle="t")])
    assert admit(other, title, entries_of(title)) is not None  # metadata is no chain entry
