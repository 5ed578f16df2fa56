"""What a client makes the daemon keep by naming things: its own name (kept
with every lease it takes, and in the lease table a restart reads back), an
agent's meta file (decoded to be checked, then written), agent files (each
one new to the daemon prepared on the loop and created on its file thread) and
a session's titles, tags and the rest of its metadata (the current value of
each kind kept for the re-append at exit). A raw client sends
the longest and heaviest values a frame carries over the real socket; the
daemon answers a typed error or bounds the cost, and every other client's
state (a lease, a durable append) is kept."""

from __future__ import annotations

import os
import socket
import uuid

import pytest

from sessiond.daemon.routing import MAX_BATCH_AGENTS
from sessiond.wire import messages as m
from sessiond.wire.framing import FrameBuffer, encode
from tests.helpers import line, main_path, read_entries, user

from .attacks import MiB, raw_conn, read_answers
from .conftest import BUDGETS, CWD, Bounded


def _named_lease(sock_path, name: str) -> tuple[socket.socket, m.Response]:
    """Hello as ``name``, and when welcomed, take a session's lease under that
    name: the connection (still holding it) and the answer to the Hello."""
    s = raw_conn(sock_path, hello=False)
    s.sendall(encode(m.Hello(id=1, protocol_version=m.PROTOCOL_VERSION, client=name, pid=os.getpid())))
    answer = read_answers(s, 1)[0]
    if isinstance(answer, m.Welcome):
        s.sendall(encode(m.Append(id=2, session=str(uuid.uuid4()), cwd=CWD, entries=[line(user("named"))],
                                  lease=True, durability="durable")))
        assert isinstance(read_answers(s, 1)[0], m.Appended)
    return s, answer


@pytest.mark.parametrize("length", [m.MAX_CLIENT_NAME + 1, 9 * MiB])
def test_a_client_name_past_the_bound_is_refused_and_leases_survive_a_restart(daemon_factory, length: int) -> None:
    """The lease table keeps each holder's name, and a restarted daemon sets
    aside a table past its cap whole: a client named with megabytes would cost
    every other client its lease. Such a name is refused at the handshake."""
    d = daemon_factory().start()
    kept = str(uuid.uuid4())
    with d.client(name="keeper") as c:
        c.call(m.Append(id=c.next_id(), session=kept, cwd=CWD, entries=[line(user("held"))], lease=True,
                        durability="durable"))
        named, answer = _named_lease(d.socket, "n" * length)
        with named:  # its lease is held when the daemon stops
            d.stop()
        d.start()
        with d.client() as other:
            st = other.status()
        assert st.stateFiles == []
        assert (kept, "keeper") in [(h.session, h.client) for h in st.live]
    assert isinstance(answer, m.Error) and answer.code == "bad_request" and "$.client" in answer.message, answer
    named, answer = _named_lease(d.socket, "n" * m.MAX_CLIENT_NAME)
    named.close()
    assert isinstance(answer, m.Welcome)


def _arrays(size: int) -> bytes:
    """A JSON object of about ``size`` bytes of empty arrays: each a Python
    object some fifty times its two bytes, were it decoded."""
    return b'{"a":[' + b"[]," * ((size - 16) // 3) + b'[]]}'


def test_agent_meta_past_the_bound_is_refused_and_one_within_it_is_not_built(bounded: Bounded) -> None:
    """An agent's meta file is a few fields: one of most of a frame is refused
    from its header, before anything of it is decoded; one at the bound is
    checked and written byte for byte without being built, however heavy."""
    sid = str(uuid.uuid4())
    s = raw_conn(bounded.d.socket, timeout=60)
    try:
        s.sendall(encode(m.SetAgentMeta(id=1, session=sid, cwd=CWD, agent="big", meta=_arrays(3 * MiB))))
        refused = read_answers(s, 1)[0]
        assert isinstance(refused, m.Error) and refused.code == "bad_request" and "$.meta" in refused.message, refused
        heavy = _arrays(m.MAX_AGENT_META)
        assert len(heavy) <= m.MAX_AGENT_META
        for rid in range(2, 6):  # a few in a row: each one's cost is paid and let go
            s.sendall(encode(m.SetAgentMeta(id=rid, session=sid, cwd=CWD, agent=f"heavy{rid}", meta=heavy)))
            assert isinstance(read_answers(s, 1)[0], m.Done)
    finally:
        s.close()
    written = bounded.d.root / "projects" / "-work-adversary" / sid / "subagents" / "agent-heavy2.meta.json"
    assert written.read_bytes() == heavy
    bounded.check()


def test_a_batch_routed_to_more_agent_files_than_the_bound_is_too_large(shared_bounded: Bounded) -> None:
    """One batch naming more agent files than the bound is refused whole
    (nothing of it accepted, no file made), and the connection goes on."""
    sid = str(uuid.uuid4())
    side = [line({"type": "assistant", "uuid": str(uuid.uuid4()), "isSidechain": True, "agentId": f"fan{i}",
                  "message": {"role": "assistant", "content": "x"}}) for i in range(MAX_BATCH_AGENTS + 1)]
    s = raw_conn(shared_bounded.d.socket, timeout=60)
    try:
        s.sendall(encode(m.Append(id=1, session=sid, cwd=CWD, entries=[line(user("first"))], durability="written"))
                  + encode(m.Append(id=2, session=sid, cwd=CWD, entries=side, durability="written"))
                  + encode(m.Append(id=3, session=sid, cwd=CWD, entries=side[:2], durability="written")))
        first, fan, after = sorted(read_answers(s, 3), key=lambda a: a.id)
    finally:
        s.close()
    assert isinstance(first, m.Appended) and isinstance(after, m.Appended) and after.accepted == 2, (first, after)
    assert isinstance(fan, m.Error) and fan.code == "too_large" and str(MAX_BATCH_AGENTS) in fan.message, fan
    subagents = shared_bounded.d.root / "projects" / "-work-adversary" / sid / "subagents"
    assert sorted(p.name for p in subagents.iterdir()) == ["agent-fan0.jsonl", "agent-fan1.jsonl"]
    shared_bounded.check()


METADATA_KINDS = ("last-prompt", "custom-title", "tag", "agent-name", "agent-color", "agent-setting", "mode",
                  "worktree-state", "pr-link")


def test_metadata_too_long_to_re_append_is_not_held(bounded: Bounded) -> None:
    """A session keeps the current line of each metadata kind to re-append at
    exit, only ever one a listing finds in a tail; a longer one is written and
    never re-appended, so it is not held either: sessions given megabytes of
    titles, tags and prompts cost the daemon nothing after their write, and an
    older short title (no longer current) is not re-appended in its place."""
    s = raw_conn(bounded.d.socket, timeout=60)
    sessions = [str(uuid.uuid4()) for _ in range(40)]
    try:
        for i, sid in enumerate(sessions):
            short = line({"type": "custom-title", "customTitle": "short", "sessionId": sid})
            huge = [line({"type": kind, "sessionId": sid, "v": kind + "x" * (MiB // 3)}) for kind in METADATA_KINDS]
            s.sendall(encode(m.Append(id=2 * i + 1, session=sid, cwd=CWD, entries=[line(user("hi")), short],
                                      durability="written"))
                      + encode(m.Append(id=2 * i + 2, session=sid, cwd=CWD, entries=huge, durability="written")))
            answers = read_answers(s, 2)
            assert all(isinstance(a, m.Appended) for a in answers), answers
        bounded.check()  # every session still attached, its huge metadata written
        s.sendall(b"".join(encode(m.Close(id=100 + i, session=sid)) for i, sid in enumerate(sessions)))
        assert all(isinstance(a, m.Done) for a in read_answers(s, len(sessions)))
    finally:
        s.close()
    for sid in sessions[:3]:
        written = [e["type"] for e in read_entries(main_path(bounded.d.root, CWD, sid))]
        assert written == ["user", "custom-title", *METADATA_KINDS], written


def test_the_error_quoting_a_name_of_most_of_a_frame_fits_a_frame(shared_bounded: Bounded) -> None:
    """A message quotes the value that was wrong (a session id, an agent id):
    a control character quotes as four, so the error about one of most of a
    frame would be an answer past the frame cap, which no client reads. It is
    a ``bad_request`` a client of this daemon's frame cap decodes."""
    name = "\x00" * MiB
    sid = str(uuid.uuid4())
    s = raw_conn(shared_bounded.d.socket, timeout=60)
    try:
        frames = FrameBuffer(BUDGETS["max_frame_bytes"])
        answers = []
        for req in (m.Open(id=1, session=name, cwd=CWD),
                    m.Append(id=2, session=sid, cwd=CWD, entries=[line(user("x"))], agent=name)):
            s.sendall(encode(req))
            answers += read_answers(s, 1, frames)
    finally:
        s.close()
    assert [(a.id, a.code) for a in answers if isinstance(a, m.Error)] == [(1, "bad_request"), (2, "bad_request")]
    assert all(len(a.message) <= m.MAX_ERROR_MESSAGE + 1 for a in answers if isinstance(a, m.Error))
    shared_bounded.check()


def test_uuids_past_the_bound_are_refused_and_a_files_are_not_held(bounded: Bounded) -> None:
    """Every uuid of a live session is kept for its dedup: entries with
    megabyte uuids (500 of 1 MB took half a gigabyte) are refused, naming the
    bound, and so is a ``Record`` hint as long; a file that already holds such
    entries (a foreign writer's) is adopted with its other uuids deduplicated,
    the long ones not held (no append can carry one to be told apart from it)."""
    d = bounded.d
    sid, adopted = str(uuid.uuid4()), str(uuid.uuid4())
    ok = {**user("at the bound"), "uuid": "u" * m.MAX_UUID}
    path = main_path(d.root, CWD, adopted)
    path.parent.mkdir(parents=True, exist_ok=True)
    long_ones = [{**user(f"long {i}"), "uuid": f"{i}" + "x" * MiB} for i in range(8)]
    short = user("short")
    path.write_bytes(b"".join(line(e) + b"\n" for e in [short, *long_ones]))
    s = raw_conn(d.socket, timeout=60)
    try:
        s.sendall(encode(m.Append(id=1, session=sid, cwd=CWD, entries=[line({**user("x"), "uuid": "u" * (m.MAX_UUID + 1)})]))
                  + encode(m.Append(id=2, session=sid, cwd=CWD, entries=[line(ok)], durability="written"))
                  + encode(m.Record(id=3, session=sid, cwd=CWD, messages=[line(user("y"))], parent="p" * (m.MAX_UUID + 1)))
                  + encode(m.Append(id=4, session=adopted, cwd=CWD, entries=[line(short), line(user("new"))],
                                    durability="written")))
        refused, accepted, hint, adopting = sorted(read_answers(s, 4), key=lambda a: a.id)
    finally:
        s.close()
    assert isinstance(refused, m.Error) and refused.code == "bad_request" and f"the {m.MAX_UUID}" in refused.message, refused
    assert isinstance(accepted, m.Appended) and accepted.accepted == 1, accepted
    assert isinstance(hint, m.Error) and hint.code == "bad_request" and "$.parent" in hint.message, hint
    assert isinstance(adopting, m.Appended) and (adopting.accepted, adopting.duplicates) == (1, 1), adopting
    assert [e["message"]["content"] for e in read_entries(path)][-1] == "new"
    with d.client() as c:
        mem = c.status().memory
    assert mem is not None and mem["uuids"] == 3, mem  # the one at the bound, and the adopted file's short and new
