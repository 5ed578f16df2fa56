"""The daemon appending to a session another program is in the middle of a
line in: its lines wait for that line's end instead of cutting it off as a
torn tail (which would leave the line's rest, written later, as a fragment
after the daemon's lines), so the file holds both writers' lines whole, each
once, and a watcher sees them so. A fragment nobody is writing any more is
still moved aside (``tests/crash/test_faults.py``)."""

from __future__ import annotations

import os
import threading
import time
import uuid

from sessiond.store.paths import project_dir
from sessiond.wire import messages as m
from tests.helpers import assistant, line, read_entries, wait_until

from .foreign import Foreign, Frames, by_file, corpus_lines, raw

CWD = "/work/mid-line"
WAITING = "ends inside a line another writer is in the middle of"


def append_in_background(d, sid: str, entry: dict) -> tuple[threading.Thread, list]:
    """The daemon's append, ``written``, on a thread (it is answered only once written)."""
    answers: list = []

    def run() -> None:
        with d.client(timeout=60.0) as c:
            answers.append(c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(entry)],
                                           durability="written")))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, answers


def check_both_whole(d, path, watch: Frames, foreign: list[str], mine: dict, waits: int) -> None:
    body = path.read_bytes()
    assert body == "".join(foreign).encode() + line(mine) + b"\n", body[-300:]
    assert not path.with_name(path.name + ".torn").exists()
    seen = by_file(watch.until((path.name, line(mine))))
    assert seen[path.name] == raw(foreign[1:]) + [line(mine)]  # each once, whole, in file order
    assert d.log_text().count(WAITING) == waits


def test_a_line_held_open_mid_write_is_waited_for(daemon):
    """The writer keeps its descriptor open between the two halves of a line
    (a buffered writer flushing a long line in parts, or one stopped between
    them): however old the half line is, it is not cut off."""
    sid = str(uuid.uuid4())
    path = project_dir(daemon.root, CWD) / f"{sid}.jsonl"
    foreign = corpus_lines(3, skip=40)
    mine = assistant("the daemon's line")
    half = len(foreign[2]) // 2
    with Foreign() as w, daemon.client() as c:
        w.do("append", path, data=foreign[0])
        watch = Frames(c, m.Subscribe(id=c.next_id(), session=sid, path=str(path)))
        w.do("append", path, data=foreign[1])
        w.do("hold", path, data=foreign[2][:half])
        past = time.time() - 3600
        os.utime(path, (past, past))  # written long ago: only the open descriptor says a writer is there
        t, answers = append_in_background(daemon, sid, mine)
        wait_until(lambda: WAITING in daemon.log_text() or answers, "the daemon to see the line being written")
        w.do("release", path, data=foreign[2][half:])
        t.join(timeout=30)
        assert answers and answers[0].accepted == 1
        check_both_whole(daemon, path, watch, foreign, mine, waits=1)


def test_a_line_finished_a_moment_later_is_waited_for(daemon):
    """The writer opens the file for each part (Claude Code's way: open,
    append, close): a half line written just now is a line being written."""
    sid = str(uuid.uuid4())
    path = project_dir(daemon.root, CWD) / f"{sid}.jsonl"
    foreign = corpus_lines(3, skip=44)
    mine = assistant("the daemon's line, after")
    half = len(foreign[2]) // 3
    with Foreign() as w, daemon.client() as c:
        w.do("append", path, data=foreign[0])
        watch = Frames(c, m.Subscribe(id=c.next_id(), session=sid, path=str(path)))
        w.do("append", path, data=foreign[1])
        w.do("append", path, data=foreign[2][:half])
        t, answers = append_in_background(daemon, sid, mine)
        wait_until(lambda: WAITING in daemon.log_text() or answers, "the daemon to see the line being written")
        w.do("append", path, data=foreign[2][half:])
        t.join(timeout=30)
        assert answers and answers[0].accepted == 1
        check_both_whole(daemon, path, watch, foreign, mine, waits=1)
    assert [e.get("uuid") for e in read_entries(path)][-1] == mine["uuid"]
