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

from sessiond.protocol.transcript.paths import project_dir
from tests.follow.foreign import follow_status
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
