"""The follower and the daemon's own writes to a file another program also
appends to: foreign lines that land just before a daemon write, before the
follower looked at them, are passed on when the writer reports its write; the
daemon's own writes are looked at on the loop, never read in the worker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from sessiond.daemon.follow import tree
from sessiond.daemon.follow.tree import COALESCE
from sessiond.wire import messages as m

from .conftest import InProcess, Peer, entry, in_process, until

pytestmark = pytest.mark.anyio


class Writing:
    """One session the in-process daemon writes, its follower started."""

    def __init__(self, d: InProcess, peer: Peer, cwd: str) -> None:
        self.follower = d.daemon.follower
        self.peer = peer
        self.cwd = cwd
        self.sid = str(uuid.uuid4())
        self.path: Path = d.transcript(self.sid, cwd)
        self.sent = 0

    async def append(self, *texts: str) -> None:
        """The daemon's write of ``texts``, acknowledged ``written``."""
        self.sent += 1
        self.peer.send(m.Append(id=self.sent, session=self.sid, cwd=self.cwd, entries=[entry(t) for t in texts],
                                durability="written"))
        await self.peer.wait_answers(self.sent)

    async def append_looked_at(self, text: str) -> None:
        """An append, then until the pass its modify event makes has looked at the file on the loop."""
        looks = self.follower.loop_looks
        await self.append(text)
        await until(lambda: self.follower.loop_looks > looks)

    async def started(self) -> None:
        """The session's first line written, and its project dir watched: the
        dir is new, and what is written before its watch makes no event (the
        walk that takes the watch finds it). One more append, looked at, shows
        the events flowing."""
        await self.append("first")
        watched = self.follower.tree.dirs
        await until(lambda: self.path.parent in watched.values())
        await self.append_looked_at("started")


@asynccontextmanager
async def writing(tmp_path: Path, cwd: str) -> AsyncIterator[Writing]:
    async with in_process(tmp_path) as d:
        await d.daemon.follower.start()
        yield Writing(d, await d.greeted(), cwd)


async def test_foreign_lines_just_before_a_daemon_write_are_passed_on_once(tmp_path):
    async with writing(tmp_path, "/work/both") as w:
        follower, path = w.follower, w.path
        await w.append("mine 1")
        await until(lambda: path in follower.files and follower.files[path].offset == path.stat().st_size)
        before = follower.lines_followed
        with open(path, "ab") as f:  # another program's two lines, then at once the daemon's next write
            f.write(entry("foreign 1") + b"\n" + entry("foreign 2") + b"\n")
        await w.append("mine 2")
        await until(lambda: follower.lines_followed - before >= 2)
        assert follower.lines_followed - before == 2
        assert follower.files[path].offset == path.stat().st_size


async def test_the_daemons_own_appends_are_looked_at_on_the_loop_not_in_the_worker(tmp_path):
    """Every daemon write makes a modify event; the pass it makes looks at
    the file on the loop (nothing new, the fingerprints as ever), with no hop
    to the worker thread for what the daemon itself wrote."""
    async with writing(tmp_path, "/work/own") as w:
        follower = w.follower
        await w.started()
        reads = follower.worker_reads  # the new, empty file its creation event names may have been read
        first = follower.loop_looks
        for i in range(2, 22):
            await w.append_looked_at(f"mine {i}")  # each write's own pass, as while an agent writes
        assert follower.loop_looks - first >= 20
        assert follower.worker_reads == reads
        assert follower.lines_followed == 0  # nothing of the daemon's own passed on twice
        assert follower.files[w.path].offset == w.path.stat().st_size


async def test_a_daemon_writing_steadily_makes_no_look_while_its_pass_waits_not_one_per_write(tmp_path, monkeypatch):
    """A pass only the daemon's own writes made waits ``OWN_SETTLE`` before
    it looks, its events left queued. With the wait made longer than the
    test, forty writes farther apart than ``COALESCE`` (each made a pass and a
    look of its own before) make no look at all while it lasts, and the
    writer's own hook keeps the follower at the file's end meanwhile."""
    async with writing(tmp_path, "/work/steady") as w:
        follower = w.follower
        await w.started()
        monkeypatch.setattr(tree, "OWN_SETTLE", 600.0)  # from the next pass on; closing cancels it
        first = follower.loop_looks
        for i in range(40):
            await w.append(f"mine {i}")
            await asyncio.sleep(2 * COALESCE)
        assert follower.loop_looks == first
        assert follower._busy  # the pass the first of them made, still waiting
        assert follower.lines_followed == 0
        assert follower.files[w.path].offset == w.path.stat().st_size


async def test_foreign_lines_after_a_daemon_write_go_to_the_worker_and_are_passed_on_once(tmp_path):
    async with writing(tmp_path, "/work/both") as w:
        follower, path = w.follower, w.path
        await w.started()
        await w.append("mine 1")
        with open(path, "ab") as f:  # another program appends before the follower looked at the daemon's write
            f.write(entry("foreign 1") + b"\n" + entry("foreign 2") + b"\n")
        await until(lambda: follower.lines_followed >= 2)
        await w.append_looked_at("mine 2")  # a later pass: a second reading of the foreign lines would be done by now
        assert follower.lines_followed == 2
        assert follower.worker_reads >= 1
        assert follower.files[path].offset == path.stat().st_size


async def test_a_same_size_rewrite_just_after_a_daemon_write_is_found(tmp_path):
    """The look that follows the daemon's own write (on the loop) still
    compares the fingerprints: the last line overwritten in place, the size
    unchanged, is a rewrite."""
    async with writing(tmp_path, "/work/rw") as w:
        await w.started()
        await w.append("third", "fourth")
        data = w.path.read_bytes()
        with open(w.path, "r+b") as f:  # same length, other bytes, before the follower's look
            f.seek(len(data) - 9)
            f.write(b"REWRITTEN"[: 9])
        await until(lambda: w.follower.resets >= 1)
        assert w.path.stat().st_size == len(data)
