"""Fault injection without root-only tricks: torn tails, ENOSPC, EFBIG, renames."""

from __future__ import annotations

import json
import shutil
import uuid

import pytest

from sessiond.wire import messages as m
from sessiond.wire.errors import RemoteError
from tests.helpers import assistant, line, main_path, read_entries, user, wait_until

CWD = "/work/project"


def append(c, sid, entries, **kw):
    return c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(e) for e in entries], **kw))


def test_a_torn_tail_is_moved_aside_before_appending(daemon):
    sid = str(uuid.uuid4())
    path = main_path(daemon.root, CWD, sid)
    path.parent.mkdir(parents=True)
    good = [user("one"), assistant("two")]
    fragment = b'{"type":"user","message":{"content":"cut sho'
    path.write_bytes(b"".join(line(e) + b"\n" for e in good) + fragment)
    new = user("three")
    with daemon.client() as c:
        append(c, sid, [new], durability="written")
    assert read_entries(path) == [*good, new]
    moved = [json.loads(x) for x in path.with_name(path.name + ".torn").read_bytes().splitlines()]
    assert moved == [moved[0] | {"offset": len(b"".join(line(e) + b"\n" for e in good)), "length": len(fragment), "text": fragment.decode()}]
    assert "torn line" in daemon.log_text()


def test_a_whole_last_line_missing_its_newline_is_kept(daemon):
    sid = str(uuid.uuid4())
    path = main_path(daemon.root, CWD, sid)
    path.parent.mkdir(parents=True)
    path.write_bytes(line(user("no newline")))
    with daemon.client() as c:
        append(c, sid, [assistant("after")], durability="written")
    assert [e["type"] for e in read_entries(path)] == ["user", "assistant"]
    assert not path.with_name(path.name + ".torn").exists()


@pytest.mark.skipif(not shutil.which("strace"), reason="strace not installed")
def test_enospc_gives_io_error_keeps_the_queue_and_recovers(daemon_factory):
    sid = str(uuid.uuid4())
    d = daemon_factory()
    path = main_path(d.root, CWD, sid)
    # The first two write(2) calls on the transcript fail as if the disk were full.
    d.start(wrap=["strace", "-f", "-qq", "-o", "/dev/null", "-P", str(path), "-e", "trace=write",
                  "-e", "inject=write:error=ENOSPC:when=1..2"])
    first, second = user("before full"), assistant("after full")
    with d.client() as c:
        with pytest.raises(RemoteError) as err:
            append(c, sid, [first], durability="written")
        assert err.value.code == "io_error" and "No space left" in err.value.message
        assert c.status().queuedEntries == 1  # kept, to be retried
        wait_until(lambda: not c.status().queuedEntries, "the retried write", timeout=20)
        append(c, sid, [second], durability="durable")
        assert c.status().errors >= 2
    assert read_entries(path) == [first, second]
    d.cli("stop")  # through the socket: strace does not pass SIGTERM on
    assert d.wait() == 0


def test_efbig_short_write_is_cut_back_to_whole_lines(daemon_factory):
    d = daemon_factory().start(fsize=64 * 1024)
    sid = str(uuid.uuid4())
    path = main_path(d.root, CWD, sid)
    small = [user(f"s{i} " + "a" * 900) for i in range(40)]  # ~38 KB
    big = assistant("b" * 40_000)  # would cross the 64 KB limit mid-line
    with d.client() as c:
        append(c, sid, small, durability="written")
        with pytest.raises(RemoteError) as err:
            append(c, sid, [big], durability="written")
        assert err.value.code == "io_error"
        assert read_entries(path) == small  # no partial line left behind
        assert c.status().pid == d.pid
    d.kill()  # the queue still holds the big entry: it can never fit


def test_a_transcript_renamed_under_the_daemon_is_reopened(daemon):
    sid = str(uuid.uuid4())
    path = main_path(daemon.root, CWD, sid)
    with daemon.client() as c:
        append(c, sid, [user("first")], durability="written")
        path.rename(path.with_suffix(".old"))
        append(c, sid, [assistant("second")], durability="written")
        path.unlink()
        append(c, sid, [user("third")], durability="written")
    assert [e["type"] for e in read_entries(path.with_suffix(".old"))] == ["user"]
    assert [e["message"]["content"] for e in read_entries(path)] == ["third"]
    assert "was replaced under the daemon" in daemon.log_text() or "was deleted under the daemon" in daemon.log_text()


def test_a_renamed_project_directory_is_noticed_at_the_next_write(daemon):
    """The project directory's watch sees it move: the next append recreates
    the transcript at its path instead of writing into the moved one."""
    sid = str(uuid.uuid4())
    path = main_path(daemon.root, CWD, sid)
    moved = path.parent.with_name(path.parent.name + "-moved")
    with daemon.client() as c:
        append(c, sid, [user("first")], durability="written")
        path.parent.rename(moved)
        append(c, sid, [user("second")], durability="written")
        moved.rename(moved.with_name(moved.name + "-again"))  # the old watch must not fire for the new dir
        append(c, sid, [user("third")], durability="written")
    assert [e["message"]["content"] for e in read_entries(moved.with_name(moved.name + "-again") / path.name)] == ["first"]
    assert [e["message"]["content"] for e in read_entries(path)] == ["second", "third"]
    assert "was deleted under the daemon" in daemon.log_text()


def test_a_re_pointed_symlinked_project_directory_is_found_by_the_recheck(daemon):
    """No watch sees a symlink above a transcript re-pointed elsewhere (the
    watches are on what it pointed to): the periodic recheck does, and until
    then entries go on into the old target, none lost."""
    import os

    sid = str(uuid.uuid4())
    path = main_path(daemon.root, CWD, sid)
    path.parent.parent.mkdir(parents=True, exist_ok=True)
    first, second = path.parent.with_name("target-a"), path.parent.with_name("target-b")
    first.mkdir()
    second.mkdir()
    os.symlink(first, path.parent)
    sent = ["first"]
    with daemon.client() as c:
        append(c, sid, [user("first")], durability="written")
        tmp = path.parent.with_name("link.tmp")
        os.symlink(second, tmp)
        os.rename(tmp, path.parent)  # re-pointed in one step

        def noticed() -> bool:
            sent.append(f"n{len(sent)}")
            append(c, sid, [user(sent[-1])], durability="written")
            return (second / path.name).exists()

        wait_until(noticed, "the recheck to notice", timeout=10, every=0.1)
    old = [e["message"]["content"] for e in read_entries(first / path.name)]
    new = [e["message"]["content"] for e in read_entries(second / path.name)]
    assert old + new == sent and old[0] == "first" and new


@pytest.mark.skipif(not shutil.which("strace"), reason="strace not installed")
def test_writes_do_not_stat_the_path_each_time(daemon_factory, short_tmp):
    """An inotify watch stands in for a path stat before every write (the
    periodic recheck is turned off here: it would add one stat a second)."""
    sid = str(uuid.uuid4())
    cfg = short_tmp / "config.toml"
    cfg.write_text("path_recheck_s = 0\n")
    d = daemon_factory()
    path = main_path(d.root, CWD, sid)
    trace = d.base / "stat.trace"
    d.start("--config", str(cfg), wrap=["strace", "-f", "--seccomp-bpf", "-qq", "-o", str(trace),
                                        "-e", "trace=%%stat", "-P", str(path)])
    with d.client() as c:
        for i in range(30):
            append(c, sid, [user(f"m{i}")], durability="written")
        path.rename(path.with_suffix(".old"))
        append(c, sid, [user("after")], durability="written")
    d.cli("stop")
    assert d.wait() == 0
    assert [e["message"]["content"] for e in read_entries(path)] == ["after"]
    stats = [ln for ln in trace.read_text().splitlines() if f'"{path}"' in ln]  # by path, not fstat
    assert 1 <= len(stats) <= 4, stats  # file creation, the first write, the rename: not one per write (31)


@pytest.mark.skipif(not shutil.which("strace"), reason="strace not installed")
def test_a_file_renamed_while_its_fdatasync_runs_keeps_that_fd_until_it_ends(daemon_factory):
    """Reopening a renamed file must not close the descriptor a sync in flight
    uses: its number could be reused and the sync land on another file."""
    import glob
    import os
    import platform

    fdatasync_nr = {"x86_64": 75, "aarch64": 83}.get(platform.machine())
    if fdatasync_nr is None:
        pytest.skip("fdatasync's syscall number is not known for this machine")

    def in_fdatasync(pid: int) -> bool:
        """A thread of the daemon is inside fdatasync (held there by strace)."""
        for entry in glob.glob(f"/proc/{pid}/task/*/syscall"):
            try:
                with open(entry) as f:
                    if f.read().split(" ", 1)[0] == str(fdatasync_nr):
                        return True
            except OSError:
                continue
        return False

    sid = str(uuid.uuid4())
    d = daemon_factory()
    d.start("--fsync", "never", wrap=["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=fdatasync",
                                      "-e", "inject=fdatasync:delay_enter=2000000:when=1"])
    path = main_path(d.root, CWD, sid)
    old = path.with_suffix(".old")
    with d.client() as c, d.client() as slow:
        pid = c.status().pid
        append(c, sid, [user("first")], durability="written")
        rid = slow.next_id()
        slow.send(m.Append(id=rid, session=sid, cwd=CWD, entries=[line(user("second"))], durability="durable"))

        def open_on(target) -> bool:
            fds = f"/proc/{pid}/fd"
            names = []
            for fd in os.listdir(fds):
                try:
                    names.append(os.readlink(f"{fds}/{fd}"))
                except OSError:
                    pass
            return str(target) in names

        wait_until(lambda: in_fdatasync(pid), "the sync to be held by strace (for 2 s)", every=0.01)
        path.rename(old)
        append(c, sid, [user("third")], durability="written")
        assert open_on(old)  # still there for the sync in flight
        resp = slow.receive(rid)
        assert isinstance(resp, m.Appended), resp
        wait_until(lambda: not open_on(old), "the retired descriptor to be closed")
    assert [e["message"]["content"] for e in read_entries(old)] == ["first", "second"]
    assert [e["message"]["content"] for e in read_entries(path)] == ["third"]
    d.cli("stop")
    assert d.wait() == 0


def test_check_and_repair(daemon, short_tmp):
    bad = short_tmp / "bad.jsonl"
    bad.write_bytes(line(user("a") | {"uuid": "u1"}) + b"\n" + line(assistant("b") | {"uuid": "u2", "parentUuid": "gone"}) + b"\n{\"torn")
    r = daemon.cli("check", "--json", str(bad), check=False)
    assert r.returncode == 1
    h = json.loads(r.stdout)["files"][0]
    assert h["tornTail"] and h["danglingParents"] == ["gone"] and h["lines"] == 3 and not h["healthy"]
    assert h["verdict"] == "unhealthy"
    r = daemon.cli("repair", str(bad), check=False)
    # The torn tail was what lost data; the dangling parent left is what resume
    # bridges: a warning, so the file is healthy now.
    assert b"moved a torn last line" in r.stdout and r.returncode == 0
    assert b"WARN " in r.stdout and b"resume bridges" in r.stdout
    assert bad.with_name("bad.jsonl.torn").exists()
    good = short_tmp / "good.jsonl"
    good.write_bytes(line(user("a")))
    r = daemon.cli("repair", str(good))
    assert b"added the missing newline" in r.stdout and good.read_bytes().endswith(b"\n")
    assert daemon.cli("check", str(good)).returncode == 0


@pytest.mark.skipif(not shutil.which("strace"), reason="strace not installed")
def test_flush_durable_never_succeeds_when_fsync_failed(daemon_factory):
    sid = str(uuid.uuid4())
    d = daemon_factory()
    d.start("--fsync", "never", wrap=["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=fdatasync",
                                      "-e", "inject=fdatasync:error=EIO:when=1"])
    path = main_path(d.root, CWD, sid)
    with d.client() as c:
        append(c, sid, [user("must be synced")], durability="written")
        with pytest.raises(RemoteError) as err:
            c.flush(durable=True)
        assert err.value.code == "io_error" and "fdatasync" in err.value.message
        assert c.flush(durable=True).files == 1  # the next sync works and says so
    assert read_entries(path)[0]["message"]["content"] == "must be synced"
    d.cli("stop")
    assert d.wait() == 0


@pytest.mark.skipif(not shutil.which("strace"), reason="strace not installed")
def test_files_waiting_together_share_one_syncfs_which_never_hides_a_failure(daemon_factory):
    sids = [str(uuid.uuid4()) for _ in range(3)]
    d = daemon_factory()
    d.start("--fsync", "never", wrap=["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=syncfs",
                                      "-e", "inject=syncfs:error=EIO:when=1"])
    with d.client() as c:
        for sid in sids:
            append(c, sid, [user(f"must be synced {sid}")], durability="written")
        with pytest.raises(RemoteError) as err:
            c.flush(durable=True)  # three files waiting at once: one syncfs, and it fails
        assert err.value.code == "io_error" and "syncfs" in err.value.message
        before = c.status().fsyncs
        assert c.flush(durable=True).files == 3  # nothing was taken for synced
        # After a failed syncfs the filesystem is synced file by file: the error
        # may have been another file's, which only its own fdatasync reports.
        assert c.status().fsyncs == before + 3
    assert "synced one by one from now on" in d.log_text()
    for sid in sids:
        assert read_entries(main_path(d.root, CWD, sid))[0]["message"]["content"] == f"must be synced {sid}"
    d.cli("stop")
    assert d.wait() == 0


@pytest.mark.skipif(not shutil.which("strace"), reason="strace not installed")
@pytest.mark.parametrize("syncfs_fails", [False, True])
def test_shutdown_syncs_all_dirty_files_at_once_and_falls_back_per_file(daemon_factory, short_tmp, syncfs_fails):
    """Five files written but never synced: stopping makes them durable with one
    syncfs; if that fails, with one fdatasync each (which names the file)."""
    d = daemon_factory()
    trace = d.base / "sync.trace"
    inject = ["-e", "inject=syncfs:error=EIO:when=1"] if syncfs_fails else []
    d.start("--fsync", "never", wrap=["strace", "-f", "--seccomp-bpf", "-qq", "-o", str(trace),
                                      "-e", "trace=syncfs,fdatasync", *inject])
    sids = [str(uuid.uuid4()) for _ in range(5)]
    with d.client() as c:
        for sid in sids:
            append(c, sid, [user(f"kept {sid}")], durability="written")
    d.cli("stop")
    assert d.wait() == 0
    calls = trace.read_text()
    assert calls.count("syncfs(") == 1
    assert calls.count("fdatasync(") == (5 if syncfs_fails else 0)
    if syncfs_fails:
        assert "shutdown: syncfs failed" in d.log_text()
    for sid in sids:
        assert read_entries(main_path(d.root, CWD, sid))[0]["message"]["content"] == f"kept {sid}"


@pytest.mark.skipif(not shutil.which("strace"), reason="strace not installed")
def test_shutdown_syncs_files_whose_descriptor_the_lru_closed(daemon_factory, short_tmp):
    """40 files written under a 32-descriptor LRU: the 8 closed ones still hold
    unsynced data, and stopping syncs them too (one fdatasync per file here)."""
    cfg = short_tmp / "config.toml"
    cfg.write_text("group_sync = false\n")
    d = daemon_factory()
    trace = d.base / "sync.trace"
    d.start("--config", str(cfg), "--fsync", "never", nofile=64,
            wrap=["strace", "-f", "--seccomp-bpf", "-qq", "-o", str(trace), "-e", "trace=fdatasync"])
    with d.client() as c:
        for _ in range(40):
            append(c, str(uuid.uuid4()), [user("x")], durability="written")
    d.cli("stop")
    assert d.wait() == 0
    assert trace.read_text().count("fdatasync(") == 40


def test_the_background_sync_of_a_closed_file_never_recreates_it(daemon_factory, short_tmp):
    """40 files written under a 32-descriptor LRU, then one of the closed ones
    deleted: the once-a-second sync covers the other 39 and fails for it,
    without creating an empty file at its path.

    The policy is ``never`` until the file is deleted, then ``interval`` by a
    reload: on a loaded machine writing the 40 files outlasts a second, and a
    tick between the first file and the deletion synced it before it was gone
    (4 runs in 10 failed with two busy loops beside them)."""
    import signal

    cfg = short_tmp / "config.toml"
    cfg.write_text('fsync = "never"\n')
    d = daemon_factory().start("--config", str(cfg), nofile=64)
    sids = [str(uuid.uuid4()) for _ in range(40)]
    with d.client() as c:
        for sid in sids:
            append(c, sid, [user("x")], durability="written")
        gone = main_path(d.root, CWD, sids[0])  # the least recently used: its fd was closed
        gone.unlink()
        assert c.status().fsyncs == 0
        cfg.write_text('fsync = "interval"\n')
        d.signal(signal.SIGHUP)
        wait_until(lambda: c.status().config["fsync"] == "interval", "the reload")
        wait_until(lambda: "fdatasync of" in d.log_text() and sids[0] in d.log_text(), "the failed sync")
        wait_until(lambda: c.status().fsyncs >= 39, "the other files' syncs")
    assert not gone.exists()


def test_group_sync_off_syncs_each_file_and_reloads(daemon_factory, short_tmp):
    import signal

    cfg = short_tmp / "config.toml"
    cfg.write_text("group_sync = false\n")
    d = daemon_factory().start("--config", str(cfg), "--fsync", "never")
    with d.client() as c:
        assert c.status().config["groupSync"] is False

        def three_files_synced() -> int:
            for _ in range(3):
                append(c, str(uuid.uuid4()), [user("x")], durability="written")
            before = c.status().fsyncs
            assert c.flush(durable=True).files == 3
            return c.status().fsyncs - before

        assert three_files_synced() == 3
        cfg.write_text("group_sync = true\n")
        d.signal(signal.SIGHUP)
        wait_until(lambda: c.status().config["groupSync"] is True, "the reload")
        assert three_files_synced() == 1
    d.cli("stop")
    assert d.wait() == 0


def test_background_syncs_stay_one_fdatasync_per_file(daemon):
    """syncfs writes out other programs' data too: only durable requests, which
    wait, are grouped into one; the once-a-second policy sync is per file."""
    with daemon.client() as c:
        before = c.status().fsyncs
        for _ in range(3):
            append(c, str(uuid.uuid4()), [user("x")], durability="written")
        wait_until(lambda: c.status().fsyncs >= before + 3, "the interval sync", timeout=10)
        assert c.status().fsyncs == before + 3


def test_sixteen_clients_and_a_foreign_writer_share_one_session(daemon):
    """Sixteen clients of the daemon and a writer beside it (Claude Code itself,
    ``pull``: the writers' per-file flock; the fallback never writes while a
    daemon serves the root) on one session: every line whole, each writer's
    order kept."""
    import subprocess
    import sys

    sid = str(uuid.uuid4())
    with daemon.client() as c:  # the file exists before the foreign writer opens it
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written",
                        entries=[json.dumps({"type": "user", "uuid": str(uuid.uuid4()),
                                             "message": {"content": "seed-0"}}).encode()]))
    path = main_path(daemon.root, CWD, sid)
    script = """
import sys
from sessiond.client import Client, Session
tag, sid, cwd = sys.argv[1], sys.argv[2], sys.argv[3]
with Client() as c:
    s = Session(c, sid, cwd, lease=False)  # sixteen writers of one session: they opt out of the lease
    for i in range(60):
        s.record([{"type": "user", "message": {"content": f"{tag}-{i}-" + "x" * 3000}}])
    s.close()
"""
    fallback = f"""
import json, os, uuid
from pathlib import Path
from sessiond.store.appendfile import locked_append, open_append
for i in range(60):
    e = {{"type": "user", "uuid": str(uuid.uuid4()), "message": {{"content": f"F-{{i}}-" + "y" * 70000}}}}
    fd, _ = open_append(Path({str(path)!r}))
    locked_append(fd, Path({str(path)!r}), json.dumps(e).encode() + b"\\n")
    os.close(fd)
"""
    procs = [subprocess.Popen([sys.executable, "-c", script, f"C{k}", sid, CWD], env=daemon.env) for k in range(16)]
    procs.append(subprocess.Popen([sys.executable, "-c", fallback], env=daemon.env))
    for p in procs:
        assert p.wait(timeout=120) == 0
    with daemon.client() as c:
        c.flush()
    entries = read_entries(path)[1:]  # every line whole; the seed first
    tags = [e["message"]["content"].split("-")[0] + "-" + e["message"]["content"].split("-")[1] for e in entries]
    assert sorted(tags) == sorted([f"C{k}-{i}" for k in range(16) for i in range(60)] + [f"F-{i}" for i in range(60)])
    for k in range(16):  # each writer's order is kept
        mine = [t for t in tags if t.startswith(f"C{k}-")]
        assert mine == [f"C{k}-{i}" for i in range(60)]
