"""The follower and the daemon's own writes to a file another program also
appends to: foreign lines that land just before a daemon write, before the
follower looked at them, are passed on when the writer reports its write."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sessiond.wire import messages as m

from .conftest import entry, in_process, until

pytestmark = pytest.mark.anyio


async def test_foreign_lines_just_before_a_daemon_write_are_passed_on_once(tmp_path):
    async with in_process(tmp_path) as d:
        follower = d.daemon.follower
        await follower.start()
        peer = await d.greeted()
        sid = str(uuid.uuid4())
        peer.send(m.Append(id=1, session=sid, cwd="/work/both", entries=[entry("mine 1")], durability="written"))
        await peer.wait_answers(1)
        path = d.transcript(sid, "/work/both")
        await until(lambda: path in follower.files and follower.files[path].offset == path.stat().st_size)
        before = follower.lines_followed
        with open(path, "ab") as f:  # another program's two lines, then at once the daemon's next write
            f.write(entry("foreign 1") + b"\n" + entry("foreign 2") + b"\n")
        peer.send(m.Append(id=2, session=sid, cwd="/work/both", entries=[entry("mine 2")], durability="written"))
        await peer.wait_answers(2)
        await until(lambda: follower.lines_followed - before >= 2)
        assert follower.lines_followed - before == 2
        assert follower.files[path].offset == path.stat().st_size


async def _settled(follower) -> None:
    """Until no pass is due or running (every event the writes made was read)."""
    await until(lambda: not follower.dirty and not follower._busy)
    await asyncio.sleep(0.02)  # events still in the kernel's queue make one more pass
    await until(lambda: not follower.dirty and not follower._busy)


async def test_the_daemons_own_appends_are_looked_at_on_the_loop_not_in_the_worker(tmp_path):
    """Every daemon write makes a modify event; the passes those make look at
    the file on the loop (nothing new, the fingerprints as ever), with no hop
    to the worker thread for what the daemon itself wrote."""
    async with in_process(tmp_path) as d:
        follower = d.daemon.follower
        await follower.start()
        peer = await d.greeted()
        sid = str(uuid.uuid4())
        peer.send(m.Append(id=1, session=sid, cwd="/work/own", entries=[entry("mine 1")], durability="written"))
        await peer.wait_answers(1)
        await _settled(follower)
        reads = follower.worker_reads  # the new, empty file its creation event names may have been read
        for i in range(2, 42):
            peer.send(m.Append(id=i, session=sid, cwd="/work/own", entries=[entry(f"mine {i}")], durability="written"))
            await peer.wait_answers(i)
            await asyncio.sleep(0.002)  # passes run between the writes, as they do while an agent writes
        await _settled(follower)
        path = d.transcript(sid, "/work/own")
        assert follower.loop_looks >= 5
        assert follower.worker_reads == reads
        assert follower.lines_followed == 0  # nothing of the daemon's own passed on twice
        assert follower.files[path].offset == path.stat().st_size


async def test_foreign_lines_after_a_daemon_write_go_to_the_worker_and_are_passed_on_once(tmp_path):
    async with in_process(tmp_path) as d:
        follower = d.daemon.follower
        await follower.start()
        peer = await d.greeted()
        sid = str(uuid.uuid4())
        peer.send(m.Append(id=1, session=sid, cwd="/work/both", entries=[entry("mine 1")], durability="written"))
        path = d.transcript(sid, "/work/both")
        await peer.wait_answers(1)
        with open(path, "ab") as f:  # another program appends before the follower looked at the daemon's write
            f.write(entry("foreign 1") + b"\n" + entry("foreign 2") + b"\n")
        await until(lambda: follower.lines_followed >= 2)
        await _settled(follower)
        assert follower.lines_followed == 2
        assert follower.worker_reads >= 1
        assert follower.files[path].offset == path.stat().st_size


async def test_a_same_size_rewrite_just_after_a_daemon_write_is_found(tmp_path):
    """The look that follows the daemon's own write (on the loop) still
    compares the fingerprints: the last line overwritten in place, the size
    unchanged, is a rewrite."""
    async with in_process(tmp_path) as d:
        follower = d.daemon.follower
        await follower.start()
        peer = await d.greeted()
        sid = str(uuid.uuid4())
        peer.send(m.Append(id=1, session=sid, cwd="/work/rw", entries=[entry("first"), entry("second")],
                           durability="written"))
        path = d.transcript(sid, "/work/rw")
        await peer.wait_answers(1)
        data = path.read_bytes()
        with open(path, "r+b") as f:  # same length, other bytes, before the follower's look
            f.seek(len(data) - 9)
            f.write(b"REWRITTEN"[: 9])
        await until(lambda: follower.resets >= 1)
        assert path.stat().st_size == len(data)
