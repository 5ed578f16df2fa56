"""A transcript the daemon writes into, replaced under it by another program
(a new file renamed over it: an editor, ``sed -i``, a tool that rewrites the
session): the daemon's next write goes into the new file, and a watcher is
told once that the file started over, whichever noticed the new file first
(the follower or the writer), then gets the new file's lines and the daemon's,
each once."""

from __future__ import annotations

import json
import uuid

from sessiond.store.paths import project_dir
from sessiond.wire import messages as m
from tests.helpers import assistant, line, wait_until

from .foreign import Foreign, Frames, corpus_lines, follow_status, raw

CWD = "/work/replaced-under-the-writer"
END = json.dumps({"type": "system", "subtype": "end-of-test", "uuid": str(uuid.uuid4())}) + "\n"


def replaced_then_appended(d, wait_for_follower: bool) -> None:
    sid = str(uuid.uuid4())
    path = project_dir(d.root, CWD) / f"{sid}.jsonl"
    old = corpus_lines(2, skip=50)
    new = corpus_lines(3, skip=60)
    first, after = assistant("the daemon's first line"), assistant("the daemon's line after the rename")
    with Foreign() as w, d.client() as c, d.client() as watching:
        w.do("append", path, data=old[0])
        r = c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(first)], durability="written"))
        assert r.accepted == 1  # the daemon has the file open
        watch = Frames(watching, m.Subscribe(id=watching.next_id(), session=sid, path=str(path), offset=0))
        w.do("append", path, data=old[1])
        watch.until((path.name, raw([old[1]])[0]))
        resets = follow_status(d)["resets"]
        w.do("replace", path, data="".join(new))
        if wait_for_follower:
            wait_until(lambda: follow_status(d)["resets"] > resets, "the follower to see the new file")
        r = c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(after)], durability="written"))
        assert r.accepted == 1
        frames = watch.until((path.name, line(after)))
        w.do("append", path, data=END)  # whatever either side still had to say comes before it
        frames += watch.until((path.name, raw([END])[0]))
        assert path.read_bytes() == "".join(new).encode() + line(after) + b"\n" + END.encode()
        starts = [i for i, f in enumerate(frames) if f.reset]
        assert len(starts) == 1, [(f.offset, f.reset, len(f.lines)) for f in frames]
        since = [x for f in frames[starts[0]:] for x in f.lines]
        assert since == raw(new) + [line(after)] + raw([END])  # the new file from its start, each line once


def test_the_follower_first(daemon):
    replaced_then_appended(daemon, wait_for_follower=True)


def test_the_writer_first(daemon):
    replaced_then_appended(daemon, wait_for_follower=False)
