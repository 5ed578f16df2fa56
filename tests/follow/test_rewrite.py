"""A followed file rewritten in place without changing its size: the change in
the middle, which no fingerprint of its edges shows, is found by the running
hash of the bytes passed on; the observers are told (a watcher starts the file
over) and it is read again from the start. A write of the same bytes is no
rewrite."""

from __future__ import annotations

import os
import uuid

from sessiond.daemon.follow.reading import Budget, FileState, read_new
from sessiond.store.paths import project_dir
from sessiond.wire import messages as m
from tests.helpers import wait_until

from .foreign import Foreign, Frames, corpus_lines, follow_status, followed, middle_rewrite, raw

CWD = "/work/rewritten"


def check_rewrite_found(d, w: Foreign, path, lines: list[str]) -> None:
    sid = path.stem
    with d.client() as c:
        watch = Frames(c, m.Subscribe(id=c.next_id(), session=sid, path=str(path), offset=0))
        watch.until((path.name, raw([lines[2]])[0]))
        followed(d, path)
        resets = follow_status(d)["resets"]
        at, data = middle_rewrite(lines)
        before = path.read_bytes()
        w.do("overwrite", path, data=data, offset=at)
        after = path.read_bytes()
        assert len(after) == len(before) and after[:64] == before[:64] and after[-64:] == before[-64:]
        frames = watch.until((path.name, after.splitlines()[1]))  # the rewritten line, from the start over
        assert frames[0].reset and frames[0].offset == 0, frames[0]
        assert b"".join(x + b"\n" for f in frames for x in f.lines) == after
        assert follow_status(d)["resets"] == resets + 1


def test_a_same_size_rewrite_in_the_middle_is_found(daemon):
    path = project_dir(daemon.root, CWD) / f"{uuid.uuid4()}.jsonl"
    lines = corpus_lines(3, skip=5)
    with Foreign() as w:
        for x in lines:
            w.do("append", path, data=x)
        check_rewrite_found(daemon, w, path, lines)


def test_found_in_a_file_that_was_there_before_the_daemon(daemon_factory):
    d = daemon_factory()
    path = project_dir(d.root, CWD) / f"{uuid.uuid4()}.jsonl"
    lines = corpus_lines(3, skip=9)
    with Foreign() as w:
        for x in lines:
            w.do("append", path, data=x)
        d.start()
        check_rewrite_found(d, w, path, lines)


def test_found_by_the_restat_where_there_are_no_watches(daemon_factory, short_tmp):
    cfg = short_tmp / "nowatch.toml"
    cfg.write_text("follow_max_watches = 0\n")
    d = daemon_factory().start("--config", str(cfg))
    path = project_dir(d.root, CWD) / f"{uuid.uuid4()}.jsonl"
    lines = corpus_lines(3, skip=13)
    with Foreign() as w:
        for x in lines:
            w.do("append", path, data=x)
        assert follow_status(d)["watches"] == 0
        check_rewrite_found(d, w, path, lines)


def test_writing_the_same_bytes_again_is_no_rewrite(daemon):
    path = project_dir(daemon.root, CWD) / f"{uuid.uuid4()}.jsonl"
    lines = corpus_lines(4, skip=17)
    with Foreign() as w, daemon.client() as c:
        for x in lines[:3]:
            w.do("append", path, data=x)
        watch = Frames(c, m.Subscribe(id=c.next_id(), session=path.stem, path=str(path), offset=0))
        watch.until((path.name, raw([lines[2]])[0]))
        followed(daemon, path)
        at, _ = middle_rewrite(lines)
        w.do("overwrite", path, data=path.read_bytes()[at:at + 8].decode(), offset=at)  # the same bytes
        wait_until(lambda: follow_status(daemon)["rehashed_bytes"] > 0, "the follower to re-hash the file")
        w.do("append", path, data=lines[3])
        frames = watch.until((path.name, raw([lines[3]])[0]))
    assert not any(f.reset for f in frames) and [x for f in frames for x in f.lines] == raw([lines[3]])
    assert follow_status(daemon)["resets"] == 0


def test_a_write_between_a_looks_fstat_and_its_read_hides_no_later_rewrite(tmp_path, monkeypatch):
    """A foreign write that lands after a look's fstat is read by that look:
    the size it keeps is what it read, so a same-size rewrite in the middle, in
    a later tick, is re-hashed and found (the file did not grow since)."""
    path = tmp_path / "s.jsonl"
    first, second = b'{"a":"' + b"x" * 200 + b'"}\n', b'{"b":"' + b"y" * 100 + b'"}\n'
    path.write_bytes(first)
    pread = os.pread

    def append_then_pread(fd: int, n: int, at: int) -> bytes:  # the look's first read, after its fstat
        monkeypatch.setattr(os, "pread", pread)
        with path.open("ab") as f:
            f.write(second)
        return pread(fd, n, at)

    monkeypatch.setattr(os, "pread", append_then_pread)
    found = read_new(path, FileState(), Budget(1 << 20))
    assert found.reset is None and found.lines == [first[:-1], second[:-1]]
    state = FileState(found.end, found.ino, found.dev, found.tail, found.head, crc=found.crc, hashed=found.hashed,
                      size=found.size, mtime_ns=found.mtime_ns, ctime_ns=found.ctime_ns)  # as Follower._apply keeps it
    with path.open("r+b") as f:  # past the first 64 bytes, before the 64 before the offset
        f.seek(100)
        f.write(b"Z" * 8)
    later = found.mtime_ns + 1_000_000_000
    os.utime(path, ns=(later, later))
    assert read_new(path, state, Budget(1 << 20)).reset == "rewritten in place"
