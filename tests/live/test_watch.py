"""Watching (Subscribe): entries streamed as the daemon writes them, bounded for slow watchers."""

from __future__ import annotations

import json
import os
import select
import socket
import threading
import uuid

from sessiond.client.watch import subscribe
from sessiond.wire import messages as m
from sessiond.wire.framing import FrameBuffer, decode_response, encode
from tests.helpers import CliProcess, main_path, wait_until

CWD = "/work/proj"


def _entry(i: int, **extra) -> bytes:
    return json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "message": {"role": "user", "content": f"m{i}"},
                       **extra}).encode()


def _start(daemon, sid: str) -> None:
    with daemon.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[_entry(-1)], durability="written"))


def test_a_watcher_sees_every_entry_of_a_concurrent_writer_once_in_order(daemon, agents):
    sid = str(uuid.uuid4())
    _start(daemon, sid)
    path = main_path(daemon.root, CWD, sid)
    seen: list[bytes] = []
    offsets: list[tuple[int, int]] = []  # (offset, bytes) of each frame
    client = daemon.client()
    stream = subscribe(client, m.Subscribe(id=client.next_id(), session=sid, cwd=CWD))
    first = next(stream)
    assert isinstance(first, m.Subscribed) and first.offset == path.stat().st_size
    writer = agents(daemon, sid, CWD)
    writer.send("burst 2000")
    done = threading.Event()

    def read() -> None:
        for frame in stream:
            if isinstance(frame, m.Entries):
                offsets.append((frame.offset, sum(len(x) + 1 for x in frame.lines)))
                seen.extend(frame.lines)
                if len(seen) >= 2000:
                    break
        done.set()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    acked = [writer.read()["ok"] for _ in range(2000)]
    assert done.wait(30), f"the watcher got {len(seen)} of 2000 entries"
    client.close()
    assert [json.loads(x)["uuid"] for x in seen] == acked  # every one, once, in order
    assert all(a + n == b for (a, n), (b, _) in zip(offsets, offsets[1:]))  # each frame where the last ended
    data = path.read_bytes()
    assert b"".join(x + b"\n" for x in seen) == data[first.offset:first.offset + sum(len(x) + 1 for x in seen)]


def test_from_an_offset_and_the_last_n(daemon):
    sid = str(uuid.uuid4())
    lines = [_entry(i) for i in range(50)]
    with daemon.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=lines, durability="written"))
        stream = subscribe(c, m.Subscribe(id=c.next_id(), session=sid, cwd=CWD, offset=0))
        assert next(stream).offset == 0
        got: list[bytes] = []
        while len(got) < 50:
            got += next(stream).lines
        assert got == lines
    with daemon.client() as c:
        stream = subscribe(c, m.Subscribe(id=c.next_id(), session=sid, cwd=CWD, last=5))
        next(stream)
        frame = next(stream)
        assert frame.lines == lines[-5:]
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[b'{"type":"tag","tag":"x"}']))
        assert next(stream).lines == [b'{"type":"tag","tag":"x"}']  # then live


def test_agent_files_and_unsubscribe(daemon):
    sid = str(uuid.uuid4())
    _start(daemon, sid)
    with daemon.client() as c:
        req = m.Subscribe(id=c.next_id(), session=sid, cwd=CWD, agents=True)
        stream = subscribe(c, req)
        next(stream)
        side = _entry(1, isSidechain=True, agentId="helper")
        c.send(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[side], durability="written"))
        frame = next(stream)
        assert frame.file == f"{sid}/subagents/agent-helper.jsonl" and frame.lines == [side] and frame.offset == 0
        c.send(m.Unsubscribe(id=c.next_id(), subscription=req.id))
        assert next(stream) == m.Unsubscribed(id=req.id, reason="cancelled")
        assert c.status().watchers == 0


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))


def test_a_watcher_that_does_not_read_is_fed_from_the_file_and_the_daemon_holds_no_more(daemon_factory, short_tmp):
    """Its frames count against its connection's output budget: past it the
    daemon makes none, and once the watcher reads it gets every byte, from the
    file, none skipped."""
    cfg = short_tmp / "config.toml"
    cfg.write_text("max_output_bytes = 65536\n")
    daemon = daemon_factory().start("--config", str(cfg))
    sid = str(uuid.uuid4())
    _start(daemon, sid)
    path = main_path(daemon.root, CWD, sid)
    raw = socket.socket(socket.AF_UNIX)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(20)
    raw.connect(str(daemon.socket))
    raw.sendall(encode(m.Hello(id=0, protocol_version=m.PROTOCOL_VERSION, client="stalled")))
    start = path.stat().st_size
    raw.sendall(encode(m.Subscribe(id=1, session=sid, cwd=CWD)))
    before = _rss_kb(daemon.pid)
    payload = "x" * 10_000
    with daemon.client() as c:  # 40 MB written while the watcher reads nothing
        for i in range(40):
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written",
                            entries=[_entry(i * 100 + k, pad=payload) for k in range(100)]))
        budget = c.status().budgets["outputBytes"]
    assert budget["total"] <= budget["limit"] == 65536, budget
    grew = _rss_kb(daemon.pid) - before
    assert grew < 20_000, f"the daemon grew {grew} KB for a watcher that does not read"
    end = path.stat().st_size
    frames = FrameBuffer()
    position = start
    while position < end:  # reading now: every byte comes, in order, none skipped
        for body in frames.feed(raw.recv(1 << 20)):
            resp = decode_response(body)
            if isinstance(resp, m.Entries):
                assert resp.offset == position  # no byte skipped
                position = resp.offset + sum(len(x) + 1 for x in resp.lines)
    raw.close()
    assert position == end


def test_a_burst_reaches_a_watcher_in_fewer_frames_than_writes_every_line_once_in_order(daemon_factory, short_tmp):
    """Writes within ``watch_coalesce_ms`` of the last frame go to a watcher
    together: fifty ``written`` appends in a row reach it, through the real
    client and socket, in a few frames, every line once, in order, each frame
    where the last ended (the window is the longest allowed, so a loaded
    machine still writes the burst within it)."""
    cfg = short_tmp / "config.toml"
    cfg.write_text("watch_coalesce_ms = 1000\n")
    daemon = daemon_factory().start("--config", str(cfg))
    sid = str(uuid.uuid4())
    _start(daemon, sid)
    client = daemon.client()
    stream = subscribe(client, m.Subscribe(id=client.next_id(), session=sid, cwd=CWD))
    start = next(stream).offset
    written = [[_entry(w * 10 + k) for k in range(4)] for w in range(50)]
    with daemon.client() as c:
        for lines in written:
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=lines, durability="written"))
    every = [x for lines in written for x in lines]
    seen: list[bytes] = []
    position, frames = start, 0
    while len(seen) < len(every):
        frame = next(stream)
        assert isinstance(frame, m.Entries) and frame.offset == position
        position += sum(len(x) + 1 for x in frame.lines)
        seen += frame.lines
        frames += 1
    client.close()
    assert seen == every
    assert frames < len(written) // 2, f"{frames} frames for {len(written)} writes"


def test_tail_follow_streams_from_the_daemon(daemon):
    sid = str(uuid.uuid4())
    _start(daemon, sid)
    with CliProcess("tail", "-f", "--json", "-n", "0", sid, "--cwd", CWD, env=daemon.env) as tail:
        with daemon.client() as c:
            wait_until(lambda: c.status().watchers == 1, "tail -f to subscribe")
            entry = _entry(7)
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[entry], durability="written"))
        assert tail.line().rstrip(b"\n") == entry


def test_watch_shows_the_last_turns_then_new_entries(daemon):
    sid = str(uuid.uuid4())
    with daemon.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written",
                        entries=[_entry(i) for i in range(5)] + [b'{"type":"tag","tag":"t"}']))
    with CliProcess("watch", sid, "-n", "2", "--cwd", CWD, env=daemon.env) as watch:
        shown = [watch.line() for _ in range(5)]  # each turn: a header line, its text (a blank line between)
        assert b"user" in shown[0] and shown[1] == b"m3\n" and b"user" in shown[3] and shown[4] == b"m4\n", shown
        with daemon.client() as c:
            wait_until(lambda: c.status().watchers == 1, "watch to subscribe")
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[_entry(99)], durability="written"))
        # The session's metadata may be re-appended (its writer left) before m99: bookkeeping, not shown.
        later = [watch.line() for _ in range(3)]
        assert later[0] == b"\n" and b"user" in later[1] and later[2] == b"m99\n", later


def test_the_stream_ends_when_the_file_goes_away(daemon):
    sid = str(uuid.uuid4())
    _start(daemon, sid)
    path = main_path(daemon.root, CWD, sid)
    with daemon.client() as c:
        req = m.Subscribe(id=c.next_id(), session=sid, cwd=CWD)
        stream = subscribe(c, req)
        next(stream)
        path.unlink()
        with daemon.client() as w:  # the next write notices the file is gone (and recreates it)
            wait_until(lambda: w.call(m.Append(id=w.next_id(), session=sid, cwd=CWD, durability="written",
                                               entries=[_entry(1)])) and w.status().watchers == 0,
                       "the watcher to be told the file went away")
        assert next(stream) == m.Unsubscribed(id=req.id, reason="gone")


def test_watch_json_agents_names_the_file_of_each_line(daemon):
    """``watch --json --agents``: each line is the entry with ``sessiondFile``
    first (its file, relative to the project dir), the entry's bytes after it
    as written; for people an agent's line starts with its id."""
    sid = str(uuid.uuid4())
    _start(daemon, sid)
    with CliProcess("watch", sid, "-n", "1", "--json", "--agents", "--cwd", CWD, env=daemon.env) as watch:
        first = json.loads(watch.line())
        assert first["sessiondFile"] == f"{sid}.jsonl" and first["message"]["content"] == "m-1"  # the last turn
        with daemon.client() as c:
            wait_until(lambda: c.status().watchers == 1, "watch to subscribe")
            side, main = _entry(1, isSidechain=True, agentId="helper"), _entry(2)
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[side], durability="written"))
            got = watch.line()
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[main], durability="written"))
            lines = [got]
            while b'"m2"' not in lines[-1] and len(lines) < 5:  # metadata may be re-appended before it
                lines.append(watch.line())
        agent_file = f"{sid}/subagents/agent-helper.jsonl"
        assert got == b'{"sessiondFile":"' + agent_file.encode() + b'",' + side[1:] + b"\n"  # the rest byte for byte
        assert json.loads(lines[-1])["sessiondFile"] == f"{sid}.jsonl" and json.loads(lines[-1])["uuid"] == json.loads(main)["uuid"]
    with CliProcess("watch", sid, "-n", "0", "--agents", "--cwd", CWD, env=daemon.env) as people:
        with daemon.client() as c:
            wait_until(lambda: c.status().watchers == 1, "watch to subscribe")
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[_entry(3, isSidechain=True, agentId="helper")],
                            durability="written"))
        assert people.line().startswith(b"[helper] ")


def test_watch_agents_with_no_daemon_says_it_follows_the_main_transcript_only(daemon_factory):
    d = daemon_factory()  # never started
    sid = str(uuid.uuid4())
    path = main_path(d.root, CWD, sid)
    path.parent.mkdir(parents=True)
    path.write_bytes(_entry(0) + b"\n")
    with CliProcess("--no-autostart", "watch", sid, "-n", "1", "--agents", "--cwd", CWD, env=d.env) as watch:
        assert b"user" in watch.line()
        ready, _, _ = select.select([watch.proc.stderr], [], [], 20)
        assert ready and b"following the main transcript only" in os.read(watch.proc.stderr.fileno(), 4096)
