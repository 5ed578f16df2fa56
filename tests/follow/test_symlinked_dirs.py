"""A followed project or session directory swapped for a symlink (to a
directory outside the root, holding files of the same names): nothing is
read through it, so no watcher, index or catalog is handed another tree's
files as the session's; the session itself is told gone. A symlink below
``projects/`` is never followed (docs/claude-code.md)."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from sessiond.store.paths import project_dir
from sessiond.wire import messages as m
from tests.helpers import wait_until

from .foreign import Foreign, Frames, corpus_lines, follow_status, raw

CWD = "/work/swapped-for-a-link"
SECRET = json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "message": {"role": "user", "content": "outside"}}) + "\n"


@pytest.mark.parametrize("level", ["project", "session"])
def test_a_dir_swapped_for_a_symlink_is_not_read_through(daemon, short_tmp, level):
    d = project_dir(daemon.root, CWD)
    sid = str(uuid.uuid4())
    main = d / f"{sid}.jsonl"
    agent = d / sid / "subagents" / "agent-a1.jsonl"
    path = main if level == "project" else agent
    swapped = d if level == "project" else d / sid / "subagents"
    lines = corpus_lines(3, skip=110)
    outside = short_tmp / "outside"
    outside.mkdir()
    (outside / path.name).write_text(SECRET)  # another tree's file of the same name
    with Foreign() as w, daemon.client() as watching:
        w.do("append", main, data=lines[0])
        w.do("append", agent, data=lines[0])
        wait_until(lambda: follow_status(daemon)["files"] == 2, "both files to be followed")
        watch = Frames(watching, m.Subscribe(id=watching.next_id(), session=sid, path=str(main), agents=True))
        os.rename(swapped, swapped.with_name(swapped.name + ".moved"))
        os.symlink(outside, swapped)
        w.do("append", outside / path.name, data=SECRET)
        got: list[bytes] = []

        def told() -> bool:
            while not watch.frames.empty():
                frame = watch.frames.get()
                got.extend(frame.lines if isinstance(frame, m.Entries) else [])
            return raw([SECRET])[0] in got or daemon.log_text().count("reached through a symlink now") == 1

        wait_until(told, "the file behind the link to be let go")
        if level == "session":  # the main file goes on, and is still followed
            w.do("append", main, data=lines[1])
            wait_until(lambda: told() and raw([lines[1]])[0] in got, "the main file's line")
    assert raw([SECRET])[0] not in got
