"""One output budget per connection, whatever fills it: answers to pipelined
Lists, frames pushed to a watcher; and searches as a connection's share of the
read pool. Each against a real daemon under a memory bound (``bounded``)."""

from __future__ import annotations

import socket
import uuid

from sessiond.wire import messages as m
from sessiond.wire.framing import FrameBuffer, decode_response, encode
from tests.helpers import line, main_path, user, wait_until

from .attacks import read_answers
from .conftest import BUDGETS, CWD, Bounded
from .test_fairness import Raw, started_with_transcripts, write_transcript

LISTED = 2000
"""Sessions a List answers: each answer ~1.4 MB, past the 1 MiB output budget."""


def stalled_socket(path) -> socket.socket:
    """A connection that reads nothing (its receive buffer as small as it goes)."""
    s = socket.socket(socket.AF_UNIX)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(30)
    s.connect(str(path))
    s.sendall(encode(m.Hello(id=0, protocol_version=m.PROTOCOL_VERSION, client="stalled")))
    return s


def test_a_watcher_that_never_reads_stays_inside_its_connections_output_budget(bounded: Bounded):
    """48 MB written past a watcher that reads nothing: the daemon holds at
    most the output budget for it (status and peak RSS), and once it reads it
    gets every byte, in order, none skipped."""
    d = bounded.d
    sid = str(uuid.uuid4())
    with d.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(user("first"))], durability="written"))
    path = main_path(d.root, CWD, sid)
    watcher = stalled_socket(d.socket)
    try:
        start = path.stat().st_size
        watcher.sendall(encode(m.Subscribe(id=1, session=sid, cwd=CWD)))
        pad = "w" * 10_000
        with d.client() as c:
            for i in range(48):  # ~1 MB per append: every one bigger than the whole budget
                c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written",
                                entries=[line(user(f"{i}-{k} {pad}")) for k in range(100)]))
            assert c.status().watchers == 1
        st = bounded.check()
        out = st.budgets["outputBytes"]
        assert out["total"] <= out["limit"] == BUDGETS["max_output_bytes"], out
        end = path.stat().st_size
        frames = FrameBuffer(1 << 30)
        position = start
        watcher.settimeout(60)
        while position < end:  # a guard on each read is the socket's timeout
            for body in frames.feed(watcher.recv(1 << 20)):
                resp = decode_response(body)
                if isinstance(resp, m.Entries):
                    assert resp.offset == position and not resp.reset
                    position += sum(len(x) + 1 for x in resp.lines)
        assert position == end
    finally:
        watcher.close()


def test_pipelined_lists_that_are_not_read_hold_one_answer_past_the_budget(bounded: Bounded):
    """Sixteen Lists sent at once, nothing read: once one answer fills the
    connection's output budget, its other Lists wait for a read-pool thread
    (held) instead of being made and buffered; reading, it gets them all."""
    d = bounded.d
    for _ in range(LISTED):
        write_transcript(d.root, "/work/listed", 2000)
    s = stalled_socket(d.socket)
    try:
        s.sendall(b"".join(encode(m.List(id=i, all=True)) for i in range(1, 17)))

        def settled() -> bool:
            st = bounded.status()
            return st.workers["jobsRunning"] == 0 and st.budgets["outputBytes"]["used"] > 0

        wait_until(settled, "an answer made and nothing being made", timeout=60)
        st = bounded.check()
        answer = st.budgets["outputBytes"]["used"]
        assert st.workers["jobsWaiting"] >= 8 and st.workers["heldOwners"] == 1, st.workers  # waiting for a read
        assert answer <= BUDGETS["max_output_bytes"] + 2 * LISTED * 1000, st.budgets["outputBytes"]
        s.settimeout(60)
        answers = read_answers(s, 17)  # Welcome and the sixteen
        listed = [a for a in answers if isinstance(a, m.Listed)]
        assert len(listed) == 16 and all(len(a.sessions) in (LISTED, LISTED + 1) for a in listed)
        assert len(listed[-1].sessions) == LISTED + 1  # made after check()'s appends: the kept answer was patched
        assert bounded.status().workers["heldOwners"] == 0
    finally:
        s.close()


def test_a_search_flood_is_one_connections_share_of_the_read_pool(daemon_factory, short_tmp):
    """Searches run as their connection's share: one running, at most
    ``max_expensive_waiting`` waiting, the rest refused ``busy`` at once, and
    another client's durable append is served meanwhile."""
    d = started_with_transcripts(daemon_factory, short_tmp, 300, 4000, read_threads=1, max_expensive_waiting=2)
    flood = Raw(d.socket)
    try:
        def caught_up() -> bool:
            flood.answers.clear()
            flood.send([m.Search(id=1, query="y*", all=True, limit=1)])
            (answer,) = flood.wait(1)
            return isinstance(answer, m.Searched) and answer.caughtUp and bool(answer.hits)

        wait_until(caught_up, "the index to hold the transcripts", timeout=60, every=0.2)
        flood.answers.clear()
        flood.send([m.Search(id=i, query="y*", all=True, limit=1000) for i in range(10, 50)])
        with d.client() as other:
            other.call(m.Append(id=other.next_id(), session=str(uuid.uuid4()), cwd="/work/other",
                                entries=[line(user("hi"))], durability="durable"))
        answers = flood.wait(40)
        busy = [a for a in answers if isinstance(a, m.Error)]
        found = [a for a in answers if isinstance(a, m.Searched)]
        assert busy and {a.code for a in busy} == {"busy"}, answers[:3]
        assert len(found) + len(busy) == 40 and len(found) >= 3
        with d.client() as other:
            assert other.status().workers["busyRefused"] == len(busy)
    finally:
        flood.close()
