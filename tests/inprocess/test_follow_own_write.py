"""The follower and the daemon's own writes to a file another program also
appends to: foreign lines that land just before a daemon write, before the
follower looked at them, are passed on when the writer reports its write."""

from __future__ import annotations

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
