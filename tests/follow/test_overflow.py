"""More files appearing at once than the kernel's inotify queue holds events
for (``fs.inotify.max_queued_events``) while the daemon is held up: the queue
overflows and the events of many new files are lost. The follower walks the
tree again, so every session made meanwhile is followed (a watcher of the
last one made sees its next line live), a new subagent dir included."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest

from sessiond.store.paths import project_dir
from sessiond.wire import messages as m
from tests.helpers import wait_until

from .foreign import Foreign, Frames, by_file, corpus_lines, follow_status, raw

CWD = "/work/flooded"
QUEUED = Path("/proc/sys/fs/inotify/max_queued_events")


def queue_size() -> int:
    try:
        return int(QUEUED.read_text())
    except (OSError, ValueError):
        return 0


@pytest.mark.skipif(not 0 < queue_size() <= 65536, reason="needs inotify with a queue small enough to overflow")
def test_sessions_made_while_events_were_lost_are_followed(daemon):
    d = project_dir(daemon.root, CWD)
    d.mkdir(parents=True)
    first = corpus_lines(1, skip=100)[0].encode()
    lines = corpus_lines(2, skip=101)
    sids = [str(uuid.uuid4()) for _ in range(queue_size() // 2 + 500)]  # a create and a modify event each
    agent = d / sids[0] / "subagents" / "agent-a1.jsonl"
    with daemon.client() as c:
        before = c.status().follow["files"]
    daemon.signal(signal.SIGSTOP)  # held up: the events pile up in the kernel's queue
    try:
        for sid in sids:
            (d / f"{sid}.jsonl").write_bytes(first)
        agent.parent.mkdir(parents=True)
        agent.write_bytes(first)
    finally:
        daemon.signal(signal.SIGCONT)
    last = d / f"{sids[-1]}.jsonl"
    wait_until(lambda: follow_status(daemon)["files"] == before + len(sids) + 1, "every new file to be followed",
               timeout=60)
    with Foreign() as w, daemon.client() as watching, daemon.client() as watching_last:
        watch = Frames(watching, m.Subscribe(id=watching.next_id(), session=sids[0], path=str(d / f"{sids[0]}.jsonl"),
                                             agents=True))
        other = Frames(watching_last, m.Subscribe(id=watching_last.next_id(), session=sids[-1], path=str(last)))
        w.do("append", agent, data=lines[0])
        w.do("append", last, data=lines[1])
        rel = agent.relative_to(d).as_posix()
        seen = by_file(watch.until((rel, raw([lines[0]])[0]), timeout=30))
        seen_last = by_file(other.until((last.name, raw([lines[1]])[0]), timeout=30))
    assert seen[rel][-1:] == raw([lines[0]]) and seen[rel].count(raw([lines[0]])[0]) == 1  # (with what it held before)
    assert seen_last[last.name] == raw([lines[1]])
    assert "event queue overflowed" in daemon.log_text()
