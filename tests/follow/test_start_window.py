"""Lines written while the daemon starts: the start walk takes each file as
it reads it, and every byte written after that read is passed on once (events
that arrive during the walk wait for it), whichever dir the walk was in."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path

from sessiond.daemon.follow import Follower
from sessiond.daemon.follow.watches import Watches
from sessiond.wire import messages as m
from tests.helpers import wait_until

from .foreign import Frames

LOOPER = Path(__file__).with_name("looping_writer.py")
LINE = json.dumps({"type": "user", "message": {"role": "user", "content": "already there"}}).encode() + b"\n"


def whole(path: Path) -> int:
    data = path.read_bytes()
    return data.rfind(b"\n") + 1


def test_appends_during_the_start_walk_are_passed_on_exactly_once(daemon_factory):
    d = daemon_factory()
    projects = d.root / "projects"
    tree: list[Path] = []
    for k in range(4000):  # a tree the walk takes a while over
        p = projects / f"-p{k % 40}" / f"{uuid.uuid4()}.jsonl"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(LINE * 2)
        tree.append(p)
    targets = [tree[0], tree[1999], tree[-1],  # existing files, walked early, midway and late
               projects / "-p7" / f"{uuid.uuid4()}.jsonl",  # a new session in a dir the walk has
               projects / "-new-during-start" / f"{uuid.uuid4()}.jsonl"]  # and one in a new project dir
    stop = d.base / "stop-writing"
    looper = subprocess.Popen([sys.executable, str(LOOPER), str(stop), *map(str, targets)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert looper.stdout.readline().strip() == "writing"
        d.start()
        with d.client() as c:
            watch = Frames(c, m.Subscribe(id=c.next_id(), session=targets[0].stem, path=str(targets[0]), offset=0))
            with d.client() as c2:
                wait_until(lambda: c2.status().follow["lines"] > 200, "the follower to pass lines on", timeout=60)
            stop.touch()
            assert int(looper.stdout.readline()) > 0
            looper.wait(timeout=20)
            total = sum(whole(p) for p in {*tree, *targets})

            def held() -> int:
                with d.client() as c2:
                    f = c2.status().follow
                return f["bytes"] + f["known_bytes"]

            wait_until(lambda: held() >= total, "the follower to hold every file", timeout=60)
            mine = targets[0].read_bytes().splitlines()
            frames = watch.until((targets[0].name, mine[-1]))
        # Each byte once: none taken as known and passed on too, none lost.
        assert held() == total
        assert [x for f in frames for x in f.lines] == mine  # the watcher: every line once, in order
        listed = {s["sessionId"] for s in json.loads(d.cli("list", "--all", "--json").stdout)}
        assert {p.stem for p in targets} <= listed
    finally:
        stop.touch()
        looper.kill()
        looper.wait(timeout=20)
        looper.stdout.close()


def test_a_line_written_as_the_walk_reaches_its_dir_is_passed_on_once(short_tmp):
    """The walk's two windows, made to happen: a line appended just before a
    dir's watch is taken (no event will come) and one just after (its event
    comes while the walk still reads): both are passed on, once, and none of
    the lines that were there before."""
    root = short_tmp / "root"
    target = root / "projects" / "-p" / f"{uuid.uuid4()}.jsonl"
    target.parent.mkdir(parents=True)
    target.write_bytes(LINE * 3)
    others = [target.with_name(f"{uuid.uuid4()}.jsonl") for _ in range(50)]
    for p in others:
        p.write_bytes(LINE)
    fresh = [json.dumps({"type": "user", "uuid": str(uuid.uuid4())}).encode() for _ in range(2)]

    def append(line: bytes) -> None:
        with open(target, "ab") as f:
            f.write(line + b"\n")

    class Racing(Watches):
        """The follower's watches, with a foreign write at the two moments that matter."""

        def watch(self, d: Path, polled_fallback: bool) -> None:
            if d == target.parent:
                append(fresh[0])
            super().watch(d, polled_fallback)
            if d == target.parent:
                append(fresh[1])

    async def run() -> tuple[list[bytes], dict[str, int]]:
        published: list[bytes] = []
        loop = asyncio.get_running_loop()
        follower = Follower(root, loop, lambda path, lines, end: published.extend(lines) if path == target else None,
                            lambda path: None)
        follower.tree = Racing(follower.projects, follower.tree.max_watches)
        try:
            await follower.start()
            async with asyncio.timeout(20):
                while len(published) < 2:
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.2)  # anything more (a repeat) would come now; nothing may
            return published, follower.status()
        finally:
            follower.close()

    published, status = asyncio.run(run())
    assert published == fresh
    assert status["known_bytes"] == len(LINE) * (3 + len(others)) and status["bytes"] == sum(len(x) + 1 for x in fresh)
