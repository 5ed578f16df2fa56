"""The follower while the daemon itself writes without a pause: its own writes
keep the follower's passes going back to back (the kernel's events wait in
its queue while a pass is due, and are read after it), and a foreign writer's
lines, in the directory the daemon writes in and in another, are still passed
on to a watcher whole, in order, each once."""

from __future__ import annotations

import json
import threading
import uuid

from sessiond.store.paths import project_dir
from sessiond.wire import messages as m

from .foreign import Foreign, Frames, by_file, corpus_lines, raw

CWD = "/work/busy-project"
OTHER_CWD = "/work/quiet-project"


def test_foreign_lines_are_followed_while_the_daemon_writes_back_to_back(daemon):
    busy, near, far = (str(uuid.uuid4()) for _ in range(3))
    near_path = project_dir(daemon.root, CWD) / f"{near}.jsonl"  # beside the file the daemon writes
    far_path = project_dir(daemon.root, OTHER_CWD) / f"{far}.jsonl"
    lines = corpus_lines(40, skip=5)
    stop = threading.Event()
    written = []

    def append_without_pause() -> None:
        with daemon.client() as c:
            while not stop.is_set():
                batch = [json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "sessionId": busy,
                                     "message": {"role": "user", "content": "x" * 200}}).encode() for _ in range(8)]
                c.call(m.Append(id=c.next_id(), session=busy, cwd=CWD, entries=batch, durability="written"))
                written.append(len(batch))

    with Foreign() as w, daemon.client() as c1, daemon.client() as c2:
        w.do("append", near_path, data=lines[0])
        w.do("append", far_path, data=lines[1])
        near_watch = Frames(c1, m.Subscribe(id=c1.next_id(), session=near, path=str(near_path)))
        far_watch = Frames(c2, m.Subscribe(id=c2.next_id(), session=far, path=str(far_path)))
        writer = threading.Thread(target=append_without_pause, daemon=True)
        writer.start()
        try:
            for i, line in enumerate(lines[2:]):
                if i % 3 == 2:  # a line in two writes, as Claude Code may leave it
                    half = len(line) // 2
                    w.do("append", near_path, data=line[:half])
                    w.do("append", near_path, data=line[half:])
                else:
                    w.do("append", far_path if i % 2 else near_path, data=line)
            near_lines = [x for i, x in enumerate(lines[2:]) if i % 3 == 2 or not i % 2]
            far_lines = [x for i, x in enumerate(lines[2:]) if i % 3 != 2 and i % 2]
            near_seen = by_file(near_watch.until((near_path.name, raw(near_lines[-1:])[0])))
            far_seen = by_file(far_watch.until((far_path.name, raw(far_lines[-1:])[0])))
        finally:
            stop.set()
            writer.join(timeout=30)
    assert sum(written) > 0  # the daemon was writing all along
    assert near_seen[near_path.name] == raw(near_lines)
    assert far_seen[far_path.name] == raw(far_lines)
