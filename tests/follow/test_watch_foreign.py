"""A watcher of a session another program writes (Claude Code itself): the
follower's lines reach ``Subscribe`` and the ``sessiond watch`` process
exactly as written, whole lines only, in order, each once, the subagent file
that appears meanwhile included."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import uuid

from sessiond.store.paths import project_dir
from sessiond.wire import messages as m
from tests.helpers import wait_until

from .foreign import Foreign, Frames, by_file, corpus_lines, raw

CWD = "/work/claude-typed"
END = json.dumps({"type": "system", "subtype": "end-of-test", "uuid": str(uuid.uuid4())}) + "\n"


def test_a_watcher_sees_a_foreign_writers_lines_whole_in_order_once(daemon):
    sid = str(uuid.uuid4())
    main = project_dir(daemon.root, CWD) / f"{sid}.jsonl"
    agent = main.with_suffix("") / "subagents" / "agent-a1b2c3d4.jsonl"
    lines = corpus_lines(12)
    with Foreign() as w, daemon.client() as c:
        w.do("append", main, data=lines[0])  # the session exists before anyone watches it
        watch = Frames(c, m.Subscribe(id=c.next_id(), session=sid, path=str(main), agents=True))
        assert isinstance(watch.subscribed, m.Subscribed) and watch.subscribed.offset == len(lines[0].encode())
        for x in lines[1:4]:
            w.do("append", main, data=x)
        half = len(lines[4]) // 2
        w.do("append", main, data=lines[4][:half])  # Claude Code mid-write
        w.do("append", agent, data=lines[5] + lines[6])  # a subagent file appears: two lines in one write
        rel = agent.relative_to(main.parent).as_posix()
        seen = watch.until((rel, raw([lines[6]])[0]), (main.name, raw([lines[3]])[0]))
        # The half line was written before the agent's lines were read: it was not passed on.
        assert by_file(seen)[main.name] == raw(lines[1:4])
        w.do("append", main, data=lines[4][half:])  # the rest of the line arrives
        for x in lines[7:10]:
            w.do("append", main, data=x)
        w.do("append", agent, data=lines[10])
        w.do("append", main, data=END)
        seen += watch.until((main.name, raw([END])[0]), (rel, raw([lines[10]])[0]))
    got = by_file(seen)
    assert got[main.name] == raw(lines[1:4] + [lines[4]] + lines[7:10] + [END])
    assert got[rel] == raw(lines[5:7] + [lines[10]])
    assert watch.frames.empty() or not isinstance(watch.frames.queue[0], m.Entries)  # nothing after the end


def test_the_watch_command_prints_a_foreign_writers_lines_live(daemon):
    sid = str(uuid.uuid4())
    main = project_dir(daemon.root, CWD) / f"{sid}.jsonl"
    agent = main.with_suffix("") / "subagents" / "agent-feed.jsonl"
    lines = corpus_lines(10, skip=20)
    out: queue.Queue = queue.Queue()
    with Foreign() as w:
        w.do("append", main, data=lines[0])
        proc = subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", "watch", sid, "--cwd", CWD, "--json",
                                 "-n", "0", "--agents"], env=daemon.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        reader = threading.Thread(target=lambda: [out.put(x) for x in proc.stdout], daemon=True)
        reader.start()
        try:
            with daemon.client() as c:
                wait_until(lambda: c.status().watchers == 1, "sessiond watch to subscribe", timeout=30)
            w.do("append", main, data=lines[1] + lines[2][:7])
            w.do("append", agent, data=lines[3])
            w.do("append", main, data=lines[2][7:])
            w.do("append", main, data=lines[4] + END)
            printed: list[bytes] = []
            files: dict[bytes, str] = {}
            while not {raw([END])[0], raw([lines[3]])[0]} <= set(printed):  # files are read in no set order
                got = out.get(timeout=20).rstrip(b"\n")
                head, _, rest = got.partition(b",")  # --agents: "sessiondFile" first, then the line as written
                printed.append(b"{" + rest)
                files[printed[-1]] = json.loads(head + b"}")["sessiondFile"]
        finally:
            proc.kill()
            proc.wait(timeout=20)
            reader.join(timeout=20)
            proc.stdout.close()
            proc.stderr.close()
    want_main = raw([lines[1], lines[2], lines[4], END])
    assert [x for x in printed if x in want_main] == want_main  # the main file's lines in order
    assert sorted(printed) == sorted(want_main + raw([lines[3]]))  # and the agent's, each once, nothing else
    assert {files[x] for x in want_main} == {main.name} and files[raw([lines[3]])[0]] == f"{sid}/subagents/agent-feed.jsonl"
