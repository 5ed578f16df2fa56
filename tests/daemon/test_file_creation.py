"""Creating transcripts in batches: each directory synced once per batch.

A burst of new files (agents starting together, a turn's parallel subagents in
one ``subagents/`` directory) is made by the writer's file thread a batch at a
time, every entry first and then one fsync per directory (``DirSyncs``,
``create_files``). What must hold: every file is made and gets its entries, a
directory is not synced once per file, nothing is written into a file (not at
shutdown either) before its entries are synced, a failed sync fails the batch
and its files' directories are synced again before they are written, one
file's trouble leaves the rest of its batch served, and the thread holds a
bounded number of descriptors.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sessiond.daemon.filework import create_files
from sessiond.store.paths import agent_file, project_dir, subagents_dir
from sessiond.store.safeopen import DirSyncs, StoreRoot, UnsafePath
from sessiond.wire import messages as m
from sessiond.wire.errors import RemoteError
from tests.helpers import line, main_path, read_entries, user, wait_until

CWD = "/work/burst"
HAS_STRACE = shutil.which("strace") is not None


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_create_files_makes_every_file_and_directory(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    paths = [root / "projects" / f"-p{i % 3}" / f"s{i}" / "subagents" / f"agent-{i}.jsonl" for i in range(10)]
    with StoreRoot(root) as store:
        before = open_fds()
        assert create_files(store, paths) == [None] * 10
        assert open_fds() == before  # every directory held for its sync was let go
        assert create_files(store, paths) == [None] * 10  # there already: nothing to do, no error
    for p in paths:
        assert p.is_file() and p.stat().st_size == 0 and p.stat().st_mode & 0o777 == 0o600
        assert p.parent.stat().st_mode & 0o777 == 0o700


def test_one_refused_path_fails_alone(tmp_path):
    root = tmp_path / "root"
    (root / "projects" / "-p").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "projects" / "-evil").symlink_to(outside)
    paths = [root / "projects" / "-p" / "a.jsonl", root / "projects" / "-evil" / "b.jsonl",
             root / "projects" / "-p" / "c.jsonl"]
    with StoreRoot(root) as store:
        results = create_files(store, paths)
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], UnsafePath)
    assert not (outside / "b.jsonl").exists()
    assert paths[0].is_file() and paths[2].is_file()


def test_dir_syncs_holds_at_most_its_limit(tmp_path):
    dirs = [tmp_path / f"d{i}" for i in range(7)]
    syncs = DirSyncs(limit=2)
    before = open_fds()
    most = 0
    for d in dirs:
        d.mkdir()
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            syncs.add(fd)
            syncs.add(fd)  # the same directory again: held once
        finally:
            os.close(fd)
        most = max(most, open_fds() - before)
    assert most == 2
    syncs.sync()
    assert open_fds() == before and syncs.error is None


def _traced(tmp_path: Path, script: str, *strace: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """``script`` in a fresh interpreter under ``strace -f`` tracing fsync
    (``strace``: more options, a fault to inject); its output and the fsyncs."""
    trace = tmp_path / "trace"
    proc = subprocess.run(["strace", "-f", "-qq", "-o", str(trace), "-e", "trace=fsync", *strace,
                           sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    calls = [ln for ln in trace.read_text().splitlines() if "fsync(" in ln]
    return proc, calls


CREATE = """
import errno, sys
from pathlib import Path
from sessiond.daemon.filework import create_files
from sessiond.store.safeopen import StoreRoot
root = Path({root!r})
paths = [Path(p) for p in {paths!r}]
with StoreRoot(root) as store:
    for r in create_files(store, paths):
        print("ok" if r is None else errno.errorcode[r.errno])
"""


@pytest.mark.skipif(not HAS_STRACE, reason="strace not installed")
def test_a_batch_syncs_each_directory_once(tmp_path):
    root = tmp_path / "root"
    (root / "projects").mkdir(parents=True)
    project = root / "projects" / "-work-burst"
    paths = [str(project / "s1" / "subagents" / f"agent-a{i}.jsonl") for i in range(12)]
    proc, calls = _traced(tmp_path, CREATE.format(root=str(root), paths=paths))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ok"] * 12
    # projects/ (the new project), the project (s1), s1 (subagents), subagents (12 files): once each
    assert len(calls) == 4, calls


@pytest.mark.skipif(not HAS_STRACE, reason="strace not installed")
@pytest.mark.parametrize("failing", [1, 2, 3])
def test_a_failed_sync_fails_the_whole_batch(tmp_path, failing):
    """projects/ (holding both new projects), then each project's directory:
    whichever fsync fails, every file is refused (y's entries hang on the
    directory x's creation made), and the other syncs still run."""
    root = tmp_path / "root"
    (root / "projects").mkdir(parents=True)
    paths = [str(root / "projects" / "-a" / "x.jsonl"), str(root / "projects" / "-a" / "y.jsonl"),
             str(root / "projects" / "-b" / "z.jsonl")]
    proc, calls = _traced(tmp_path, CREATE.format(root=str(root), paths=paths),
                          "-e", f"inject=fsync:error=EIO:when={failing}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["EIO"] * 3
    assert len(calls) == 3


def _burst(d, sid: str, agents: int) -> None:
    """One connection sends a main entry and one entry for each of ``agents``
    new agents of session ``sid`` before reading any answer."""
    with d.client() as c:
        ids = []
        for k in range(agents + 1):
            rid = c.next_id()
            c.send(m.Append(id=rid, session=sid, cwd=CWD, durability="durable",
                            entries=[line(user(f"{'main' if k == 0 else f'agent {k}'}", isSidechain=k > 0))],
                            agent=None if k == 0 else f"a{k}"))
            ids.append(rid)
        for rid in ids:
            assert isinstance(c.receive(rid), m.Appended)


def test_a_burst_of_new_agents_all_get_their_entries(daemon):
    sid = str(uuid.uuid4())
    _burst(daemon, sid, 20)
    project = project_dir(daemon.root, CWD)
    assert [e["message"]["content"] for e in read_entries(main_path(daemon.root, CWD, sid))] == ["main"]
    for k in range(1, 21):
        assert [e["message"]["content"] for e in read_entries(agent_file(project, sid, f"a{k}"))] == [f"agent {k}"]
    assert len(list(subagents_dir(project, sid).glob("*.jsonl"))) == 20


@pytest.mark.skipif(not HAS_STRACE, reason="strace not installed")
def test_the_daemon_syncs_a_burst_of_agent_files_directory_once_a_batch(daemon_factory):
    """Twenty agents start in one pass: the file thread makes the first file
    alone and the others in a batch behind it, so their directory is synced a
    couple of times, not twenty (each sync a journal commit the next waited
    for)."""
    d = daemon_factory()
    trace = d.base / "fsyncs"
    d.start(wrap=["strace", "-f", "-qq", "-o", str(trace), "-e", "trace=fsync"])
    sid = str(uuid.uuid4())
    _burst(d, sid, 20)
    d.cli("stop")  # through the socket: strace does not pass SIGTERM on
    assert d.wait() == 0
    project = project_dir(d.root, CWD)
    for k in range(1, 21):
        assert read_entries(agent_file(project, sid, f"a{k}"))[0]["message"]["content"] == f"agent {k}"
    fsyncs = [ln for ln in trace.read_text().splitlines() if "fsync(" in ln]
    # Before batches: 27 (twenty of subagents/ alone); with them 8: a few batches'
    # worth for the whole tree, whatever the daemon's other fsyncs (its state files).
    assert len(fsyncs) <= 12, fsyncs


def test_a_burst_of_new_projects_under_a_low_fd_limit(daemon_factory):
    """48 sessions in projects of their own, asked for in one pass, under a
    64-fd limit (32 transcript fds at most): the directories a batch holds for
    its sync are borrowed from that budget, so neither a creation nor the
    connections run out of descriptors."""
    d = daemon_factory().start(nofile=64)
    sids = [str(uuid.uuid4()) for _ in range(48)]
    with d.client() as c:
        for k in range(40):  # the LRU full: 32 transcript fds open
            c.call(m.Append(id=c.next_id(), session=str(uuid.uuid4()), cwd="/work/old", durability="written",
                            entries=[line(user(f"old {k}"))]))
        ids = []
        for k, sid in enumerate(sids):
            rid = c.next_id()
            c.send(m.Append(id=rid, session=sid, cwd=f"/work/p{k}", durability="durable",
                            entries=[line(user(f"first {k}"))]))
            ids.append(rid)
        answers = [c.receive(rid) for rid in ids]
    assert all(isinstance(a, m.Appended) for a in answers), [a for a in answers if not isinstance(a, m.Appended)][:3]
    for k, sid in enumerate(sids):
        assert [e["message"]["content"] for e in read_entries(main_path(d.root, f"/work/p{k}", sid))] == [f"first {k}"]
    assert "Too many open files" not in d.log_text()


def _daemon_tracing_one_file(daemon_factory, fault: str):
    """A daemon under ``strace -f`` that records the fsyncs and writes on one
    new session's file and its project directory, with ``fault`` injected into
    those fsyncs (an strace ``inject=`` value); the daemon, the session id, its
    file's path and the trace file."""
    d = daemon_factory()
    sid = str(uuid.uuid4())
    path = main_path(d.root, CWD, sid)
    trace = d.base / "trace"
    d.start(wrap=["strace", "-f", "-qq", "-y", "-o", str(trace), "-e", "trace=fsync,write",
                  "-P", str(path.parent), "-P", str(path), "-e", f"inject=fsync:{fault}"])
    return d, sid, path, trace


@pytest.mark.skipif(not HAS_STRACE, reason="strace not installed")
def test_after_a_failed_sync_the_directories_are_synced_again_before_the_write(daemon_factory):
    """The project directory's fsync fails: the append is refused, and when the
    writer retries, the file is there already; it must not be written before
    every directory level of it was synced again (its entry may not be on
    disk), whatever a later open finds."""
    d, sid, path, trace = _daemon_tracing_one_file(daemon_factory, "error=EIO:when=1")
    with d.client() as c:
        with pytest.raises(RemoteError) as err:
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(user("first"))], durability="written"))
        assert err.value.code == "io_error"
        wait_until(lambda: not c.status().queuedEntries, "the retried write", timeout=20)
    d.cli("stop")  # through the socket: strace does not pass SIGTERM on
    assert d.wait() == 0
    assert [e["message"]["content"] for e in read_entries(path)] == ["first"]
    calls = [c for c in trace.read_text().splitlines() if "fsync(" in c or "write(" in c]
    failed = next(i for i, c in enumerate(calls) if "fsync(" in c and "EIO" in c)
    first_write = next(i for i, c in enumerate(calls) if "write(" in c and path.name in c)
    assert failed < first_write
    assert any("fsync(" in c and "= 0" in c for c in calls[failed + 1:first_write]), calls


def _events(trace: Path, name: str) -> list[str]:
    """The order ``strace -f`` saw things in: ``sync-end`` where an fsync
    returned (its own line, or its resumption after another thread's call was
    printed in between), ``write`` for a write into the file ``name``."""
    events = []
    for ln in trace.read_text().splitlines():
        if "fsync resumed>" in ln or ("fsync(" in ln and "<unfinished" not in ln):
            events.append("sync-end")
        elif "write(" in ln and name in ln and "<unfinished" not in ln:
            events.append("write")
    return events


@pytest.mark.skipif(not HAS_STRACE, reason="strace not installed")
def test_shutdown_writes_a_new_file_only_after_its_batch_synced_it(daemon_factory):
    """The daemon stops while a batch's fsync of the new file's directory has
    not run yet (strace holds it 0.6 s before it starts): shutdown's drain
    waits for the batch before it writes, so the file's bytes never go ahead
    of its directory entry."""
    d, sid, path, trace = _daemon_tracing_one_file(daemon_factory, "delay_enter=600000")
    with d.client() as c:
        c.send(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(user("at stop"))], durability="durable"))
        wait_until(lambda: path.exists(), "the batch to make the file", timeout=10, every=0.005)
        c.send(m.Shutdown(id=c.next_id()))  # the stop at once, not a CLI's start-up later
    assert d.wait() == 0
    assert [e["message"]["content"] for e in read_entries(path)] == ["at stop"]
    events = _events(trace, path.name)
    assert "sync-end" in events and "write" in events, trace.read_text()
    assert events.index("sync-end") < events.index("write"), trace.read_text()  # the batch's sync returned first


def test_one_file_failing_after_its_creation_leaves_its_batch_served(tmp_path):
    """The writer in-process on a real loop and store: three new files made in
    one batch, and the write observer fails (a bug) on the second one's write.
    The other two are written and answered; none is left waiting on its
    creation for ever."""
    import asyncio

    from sessiond.config import Settings
    from sessiond.daemon.filequeue import Stats
    from sessiond.daemon.writer import Writer

    root = tmp_path / "root"
    loop = asyncio.new_event_loop()
    writer = Writer(loop, Settings(root=root), Stats())

    raised: list[Path] = []

    def observer(path: Path, lines: list[bytes], end: int) -> None:
        if path.name == "s1.jsonl" and not raised:
            raised.append(path)
            raise RuntimeError("an observer's bug")

    writer.observers.append(observer)
    answers: dict[int, object] = {}
    queues = [writer.queue(root / "projects" / f"-p{i}" / f"s{i}.jsonl") for i in range(3)]
    try:
        for i, q in enumerate(queues):
            writer.enqueue(q, [line(user(f"entry {i}")).rstrip(b"\n")])
            writer.when_written(q, lambda err, i=i: answers.setdefault(i, err))
        loop.run_until_complete(asyncio.sleep(0))  # the end of the pass asks for the files: one batch
        deadline = loop.time() + 10
        while len(answers) < 2 and loop.time() < deadline:
            loop.run_until_complete(asyncio.sleep(0.01))
        assert raised, "the observer never ran on s1"
        assert answers.get(0) is None and 0 in answers and answers.get(2) is None and 2 in answers, answers
        assert not any(q.in_worker for q in queues)
        assert [e["message"]["content"] for e in read_entries(queues[2].path)] == ["entry 2"]
    finally:
        writer.drain_everything()
        writer.close()
        loop.close()
