"""Edge cases found in review: atomic batches, discarded buffers, compaction,
Close ordering, fd limits, stalled daemons."""

import os
import shutil
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

from sessiond.client import Client, Session
from sessiond.wire import messages as m
from sessiond.wire.errors import RemoteError
from sessiond.wire.framing import encode
from tests.conftest import DaemonProc
from tests.helpers import assistant, line, main_path, read_entries, user

CWD = "/work/project"


@pytest.fixture
def daemon(shared_daemon: DaemonProc) -> DaemonProc:
    """One daemon for the module: every test here writes sessions of its own
    and leaves the daemon as it found it (the one
    that stops the daemon has its own)."""
    return shared_daemon


def append(c, sid, entries, **kw):
    return c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(e) for e in entries], **kw))


def test_discarded_pending_entries_leave_no_trace(daemon):
    sid = str(uuid.uuid4())
    hook = {"type": "attachment", "uuid": str(uuid.uuid4()), "attachment": {"type": "hook"}}
    title = {"type": "custom-title", "customTitle": "never written"}
    with daemon.client() as c:
        append(c, sid, [hook, title])
        c.call(m.Close(id=c.next_id(), session=sid))  # no message: buffer dropped
        r = append(c, sid, [hook, user("now")], durability="written")
        assert (r.accepted, r.duplicates) == (2, 0)  # the resend is not a "duplicate"
        c.call(m.Close(id=c.next_id(), session=sid))
        c.flush()
    entries = read_entries(main_path(daemon.root, CWD, sid))
    assert [e["type"] for e in entries] == ["attachment", "user"]  # no stale title re-appended


def test_compaction_reappends_metadata_just_before_the_boundary(daemon):
    sid = str(uuid.uuid4())
    title = {"type": "custom-title", "customTitle": "Long one"}
    boundary = {"type": "system", "subtype": "compact_boundary", "uuid": str(uuid.uuid4()), "parentUuid": None}
    with daemon.client() as c:
        append(c, sid, [title, user("q"), *[assistant(f"a{i}") for i in range(5)], boundary], durability="written")
    entries = read_entries(main_path(daemon.root, CWD, sid))
    assert entries[-2:] == [title, boundary]


def test_close_answers_only_after_the_reappend_is_written(daemon_factory):
    d = daemon_factory("--flush-interval", "60000").start()
    sid = str(uuid.uuid4())
    title = {"type": "custom-title", "customTitle": "kept"}
    with d.client() as c:
        append(c, sid, [title, user("q")], durability="written")
        c.call(m.Close(id=c.next_id(), session=sid))
        d.kill()  # SIGKILL right after the Close answer
    entries = read_entries(main_path(d.root, CWD, sid))
    assert entries == [title, user("q") | {"uuid": entries[1]["uuid"]}, title]


def test_a_batch_that_cannot_be_routed_changes_nothing(daemon):
    sid = str(uuid.uuid4())
    blocked = main_path(daemon.root, CWD, sid).with_suffix("") / "subagents" / "agent-bad.jsonl"
    blocked.mkdir(parents=True)  # a directory where the agent file should be
    title = {"type": "custom-title", "customTitle": "t"}
    msg = user("first")
    side = {**assistant("x"), "isSidechain": True, "agentId": "bad"}
    with daemon.client() as c:
        append(c, sid, [title])
        with pytest.raises(RemoteError) as err:
            append(c, sid, [msg, side], durability="written")
        assert err.value.code == "permission_denied"  # not a regular file: refused before anything is accepted
        r = append(c, sid, [msg], durability="written")
        assert (r.accepted, r.duplicates) == (1, 0)
    assert read_entries(main_path(daemon.root, CWD, sid)) == [title, msg]


def test_record_chains_sidechains_apart_from_the_main_transcript(daemon):
    sid = str(uuid.uuid4())
    shared = str(uuid.uuid4())
    with daemon.client() as c:
        main = Session(c, sid, CWD)
        main.record([{"type": "user", "uuid": shared, "message": {"content": "main"}}], durability="written")
        # A forked subagent inherits the parent's message (same uuid) in its sidechain.
        r = c.call(m.Record(id=c.next_id(), session=sid, cwd=CWD, durability="written", messages=[
            line({"type": "user", "uuid": shared, "isSidechain": True, "agentId": "f1", "message": {"content": "inherited"}}),
            line({"type": "assistant", "uuid": str(uuid.uuid4()), "isSidechain": True, "agentId": "f1", "message": {"content": "sub"}}),
        ]))
        assert (r.accepted, r.duplicates) == (2, 0)
        nxt = main.record([{"type": "assistant", "message": {"content": "main again"}}], durability="written")
    side = read_entries(main_path(daemon.root, CWD, sid).with_suffix("") / "subagents" / "agent-f1.jsonl")
    assert [e["parentUuid"] for e in side] == [None, shared]
    mains = read_entries(main_path(daemon.root, CWD, sid))
    assert mains[-1]["uuid"] == nxt and mains[-1]["parentUuid"] == shared


def test_hundreds_of_agent_files_under_a_low_fd_limit(daemon_factory):
    d = daemon_factory().start(nofile=64)
    sid = str(uuid.uuid4())
    with d.client() as c:
        for i in range(150):
            append(c, sid, [{**user(f"task {i}"), "isSidechain": True, "agentId": f"ag{i}"}], durability="durable" if i % 10 == 0 else "queued")
        for i in range(150):
            append(c, sid, [{**assistant(f"done {i}"), "isSidechain": True, "agentId": f"ag{i}"}])
        c.flush(durable=True)
    assert d.stop() == 0
    sub = main_path(d.root, CWD, sid).with_suffix("") / "subagents"
    for i in range(150):
        assert [e["message"]["content"] for e in read_entries(sub / f"agent-ag{i}.jsonl")][0] == f"task {i}"
        assert len(read_entries(sub / f"agent-ag{i}.jsonl")) == 2


@pytest.mark.skipif(not shutil.which("strace"), reason="strace not installed")
@pytest.mark.timeout(300)
def test_slow_syncs_keep_transcript_fds_within_the_budget(daemon_factory):
    """Under a 64-fd limit at most 32 transcript fds may be open (half the
    limit). Every fdatasync is made slow (strace delays its return by 200 ms),
    as on a loaded machine: the once-a-second syncs of the files the LRU closed
    each open a descriptor of their own, up to 8 at once, and those count
    against the 32 as well; beside a full LRU they ran the daemon out of fds
    ("Too many open files" for a new agent file, 1 run in 6 of the test above
    with two busy loops beside it)."""
    d = daemon_factory()
    d.start(nofile=64, wrap=["strace", "-f", "--seccomp-bpf", "-qq", "-o", "/dev/null",
                             "-e", "trace=fdatasync", "-e", "inject=fdatasync:delay_exit=200000"])
    children = Path(f"/proc/{d.pid}/task/{d.pid}/children").read_text().split()
    (daemon_pid,) = children  # strace's one child: the daemon
    root = str(d.root)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        fd_dir = Path(f"/proc/{daemon_pid}/fd")
        while not done.is_set():
            n = 0
            for fd in fd_dir.iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                n += target.startswith(root) and target.endswith(".jsonl")
            peak = max(peak, n)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    sid = str(uuid.uuid4())
    try:
        with d.client() as c:
            for i in range(150):
                append(c, sid, [{**user(f"task {i}"), "isSidechain": True, "agentId": f"ag{i}"}])
            c.flush()
            time.sleep(3.0)  # the interval syncs of 150 files, 8 at a time, 200 ms each
            for i in range(150):  # more files opened while those syncs still run
                append(c, sid, [{**user(f"more {i}"), "isSidechain": True, "agentId": f"bg{i}"}])
            c.flush(durable=True)
    finally:
        done.set()
        sampler.join()
    # A full LRU, plus at most three held briefly outside it: the file thread's
    # new file (one at a time), a reader's look at a file, and the follower's
    # pass (one file at a time, one pass at a time: it reads a new file once to
    # fingerprint its start, and since its inotify queue rests during a pass
    # those reads can meet a full LRU).
    assert 32 <= peak <= 32 + 3, peak


def test_no_direct_writes_beside_a_stalled_daemon(daemon_factory):
    daemon = daemon_factory().start()  # stopped with SIGSTOP: a daemon of its own
    sid = str(uuid.uuid4())
    c = Client(daemon.socket, root=daemon.root, autostart=False, timeout=1.0)
    # The record into the stopped daemon waits out the client's timeout (its
    # retries ``reconnect_timeout``), the close its own: what is tested is after them.
    s = Session(c, sid, CWD, reconnect_timeout=0.2)
    s.record([{"type": "user", "message": {"content": "q"}}], durability="written")
    daemon.signal(signal.SIGSTOP)
    try:
        s.record([{"type": "assistant", "message": {"content": "a"}}])  # times out
        res = s.close(timeout=0.2)
        assert res is not None and res.undelivered >= 1 and res.written == 0
    finally:
        daemon.signal(signal.SIGCONT)
        c.close()
    with daemon.client() as other:
        other.flush()
    entries = read_entries(main_path(daemon.root, CWD, sid))
    uuids = [e["uuid"] for e in entries if "uuid" in e]
    assert len(uuids) == len(set(uuids))
    assert all(e.get("parentUuid") in (None, *uuids) for e in entries)


def test_requests_for_a_big_file_wait_for_its_scan_in_order(daemon):
    """A transcript over the inline-scan size is scanned in a worker thread; the
    requests that arrive meanwhile are parked and run in arrival order, and a
    Flush sent after them waits for them."""
    sid = str(uuid.uuid4())
    path = main_path(daemon.root, CWD, sid)
    path.parent.mkdir(parents=True, exist_ok=True)
    old = [user(f"old {i} " + "p" * 1000) for i in range(6000)]  # ~6.5 MB
    path.write_bytes(b"".join(line(e) + b"\n" for e in old))
    new = [user("new 1"), user("new 2")]
    with daemon.client() as c:
        rids = [c.next_id() for _ in range(4)]
        c._sock.sendall(
            encode(m.Append(id=rids[0], session=sid, cwd=CWD, entries=[line(old[17]), line(new[0])]))
            + encode(m.Append(id=rids[1], session=sid, cwd=CWD, entries=[line(new[1]), line(new[0])]))
            + encode(m.Flush(id=rids[2]))
            + encode(m.Status(id=rids[3]))
        )
        first, second, flushed, status = (c.receive(r) for r in rids)
    assert (first.accepted, first.duplicates) == (1, 1)  # old[17] known from the scan
    assert (second.accepted, second.duplicates) == (1, 1)
    assert isinstance(flushed, m.Flushed) and isinstance(status, m.StatusResult)
    assert read_entries(path)[-2:] == new
