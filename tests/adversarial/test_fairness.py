"""Fairness: one client's flood of expensive requests (List, resend tail reads,
scans of existing transcripts) gets its share of the read pool and no more.

Against a real daemon: a flood beyond a connection's bound is refused ``busy``
(and the flooder's other answers are whole); another client's expensive request
is served next, not after the flood's backlog; the resend tail reads moved off
the loop keep the order and the dedup of a session's requests."""

from __future__ import annotations

import json
import select
import socket
import time
import uuid
from pathlib import Path

from sessiond.store.paths import project_dir, session_file
from sessiond.wire import messages as m
from sessiond.wire.framing import FrameBuffer, decode_response, encode
from tests.helpers import line, main_path, read_entries, user, wait_until

from .conftest import read_pool_held

CWD = "/work/fair"
TIMEOUT = 60.0


class Raw:
    """A pipelining client on a plain socket: requests go out in one write, so
    the daemon takes them in one read (nothing is answered in between)."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect(str(path))
        self.frames = FrameBuffer(1 << 30)
        self.answers: list[m.Response] = []
        self.send([m.Hello(id=0, protocol_version=m.PROTOCOL_VERSION, client="test")])
        assert isinstance(self.wait(1)[0], m.Welcome)
        self.answers.clear()

    def send(self, reqs: list[m.Request]) -> None:
        self.sock.sendall(b"".join(encode(r) for r in reqs))

    def read_some(self) -> None:
        data = self.sock.recv(1 << 22)
        assert data, "the daemon closed the connection"
        self.answers += [decode_response(b) for b in self.frames.feed(data)]

    def wait(self, n: int) -> list[m.Response]:
        deadline = time.monotonic() + TIMEOUT
        while len(self.answers) < n:
            if time.monotonic() > deadline:  # a guard against a hang, not a timing check
                raise TimeoutError(f"{len(self.answers)} of {n} answers")
            self.read_some()
        return self.answers

    def close(self) -> None:
        self.sock.close()


def expensive_jobs(d) -> int:
    """Clients' read-pool jobs waiting or running, from ``status``."""
    with d.client() as c:
        budgets = c.status().budgets
    assert budgets is not None
    return budgets["expensiveJobs"]["used"]


def config(tmp: Path, **keys) -> Path:
    path = tmp / "fair.toml"
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items()))
    return path


def write_transcript(root: Path, cwd: str, size: int) -> str:
    """An existing transcript of about ``size`` bytes; its session id."""
    sid = str(uuid.uuid4())
    path = session_file(project_dir(root, cwd), sid)
    path.parent.mkdir(parents=True, exist_ok=True)
    filler = "y" * 900
    with open(path, "wb") as f:
        for _ in range(max(1, size // 1000)):
            f.write(line(user(filler)) + b"\n")
    return sid


def started_with_transcripts(daemon_factory, tmp: Path, count: int, size: int, **keys):
    """A daemon with ``keys`` in its config, started over ``count`` existing
    transcripts of ``size`` bytes in ``CWD``."""
    d = daemon_factory("--config", str(config(tmp, **keys)))
    for _ in range(count):
        write_transcript(d.root, CWD, size)
    return d.start()


def test_a_connection_past_its_share_gets_busy_and_the_others_are_served(daemon_factory, short_tmp):
    d = started_with_transcripts(daemon_factory, short_tmp, 200, 2000, read_threads=1, max_expensive_waiting=3)
    flood = Raw(d.socket)
    try:
        flood.send([m.List(id=i, all=True) for i in range(1, 41)])
        with d.client() as other:  # another client is answered meanwhile
            other.call(m.Append(id=other.next_id(), session=str(uuid.uuid4()), cwd="/work/other", entries=[line(user("hi"))],
                                durability="durable"))
            status = other.status()
            assert status.workers is not None and status.workers["readThreads"] == 1
        answers = flood.wait(40)
        busy = [a for a in answers if isinstance(a, m.Error)]
        listed = [a for a in answers if isinstance(a, m.Listed)]
        assert busy and {a.code for a in busy} == {"busy"}
        assert len(busy) + len(listed) == 40 and len(listed) >= 4  # one running + three waiting, at least
        assert all(len(a.sessions) in (200, 201) for a in listed)  # 201: with the other client's session
        with d.client() as other:
            assert other.status().workers["busyRefused"] == len(busy)
    finally:
        flood.close()


def test_another_clients_scan_is_served_before_the_flood_backlog(daemon_factory, short_tmp):
    """A floods the read pool with scans of big existing transcripts; B's
    scan, asked once A's are all queued, is served right after the one in
    flight, not after all of A's (one read thread: the order is the pool's).
    The pool is held busy while both ask (``read_pool_held``), so how many of
    A's scans finish before B asks does not depend on the machine's speed."""
    d = daemon_factory("--config", str(config(short_tmp, read_threads=1)))
    flood_ids = [write_transcript(d.root, "/work/flood", 5 << 20) for _ in range(12)]
    victim_id = write_transcript(d.root, CWD, 5 << 20)
    d.start()
    a, b = Raw(d.socket), Raw(d.socket)
    try:
        with read_pool_held(d):
            a.send([m.Open(id=i + 1, session=sid, cwd="/work/flood") for i, sid in enumerate(flood_ids)]
                   + [m.Status(id=100)])
            a.wait(1)  # Status, answered at once: every Open before it is dispatched and its scan queued
            assert isinstance(a.answers[0], m.StatusResult)
            b.send([m.Open(id=1, session=victim_id, cwd=CWD)])
            wait_until(lambda: expensive_jobs(d) == len(flood_ids) + 1, "B's scan to be queued", timeout=TIMEOUT)
        # The pool runs again: the scan of A's it was handed, then B's, then A's others.
        deadline = time.monotonic() + TIMEOUT
        while not b.answers:
            if time.monotonic() > deadline:  # a guard against a hang, not a timing check
                raise TimeoutError("the victim's Open was never answered")
            ready, _, _ = select.select([a.sock, b.sock], [], [], 1.0)
            if b.sock in ready:  # first: an answer of A's read with B's is not counted as before it
                b.read_some()
            elif a.sock in ready:
                a.read_some()
        assert isinstance(b.answers[0], m.Opened) and b.answers[0].materialized
        opened_before = sum(isinstance(x, m.Opened) for x in a.answers)
        assert opened_before <= 1, f"B waited behind {opened_before} of A's scans"
        a.wait(1 + len(flood_ids))
        assert all(isinstance(x, m.Opened) for x in a.answers[1:])
    finally:
        a.close()
        b.close()


def test_resends_read_off_the_loop_keep_order_and_dedup(daemon_factory, short_tmp):
    """A resend's tail read runs in the read pool; meanwhile the session's
    later requests wait: a pipelined resend, then a plain append, then a Flush
    land in that order, and a line already in the tail is still dropped."""
    d = daemon_factory("--config", str(config(short_tmp, read_threads=1))).start()
    sid = str(uuid.uuid4())
    summary = line({"type": "summary", "summary": "kept once", "leafUuid": None})
    first = user("first")
    with d.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(first), summary], durability="written"))
    pad = [line(user("x" * 2000)) for _ in range(600)]  # the tail window is 1 MiB: the summary is 1.2 MB back
    recent = line({"type": "summary", "summary": "recent", "leafUuid": None})
    with d.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[*pad, recent], durability="written"))
    again = line({"type": "summary", "summary": "new", "leafUuid": None})
    later = user("after the resends")
    raw = Raw(d.socket)
    try:
        raw.send([
            m.Append(id=1, session=sid, cwd=CWD, entries=[recent], resend=True),  # in the tail: dropped
            m.Append(id=2, session=sid, cwd=CWD, entries=[summary, again], resend=True),  # out of the window: kept
            m.Append(id=3, session=sid, cwd=CWD, entries=[again], resend=True),  # just queued: dropped
            m.Append(id=4, session=sid, cwd=CWD, entries=[line(later)]),
            m.Flush(id=5, session=sid),
        ])
        answers = {a.id: a for a in raw.wait(5)}
    finally:
        raw.close()
    assert (answers[1].accepted, answers[1].duplicates) == (0, 1)
    assert (answers[2].accepted, answers[2].duplicates) == (2, 0)
    assert (answers[3].accepted, answers[3].duplicates) == (0, 1)
    assert isinstance(answers[5], m.Flushed)
    entries = read_entries(main_path(d.root, CWD, sid))  # the Flush answered: all of it is written
    kinds = [e.get("summary") or e["message"]["content"][:5] for e in entries]
    assert kinds == ["first", "kept once", *["xxxxx"] * 600, "recent", "kept once", "new", "after"]
