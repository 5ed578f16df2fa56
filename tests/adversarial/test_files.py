"""Nobody else's files, and nothing that blocks the loop (issue 14, items 3 and 5).

Each attack runs against a real daemon process: the hostile file is planted,
then the daemon must still be alive, still answer another client, give the
attacked session alone a typed error, honour SIGTERM, and have acknowledged
nothing that went into a pipe or outside its root.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sessiond.wire import messages as m
from sessiond.wire.errors import RemoteError
from tests.helpers import assistant, line, main_path, make_deep, read_entries, remove_deep, user, wait_until

CWD = "/work/project"
OTHER_CWD = "/work/elsewhere"


def append(c, sid: str, entries: list[dict], durability: str = "written", cwd: str = CWD) -> m.Appended:
    return c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, entries=[line(e) for e in entries],
                           durability=durability))


def flushed(c, sid: str) -> bool:
    """True once nothing of ``sid`` waits to be written (False while its write fails)."""
    try:
        c.flush(sid)
    except RemoteError:
        return False
    return True


def refused(c, sid: str, entries: list[dict], **kw) -> RemoteError:
    with pytest.raises(RemoteError) as err:
        append(c, sid, entries, **kw)
    return err.value


def others_still_served(d) -> None:
    """Another client's durable append (in another project) goes through, and status answers."""
    other = str(uuid.uuid4())
    with d.client() as c:
        r = append(c, other, [user("unrelated")], durability="durable", cwd=OTHER_CWD)
        assert r.accepted == 1
        assert c.status().pid == d.pid
    assert [e["message"]["content"] for e in read_entries(main_path(d.root, OTHER_CWD, other))] == ["unrelated"]


def assert_stops_on_sigterm(d, expected: int = 0) -> None:
    d.signal(signal.SIGTERM)
    assert d.wait(timeout=30) == expected


class Fifo:
    """A FIFO at ``path``, with a reader holding it open (so an O_NONBLOCK open
    for writing succeeds: only the fstat check can refuse it)."""

    def __init__(self, path: Path, reader: bool = True) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path, 0o600)
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK) if reader else None

    def received(self) -> bytes:
        if self.fd is None:
            return b""
        try:
            return os.read(self.fd, 1 << 20)
        except BlockingIOError:
            return b""

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        self.path.unlink()


def plant(kind: str, path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        return Fifo(path, reader=False)
    if kind == "fifo-with-reader":
        return Fifo(path)
    if kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.listen(1)
        return s
    if kind == "device":
        if os.getuid() != 0:
            pytest.skip("mknod of a device needs root")
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
        return None
    if kind == "directory":
        path.mkdir()
        return None
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["fifo", "fifo-with-reader", "socket", "device", "directory"])
def test_a_special_file_at_a_transcript_path_is_refused_for_that_session_alone(daemon, kind):
    sid = str(uuid.uuid4())
    planted = plant(kind, main_path(daemon.root, CWD, sid))
    with daemon.client() as c:
        err = refused(c, sid, [user("into the pipe?")])
        assert err.code == "permission_denied" and "not a regular file" in err.message, err.message
        with pytest.raises(RemoteError) as opened:
            c.call(m.Open(id=c.next_id(), session=sid, cwd=CWD))
        assert opened.value.code == "permission_denied"
    others_still_served(daemon)
    if isinstance(planted, Fifo):
        assert planted.received() == b""
        planted.close()
    elif isinstance(planted, socket.socket):
        planted.close()
    assert_stops_on_sigterm(daemon)


@pytest.mark.parametrize("where", ["agent", "torn-side"])
def test_a_fifo_at_an_agent_file_or_torn_side_file_is_refused(daemon, where):
    sid = str(uuid.uuid4())
    path = main_path(daemon.root, CWD, sid)
    side = {**assistant("sub"), "isSidechain": True, "agentId": "a1"}
    if where == "agent":
        fifo = Fifo(path.with_suffix("") / "subagents" / "agent-a1.jsonl")
        entries = [user("main"), side]
    else:
        path.parent.mkdir(parents=True)
        path.write_bytes(line(user("old")) + b"\n" + b'{"type":"user","mess')  # a torn tail to move aside
        fifo = Fifo(path.with_name(path.name + ".torn"))
        entries = [assistant("after the torn line")]
    with daemon.client() as c:
        err = refused(c, sid, entries)
        assert err.code == "permission_denied" and "not a regular file" in err.message, err.message
    others_still_served(daemon)
    assert fifo.received() == b""
    fifo.close()
    if where == "torn-side":
        # The FIFO gone, the retry moves the fragment aside and writes the queued entry.
        with daemon.client() as c:
            wait_until(lambda: flushed(c, sid), "the retried write")
        assert [e["message"]["content"] for e in read_entries(path)][-1] == [{"type": "text", "text": "after the torn line"}]
    assert_stops_on_sigterm(daemon)


def test_a_fifo_swapped_in_after_an_unlink_gets_no_written_ack(daemon):
    """The writer's reopen of a deleted transcript goes through the same checks:
    a FIFO (with a reader) put there is refused, nothing is acked as written
    into it, and once it is gone the entries still queued are written."""
    sid = str(uuid.uuid4())
    path = main_path(daemon.root, CWD, sid)
    with daemon.client() as c:
        append(c, sid, [user("first")])
        path.unlink()
        fifo = Fifo(path)
        sent: list[str] = []
        errors: list[RemoteError] = []

        def refused_now() -> bool:
            sent.append(f"n{len(sent)}")
            try:
                append(c, sid, [assistant(sent[-1])])
            except RemoteError as exc:
                errors.append(exc)
                return True
            return False  # written into the deleted file, before the daemon saw the unlink

        wait_until(refused_now, "the reopen to meet the FIFO", timeout=20, every=0.1)
        assert errors[0].code == "permission_denied" and "FIFO" in errors[0].message
        assert fifo.received() == b""
        others_still_served(daemon)
        fifo.close()
        wait_until(lambda: flushed(c, sid), "the retry to recreate the file")
        append(c, sid, [user("last")])
    texts = [e["message"]["content"] for e in read_entries(path)]
    assert texts[0] == [{"type": "text", "text": sent[-1]}] and texts[-1] == "last"  # the refused entry kept
    assert_stops_on_sigterm(daemon)


def test_a_project_dir_swapped_for_a_symlink_out_of_the_root_is_never_written_through(daemon, short_tmp):
    outside = short_tmp / "outside"
    outside.mkdir()
    sid = str(uuid.uuid4())
    path = main_path(daemon.root, CWD, sid)
    with daemon.client() as c:
        append(c, sid, [user("first")])
        path.parent.rename(path.parent.with_name("moved-away"))
        path.parent.symlink_to(outside)
        errors: list[RemoteError] = []

        def refused_now() -> bool:
            try:
                append(c, sid, [assistant("again")])
            except RemoteError as exc:
                errors.append(exc)
                return True
            return False

        wait_until(refused_now, "the reopen to meet the symlink", timeout=20, every=0.1)
        assert errors[0].code == "permission_denied" and "outside the store root" in errors[0].message
        assert list(outside.iterdir()) == []
        others_still_served(daemon)
    assert list(outside.iterdir()) == []
    assert_stops_on_sigterm(daemon, expected=1)  # the refused entries cannot be written: said at exit
    assert "NOT written" in daemon.log_text()


def test_a_symlink_inside_the_root_is_followed_but_a_chain_out_of_it_is_not(daemon, short_tmp):
    outside = short_tmp / "outside"
    outside.mkdir()
    projects = daemon.root / "projects"
    projects.mkdir(parents=True)
    (projects / "real").mkdir()
    (projects / "hop").symlink_to(outside)
    sid, other = str(uuid.uuid4()), str(uuid.uuid4())
    main_path(daemon.root, CWD, sid).parent.symlink_to("real")  # relative, stays inside
    main_path(daemon.root, "/work/other", other).parent.symlink_to("hop")  # inside, then out
    with daemon.client() as c:
        append(c, sid, [user("inside")])
        assert refused(c, other, [user("out")], cwd="/work/other").code == "permission_denied"
    assert [e["message"]["content"] for e in read_entries(projects / "real" / f"{sid}.jsonl")] == ["inside"]
    assert list(outside.iterdir()) == []


# ------------------------------------------------------------- the socket directory

needs_root = pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
NOBODY = 65534
HOLD_LOCK = (  # another user's process holding the lock file it made in its directory
    "import fcntl,os,sys,time\n"
    "fd=os.open(sys.argv[1], os.O_RDWR|os.O_CREAT, 0o600); fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "print('held', flush=True); time.sleep(120)\n"
)


@needs_root
def test_a_socket_dir_made_by_another_user_is_refused_and_nothing_is_lost(daemon_factory, short_tmp, caplog):
    """The issue's attack: another local user pre-creates the socket directory
    (as ``/tmp/sessiond-<uid>`` may be when XDG_RUNTIME_DIR is unset) and holds
    a lock file in it. The daemon refuses to start there, clients refuse to use
    it with a typed error, and a Session's close writes its entries directly,
    loudly, instead of reporting them undelivered."""
    from sessiond.client import Client
    from sessiond.client.session import Session
    from sessiond.wire.errors import UnsafeSocketDir

    d = daemon_factory()
    theirs = d.socket.parent
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    for p in (short_tmp, d.base):
        os.chmod(p, 0o755)  # so their process can reach their directory
    holder = subprocess.Popen(["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups",
                               sys.executable, "-c", HOLD_LOCK, str(theirs / "sessiond.sock.lock")],
                              stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        r = d.cli("serve", check=False, timeout=30)
        assert r.returncode == 1 and f"owned by uid {NOBODY}".encode() in r.stderr, r.stderr
        with pytest.raises(UnsafeSocketDir, match=f"{theirs} is owned by uid {NOBODY}"):
            Client(d.socket, root=d.root, autostart=True).connect()
        for cmd in ("status", "stop"):
            r = d.cli(cmd, check=False)
            assert r.returncode == 1 and str(theirs).encode() in r.stderr and len(r.stderr.splitlines()) == 1, (cmd, r.stderr)
        sid = str(uuid.uuid4())
        s = Session(Client(d.socket, root=d.root, autostart=True, timeout=5), sid, CWD, reconnect_timeout=5)
        for text in ("one", "two", "three"):
            s.record([{"type": "user", "message": {"role": "user", "content": text}}])
        with caplog.at_level("ERROR", logger="sessiond"):
            res = s.close()
        assert res is not None and (res.written, res.undelivered) == (3, 0)
        assert f"owned by uid {NOBODY}" in caplog.text and "writing 3 entries" in caplog.text
        assert [e["message"]["content"] for e in read_entries(main_path(d.root, CWD, sid))] == ["one", "two", "three"]
        assert sorted(p.name for p in theirs.iterdir()) == ["sessiond.sock.lock"]  # no log, no socket of ours
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


@needs_root
def test_a_lock_file_of_another_user_stops_the_daemon_naming_it(daemon_factory):
    d = daemon_factory()
    d.socket.parent.mkdir(mode=0o700)
    lock = d.socket.parent / "sessiond.sock.lock"
    lock.write_text("")
    os.chown(lock, NOBODY, NOBODY)
    r = d.cli("serve", check=False, timeout=30)
    assert r.returncode == 1 and f"{lock} is owned by uid {NOBODY}".encode() in r.stderr, r.stderr
    assert not d.socket.exists()


def test_autostart_never_follows_a_planted_log_symlink(daemon_factory, short_tmp):
    from sessiond.client import Client
    from sessiond.wire.errors import UnsafeSocketDir

    d = daemon_factory()
    d.socket.parent.mkdir(mode=0o700)
    target = short_tmp / "victim.txt"
    target.write_text("precious\n")
    (d.socket.parent / "sessiond.log").symlink_to(target)
    with pytest.raises(UnsafeSocketDir, match="symlink"):
        Client(d.socket, root=d.root, autostart=True).connect()
    assert target.read_text() == "precious\n"
    assert not d.socket.exists()  # no daemon was started with its output going there


# ------------------------------------------------------------ nothing on the loop

DISK_WAITS = ("fsync", "fdatasync", "syncfs", "mkdir", "mkdirat", "readv")
"""What waits on the disk: syncs, directory creation, and the scans' reads
(``iter_line_views`` reads with readv; nothing else in the daemon does)."""


@pytest.mark.skipif(not shutil.which("strace"), reason="strace not installed")
def test_no_disk_wait_runs_on_the_event_loop_thread(daemon_factory, short_tmp):
    """Traced: a new session in a new project (directories and file created,
    synced), a durable append, SetAgentMeta, a 4096-byte cwd 2,000 levels deep,
    a 6 MB existing agent file, and a transcript ending in a torn line (moved
    aside to a synced side file): every sync, mkdir and scan read, and every
    stat of the deep cwd, happens on a worker thread, none on the loop's. The
    big agent file's uuids still dedup the request that waited for its scan."""
    d = daemon_factory()
    d.root.mkdir()  # the daemon's start-up would make it on its own thread (fine, but not under test)
    trace = d.base / "disk.trace"
    (short_tmp / "deep").mkdir()
    deep = make_deep(short_tmp / "deep", 4096)
    deep_mark = str(short_tmp / "deep" / "d" / "d")
    sid, deep_sid = str(uuid.uuid4()), str(uuid.uuid4())
    agent_file = main_path(d.root, CWD, sid).with_suffix("") / "subagents" / "agent-big.jsonl"
    agent_file.parent.mkdir(parents=True)
    old = [{**assistant("x" * 500), "isSidechain": True, "agentId": "big"} for _ in range(12000)]
    agent_file.write_bytes(b"".join(line(e) + b"\n" for e in old))
    torn_sid = str(uuid.uuid4())
    torn_file = main_path(d.root, CWD, torn_sid)
    torn_file.write_bytes(line(user("before")) + b"\n" + b'{"type":"assistant","mess')  # a writer died mid-line
    assert agent_file.stat().st_size > 4 * 1024 * 1024  # over the inline threshold
    d.start(wrap=["strace", "-f", "-qq", "-o", str(trace), "-e", f"trace={','.join(DISK_WAITS)},%%stat"])
    try:
        served_without_waiting(d, trace, sid, deep_sid, deep, deep_mark, agent_file, old, torn_sid, torn_file)
    finally:
        d.stop()
        remove_deep(short_tmp / "deep")


def served_without_waiting(d, trace: Path, sid: str, deep_sid: str, deep: str, deep_mark: str, agent_file: Path,
                           old: list[dict], torn_sid: str, torn_file: Path) -> None:
    with d.client() as c:
        loop_tid = c.status().pid  # the daemon's main thread (strace's pid is d.pid)
        append(c, sid, [user("new project")], durability="durable")
        r = c.call(m.SetAgentMeta(id=c.next_id(), session=sid, cwd=CWD, agent="big", meta=b'{"agentType":"x"}'))
        assert isinstance(r, m.Done)
        dup = old[-1]
        r = c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(dup), line({**dup, "uuid": str(uuid.uuid4())})],
                            durability="written"))
        assert (r.accepted, r.duplicates) == (1, 1)  # parked until the worker's scan was done
        r = c.call(m.Append(id=c.next_id(), session=deep_sid, cwd=deep, entries=[line(user("deep"))], durability="written"))
        assert r.accepted == 1
        with pytest.raises(RemoteError) as err:
            c.call(m.Append(id=c.next_id(), session=str(uuid.uuid4()), cwd=deep + "/dd", entries=[line(user("x"))]))
        assert err.value.code == "bad_request" and "PATH_MAX" in err.value.message
        r = c.call(m.Append(id=c.next_id(), session=torn_sid, cwd=CWD, entries=[line(user("after"))], durability="written"))
        assert r.accepted == 1 and torn_file.with_name(torn_file.name + ".torn").exists()  # moved aside, synced
        assert [e["message"]["content"] for e in read_entries(torn_file)] == ["before", "after"]
        assert c.status().pid == loop_tid

        def calls() -> list[tuple[int, str]]:
            out = []
            for ln in trace.read_text(errors="replace").splitlines():
                tid, _, rest = ln.partition(" ")
                name = rest.lstrip().split("(", 1)[0]
                if str(d.socket.parent) in rest:
                    continue  # start-up: the socket directory, made before the loop runs
                if tid.isdigit() and (name in DISK_WAITS or (deep_mark in rest)):
                    out.append((int(tid), rest.strip()))
            return out

        wait_until(lambda: any("fdatasync" in x or "syncfs" in x for _, x in calls()), "the trace to show the sync")
    seen = calls()
    on_loop = [x for tid, x in seen if tid == loop_tid]
    # Only the small torn transcript is scanned on the loop (by design, up to 4 MB): one read and the EOF.
    assert [x for x in on_loop if not x.startswith("readv(")] == [] and len(on_loop) <= 2, on_loop
    names = {x.split("(", 1)[0] for _, x in seen}
    assert {"fsync", "readv"} <= names and names & {"mkdir", "mkdirat"} and any(deep_mark in x for _, x in seen), names
    assert "agentType" in (agent_file.parent / "agent-big.meta.json").read_text()


def test_the_mirror_state_file_never_blocks_on_a_fifo(short_tmp):
    """The mirror saves its state file on the loop: a FIFO planted at it (or at
    its temp name) is refused at once, logged, never waited on."""
    from sessiond.mirror.statefile import load_state, save_state

    state_file = short_tmp / ".sessiond-mirror.json"
    os.mkfifo(state_file)
    os.mkfifo(state_file.with_name(state_file.name + ".tmp"))
    save_state(state_file, {"a.jsonl": 3}, clean=True)  # would block in open(2) for writing
    assert stat.S_ISFIFO(os.lstat(state_file).st_mode)
    problems = []
    assert load_state(state_file, problems) is None  # would block in open(2) for reading
    (bad,) = problems  # set aside, kept: tests/adversarial/test_state_files.py
    assert stat.S_ISFIFO(os.lstat(bad.setAside).st_mode)


def test_the_direct_append_fallback_refuses_what_the_daemon_refuses(short_tmp, caplog):
    """No daemon: Session.close() writes directly, through the same checks. A
    FIFO at the transcript is refused at once (loudly, counted undelivered),
    and a project directory linked out of the root is never written through."""
    from sessiond.client import Client
    from sessiond.client.fallback import direct_append
    from sessiond.client.session import Session

    root, outside = short_tmp / "root", short_tmp / "outside"
    outside.mkdir()
    sock = short_tmp / "run" / "s.sock"
    sid = str(uuid.uuid4())
    fifo = Fifo(main_path(root, CWD, sid))
    s = Session(Client(sock, root=root, autostart=False, timeout=2), sid, CWD, reconnect_timeout=0.2)
    s.record([{"type": "user", "message": {"role": "user", "content": "q"}}])
    with caplog.at_level("ERROR", logger="sessiond"):
        res = s.close(timeout=0.5)
    assert res is not None and (res.written, res.undelivered) == (0, 1)
    assert "not a regular file" in caplog.text and fifo.received() == b""
    fifo.close()
    other = str(uuid.uuid4())
    main_path(root, "/work/other", other).parent.symlink_to(outside)
    with pytest.raises(OSError, match="outside the store root"):
        direct_append(root, "/work/other", other, [line(user("x"))])
    assert list(outside.iterdir()) == []


def test_requests_parked_behind_a_deep_cwd_keep_their_order_and_share_its_error(daemon, short_tmp):
    """A deep cwd is resolved in a worker: the session's pipelined requests wait
    in arrival order; when its path is refused, every one of them gets the error."""
    from sessiond.store.paths import project_dir

    (short_tmp / "deep").mkdir()
    deep = make_deep(short_tmp / "deep", 2048)
    try:
        good, bad = str(uuid.uuid4()), str(uuid.uuid4())
        fifo = Fifo(project_dir(daemon.root, deep) / f"{bad}.jsonl")
        texts = [f"m{i}" for i in range(5)]
        with daemon.client() as c:
            reqs = [m.Append(id=c.next_id(), session=sid, cwd=deep, entries=[line(user(t))], durability="written")
                    for t in texts for sid in (good, bad)]
            answers = c.pipeline(reqs, window=len(reqs))
        assert [type(a).__name__ for a in answers[0::2]] == ["Appended"] * 5
        assert {(a.code, "not a regular file" in a.message) for a in answers[1::2]} == {("permission_denied", True)}
        assert [e["message"]["content"] for e in read_entries(project_dir(daemon.root, deep) / f"{good}.jsonl")] == texts
        assert fifo.received() == b""
        fifo.close()
        others_still_served(daemon)
    finally:
        remove_deep(short_tmp / "deep")
