"""The daemon's first write into a file the follower has not seen yet (another
program made it a moment ago, and its event is still in the kernel's queue):
the lines that program wrote before the daemon's are passed on, once, and the
daemon's own are not (the writer reports those). The follower is driven as
the writer drives it, its own observer called right after the write."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from sessiond.daemon.follow import Follower
from sessiond.daemon.follow.reading import MAX_READ


@asynccontextmanager
async def following(root: Path, path: Path) -> AsyncIterator[tuple[Follower, list[bytes]]]:
    """A started follower of ``root``, and the lines of ``path`` it passes on."""
    published: list[bytes] = []
    follower = Follower(root, asyncio.get_running_loop(),
                        lambda p, lines, end: published.extend(bytes(x) for x in lines) if p == path else None,
                        lambda p: None)
    try:
        await follower.start()
        yield follower, published
    finally:
        follower.close()


def theirs_then_mine(follower: Follower, path: Path, theirs: list[bytes], mine: bytes) -> None:
    """Another program appends ``theirs`` (a line each), then the daemon appends
    ``mine`` and tells the follower, as the writer tells its own observer."""
    with open(path, "ab") as f:
        for x in theirs:
            f.write(x + b"\n")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, mine)
        st = os.fstat(fd)
    finally:
        os.close(fd)
    follower.own_write(path, mine, st.st_size, (st.st_dev, st.st_ino))


def test_a_new_files_foreign_lines_before_the_daemons_first_write_are_passed_on(tmp_path: Path):
    root = tmp_path / "root"
    project = root / "projects" / "-work-first"
    project.mkdir(parents=True)
    path = project / f"{uuid.uuid4()}.jsonl"
    theirs = [json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "n": n}).encode() for n in range(2)]
    mine = json.dumps({"type": "assistant", "uuid": str(uuid.uuid4())}).encode() + b"\n"

    async def run() -> list[bytes]:
        async with following(root, path) as (follower, published):
            theirs_then_mine(follower, path, theirs, mine)  # Claude Code's new session, its event not read yet
            assert published == theirs  # at once, before the daemon's lines reach the observers
            async with asyncio.timeout(20):
                while follower.worker_reads + follower.loop_looks == 0:  # the events are read and looked at
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # a repeat would come now; none may
            return published

    assert asyncio.run(run()) == theirs


def test_more_foreign_lines_than_one_read_before_the_daemons_write_are_all_passed_on(tmp_path: Path):
    """Over ``MAX_READ`` of another program's lines between the follower's
    last look and the daemon's write: every one is passed on, none skipped."""
    root = tmp_path / "root"
    project = root / "projects" / "-work-many"
    project.mkdir(parents=True)
    path = project / f"{uuid.uuid4()}.jsonl"
    path.write_bytes(json.dumps({"type": "user", "uuid": str(uuid.uuid4())}).encode() + b"\n")
    pad = "x" * (MAX_READ // 6)
    theirs = [json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "pad": pad}).encode() for _ in range(10)]
    mine = json.dumps({"type": "assistant", "uuid": str(uuid.uuid4())}).encode() + b"\n"

    async def run() -> list[bytes]:
        async with following(root, path) as (follower, published):
            theirs_then_mine(follower, path, theirs, mine)
            return published

    assert asyncio.run(run()) == theirs
