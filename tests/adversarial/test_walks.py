"""Walks and scans whose cost a file controls: a real daemon following a root
that foreign writers (Claude Code) write into, attacked with real files. What
a hostile file costs is measured in what the daemon reads (``rchar`` in
/proc/PID/io: every byte its threads pread, from the page cache or not) and
in its peak RSS; each test bounds that by the file's size, where reading the
file again at every look costs its size times the looks."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest

from sessiond.store.agents import agent_files
from sessiond.store.paths import project_dir
from sessiond.wire import messages as m
from tests.follow.foreign import Frames, follow_status
from tests.helpers import wait_until

from .attacks import MiB, peak_rss

pytestmark = pytest.mark.timeout(300)
CWD = "/work/walks"
GiB = 1024 * MiB


def rchar(pid: int) -> int:
    """Bytes the process read by syscalls so far (all its threads)."""
    for row in Path(f"/proc/{pid}/io").read_text().splitlines():
        if row.startswith("rchar:"):
            return int(row.split()[1])
    raise AssertionError("no rchar in /proc io")


def entry(text: str) -> bytes:
    return json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "sessionId": "s",
                       "message": {"role": "user", "content": text}}).encode() + b"\n"


def append(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(data)


def session_file(d) -> Path:
    return project_dir(d.root, CWD) / f"{uuid.uuid4()}.jsonl"


def followed_bytes(d) -> int:
    f = follow_status(d)
    return f["bytes"] + f["known_bytes"]


def test_a_line_growing_a_byte_at_a_time_is_read_once_not_at_every_pass(daemon):
    """A foreign writer starts a 2 MiB line and then adds one byte every 2 ms
    for a few seconds, never a newline, then ends it: the follower looks at
    the unfinished line from where its last look stopped, so the daemon reads
    about the line's size (a few times over: looked at, read whole once ended),
    not its size at each of the hundreds of passes the bytes cause."""
    path = session_file(daemon)
    append(path, entry("before"))
    wait_until(lambda: followed_bytes(daemon) >= path.stat().st_size, "the follower to have the file")
    head = b'{"type":"user","message":{"role":"user","content":"'
    before = rchar(daemon.pid)
    append(path, head + b"x" * (2 * MiB))
    with open(path, "ab", buffering=0) as f:
        for _ in range(1500):
            f.write(b"y")
            time.sleep(0.002)
        f.write(b'"}}\n')
    size = path.stat().st_size
    wait_until(lambda: followed_bytes(daemon) >= size, "the follower to pass the ended line on")
    read = rchar(daemon.pid) - before
    line = size - len(entry("before"))
    print(f"line {line / MiB:.2f} MiB, the daemon read {read / MiB:.2f} MiB")
    assert read < 6 * line, f"the daemon read {read / MiB:.1f} MiB for a {line / MiB:.1f} MiB line"


def test_a_gigabyte_line_is_looked_at_once_and_holds_up_no_other_file(daemon):
    """A 1 GiB file without a newline appears (sparse: zeros), and another
    session appends a line just after: the other line is passed on after a
    few MAX_READ-sized looks at the big one, not after all of it. The big
    one, then grown ten times by a byte, is looked at once in all (not once
    per growth), and the line that finally ends it is passed over, the entry
    after it passed on; the daemon's RSS grows by a few reads, not by the line."""
    other = session_file(daemon)
    append(other, entry("other, before"))
    wait_until(lambda: followed_bytes(daemon) >= other.stat().st_size, "the follower to have the other file")
    lines = follow_status(daemon)["lines"]
    fresh = peak_rss(daemon.pid)
    before = rchar(daemon.pid)
    hostile = session_file(daemon)
    with open(hostile, "wb") as f:
        f.truncate(GiB)
    append(other, entry("other, after"))
    wait_until(lambda: follow_status(daemon)["lines"] > lines, "the other file's line to be passed on")
    at_other = rchar(daemon.pid) - before
    wait_until(lambda: rchar(daemon.pid) - before >= GiB, "the follower to look at the whole big line", timeout=120)
    for _ in range(10):
        append(hostile, b"z")
        time.sleep(0.05)
    append(hostile, b"\n" + entry("after the big line"))
    wait_until(lambda: follow_status(daemon)["lines"] > lines + 1, "the entry after the big line", timeout=120)
    read = rchar(daemon.pid) - before
    grown = peak_rss(daemon.pid) - fresh
    print(f"read {at_other / MiB:.0f} MiB before the other line was passed on, {read / MiB:.0f} MiB in all; "
          f"peak RSS +{grown / MiB:.1f} MiB")
    assert at_other < GiB // 2, f"the other file's line waited for {at_other / MiB:.0f} MiB of the big line"
    assert read < GiB + 256 * MiB, f"the daemon read {read / MiB:.0f} MiB for a 1 GiB line grown 10 times"
    assert grown < 64 * MiB, f"the daemon's peak RSS grew {grown / MiB:.1f} MiB"


def test_a_followed_file_swapped_for_a_fifo_and_back(daemon):
    """A followed file replaced by a FIFO between two looks: nothing blocks on
    it (another session's lines go on being passed on), and the regular file
    put back is followed from its start."""
    path, other = session_file(daemon), session_file(daemon)
    append(path, entry("one"))
    append(other, entry("other"))
    wait_until(lambda: follow_status(daemon)["lines"] >= 2, "both files followed")
    fifo = path.with_suffix(".fifo")
    os.mkfifo(fifo)
    os.rename(fifo, path)
    append(other, entry("other, while a FIFO stands there"))
    wait_until(lambda: follow_status(daemon)["lines"] >= 3, "the other file's line")
    back = path.with_suffix(".back")
    back.write_bytes(entry("back, one") + entry("back, two"))
    os.rename(back, path)
    wait_until(lambda: follow_status(daemon)["lines"] >= 5, "the regular file put back, from its start")


def aged(tree: Path) -> dict[Path, int]:
    """Every dir of ``tree`` with its atime set before its mtime, so that the
    next listing of it moves its atime (relatime); their atimes now."""
    out = {}
    for d in [tree, *(p for p in tree.rglob("*") if p.is_dir() and not p.is_symlink())]:
        st = d.stat()
        os.utime(d, ns=(st.st_mtime_ns - 10**10, st.st_mtime_ns))
        out[d] = d.stat().st_atime_ns
    return out


def test_a_subagents_symlink_out_of_the_root_is_not_walked(daemon, short_tmp):
    """``<session>/subagents`` planted as a symlink to a tree outside the root
    (there: a dir with an agent file, a workflows run, and a symlink to /):
    a watcher with agents subscribes, gets the session's lines, and the daemon
    never listed a dir of that tree (their atimes did not move, where a
    listing moves them); before, the tree was walked with rglob, on the loop."""
    outside = short_tmp / "outside"
    (outside / "workflows" / "run").mkdir(parents=True)
    (outside / "agent-x.jsonl").write_bytes(entry("not the session's"))
    (outside / "workflows" / "run" / "agent-y.jsonl").write_bytes(entry("not the session's"))
    os.symlink("/", outside / "everything")
    before = aged(outside)
    os.listdir(outside / "workflows")  # the probe: a listing does move an aged atime here
    if (outside / "workflows").stat().st_atime_ns == before[outside / "workflows"]:
        pytest.skip("this filesystem does not update atimes on a listing (noatime)")
    before = aged(outside)
    main = session_file(daemon)
    append(main, entry("first"))
    main.with_suffix("").mkdir()
    os.symlink(outside, main.with_suffix("") / "subagents")
    with daemon.client() as c:
        watch = Frames(c, m.Subscribe(id=c.next_id(), session=main.stem, path=str(main), agents=True))
        second = entry("second")
        append(main, second)
        got = watch.until((main.name, second[:-1]))
        assert [x for f in got for x in f.lines] == [second[:-1]]
    with daemon.client() as c:
        wait_until(lambda: c.status().workers["jobsRunning"] == 0, "the read pool to be idle")
    assert {d: d.stat().st_atime_ns for d in before} == before, "a dir outside the root was listed"


def test_looking_for_agent_files_is_bounded_and_follows_no_symlink(tmp_path):
    """The one look every reader of agent files uses (the watchers, resume,
    export): a subagents dir of many entries is looked at up to the bound
    (and says it stopped); a symlinked session dir, subagents dir or run dir
    is not followed, nor a dir off the layout (a deep chain, a symlink loop);
    a FIFO named like an agent file is not one."""
    session = tmp_path / "s"
    base = session / "subagents"
    (base / "workflows" / "run").mkdir(parents=True)
    (base / "agent-a.jsonl").write_bytes(b"{}\n")
    (base / "workflows" / "run" / "agent-b.jsonl").write_bytes(b"{}\n{}\n")
    os.mkfifo(base / "agent-fifo.jsonl")
    os.symlink("/", base / "workflows" / "root")
    (tmp_path / "elsewhere" / "subagents").mkdir(parents=True)
    (tmp_path / "elsewhere" / "subagents" / "agent-c.jsonl").write_bytes(b"{}\n")
    os.symlink(tmp_path / "elsewhere", tmp_path / "linked")
    chain = base / "deep"
    for _ in range(50):  # a deep chain beside the layout, a symlink loop at its end
        chain = chain / "d"
    chain.mkdir(parents=True)
    os.symlink(base, chain / "loop")
    before = aged(base / "deep")
    found = agent_files(session)
    assert [(f.agent, f.size) for f in found.files] == [("a", 3), ("b", 6)] and found.complete
    assert {d: d.stat().st_atime_ns for d in before} == before, "a dir off the layout was listed"
    assert agent_files(tmp_path / "linked").files == []
    for i in range(3000):
        (base / f"junk-{i}").touch()
    assert not agent_files(session, max_entries=1000).complete
    assert agent_files(session, max_entries=4000).complete


def test_a_polled_session_dir_swapped_for_a_symlink_is_not_looked_through(daemon_factory, short_tmp):
    """Without inotify watches (``follow_max_watches = 0``: every dir is
    re-stat'ed each second), a session dir the follower polls is replaced by
    a symlink to a tree outside the root holding transcripts and a symlink to
    /: the polls go on (the main file's new lines are passed on), but nothing
    of the tree is listed or followed; before, the poll listed the tree
    through the symlink and walked and followed what was in it."""
    cfg = short_tmp / "no-watches.toml"
    cfg.write_text("follow_max_watches = 0\n")
    d = daemon_factory().start("--config", str(cfg))
    outside = short_tmp / "outside"
    (outside / "deeper").mkdir(parents=True)
    (outside / "planted.jsonl").write_bytes(entry("outside the root"))
    (outside / "deeper" / "planted.jsonl").write_bytes(entry("outside the root, deeper"))
    os.symlink("/", outside / "everything")
    main = session_file(d)
    append(main, entry("first"))
    session_dir = main.with_suffix("")
    session_dir.mkdir()
    wait_until(lambda: follow_status(d)["polled_dirs"] >= 3 and followed_bytes(d) >= main.stat().st_size,
               "the follower to poll the session dir")
    lines = follow_status(d)["lines"]
    before = aged(outside)
    session_dir.rename(main.with_suffix(".away"))
    os.symlink(outside, session_dir)
    for n in (1, 2, 3):  # three polls after the swap
        append(main, entry(f"after the swap {n}"))
        wait_until(lambda: follow_status(d)["lines"] >= lines + n, "the follower's next poll")  # noqa: B023 (waited on here)
    assert follow_status(d)["lines"] == lines + 3, "a transcript outside the root was followed"
    assert {p: p.stat().st_atime_ns for p in before} == before, "a dir outside the root was listed"


def test_watchers_catching_up_over_a_gigabyte_line_leave_the_read_pool_to_others(daemon_factory, short_tmp):
    """Two watchers (two connections, as many as the read pool has threads)
    catch up from the start of a session whose last line is 1 GiB long and
    unfinished: each catch-up read looks at ``SCAN_LIMIT`` of it and yields
    its thread, so a third client's List is answered after a few such reads,
    not after a whole look at the line on each thread (that List used to wait
    for more than the line's size of reading)."""
    cfg = short_tmp / "two-threads.toml"
    cfg.write_text("read_threads = 2\n")
    d = daemon_factory()
    path = project_dir(d.root, CWD) / f"{uuid.uuid4()}.jsonl"
    first = entry("first")
    append(path, first)
    with open(path, "ab") as f:
        f.truncate(len(first) + GiB)  # zeros, no newline: a line still being written
    d.start("--config", str(cfg))
    with d.client() as a, d.client() as b, d.client() as c:
        before = rchar(d.pid)
        watches = [Frames(x, m.Subscribe(id=x.next_id(), session=path.stem, path=str(path), offset=0)) for x in (a, b)]
        for w in watches:
            w.until((path.name, first[:-1]))
        answer = c.call(m.List(id=c.next_id(), all=True))
        at_list = rchar(d.pid) - before
        print(f"the List waited for {at_list / MiB:.0f} MiB of reads")
        assert isinstance(answer, m.Listed), answer
        assert at_list < 256 * MiB, f"the List waited for {at_list / MiB:.0f} MiB of the watchers' reads"
