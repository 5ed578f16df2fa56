"""Writing with no daemon: the direct-append fallback, and interleaving with one."""

import subprocess
import sys
import uuid

from sessiond.client import Client, Session, direct_append
from tests.helpers import api_request_lines, assistant, line, main_path, read_entries, user

CWD = "/work/project"


def test_cli_append_falls_back_to_direct_writes_when_the_daemon_is_stopped(daemon_factory):
    d = daemon_factory()
    sid = str(uuid.uuid4())
    first = [{"type": "custom-title", "customTitle": "t"}, user("offline"), {**assistant("sub"), "isSidechain": True, "agentId": "ag1"}]
    out = d.cli("--no-autostart", "append", "--cwd", CWD, "--session", sid, "--json", input=b"\n".join(line(e) for e in first))
    assert b"wrote directly" in out.stderr
    assert not d.socket.exists()
    path = main_path(d.root, CWD, sid)
    assert read_entries(path) == first[:2]
    assert read_entries(path.with_suffix("") / "subagents" / "agent-ag1.jsonl") == [first[2]]
    # Now a daemon picks the file up: dedup knows what the fallback wrote.
    d.start()
    later = assistant("online")
    with d.client() as c:
        s = Session(c, sid, CWD)
        r = s.append(line(first[1]), "written")
        assert r.duplicates == 1
        s.append(later, "written")
    assert read_entries(path) == [*first[:2], later]


def test_fallback_keeps_lazy_materialization_and_dedup(tmp_path):
    sid = str(uuid.uuid4())
    res = direct_append(tmp_path, CWD, sid, [line({"type": "tag", "tag": "x"})])
    assert res.dropped == 1 and not main_path(tmp_path, CWD, sid).exists()
    u = user("x")
    direct_append(tmp_path, CWD, sid, [line(u)])
    res = direct_append(tmp_path, CWD, sid, [line(u), line(assistant("y"))])
    assert (res.written, res.duplicates) == (1, 1)


def test_session_close_falls_back_when_the_daemon_died(daemon):
    sid = str(uuid.uuid4())
    c = Client(daemon.socket, root=daemon.root, autostart=False, timeout=10)
    # The record after the kill and the close wait out ``reconnect_timeout`` and
    # their own timeout against a dead socket: what is tested is after them.
    s = Session(c, sid, CWD, reconnect_timeout=0.2)
    first = s.record([{"type": "user", "message": {"role": "user", "content": "before"}}], durability="written")
    daemon.kill()
    last = s.record([{"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "after"}]}}])
    assert last == first  # not delivered: the hint does not move
    res = s.close(timeout=0.2)
    assert res is not None and res.written == 1
    c.close()
    entries = read_entries(main_path(daemon.root, CWD, sid))
    assert [e["type"] for e in entries] == ["user", "assistant"]
    assert entries[1]["parentUuid"] == entries[0]["uuid"]


def test_session_close_from_an_exit_handler_of_a_killed_process(daemon):
    """An agent recording through the library gets SIGTERM: its handler closes the
    session, which completes through the daemon."""
    sid = str(uuid.uuid4())
    script = f"""
import signal, sys, time
from sessiond.client import Client, Session
c = Client({str(daemon.socket)!r}, autostart=False)
s = Session(c, {sid!r}, {CWD!r})
s.set_title("exiting agent")
s.record([{{"type": "user", "message": {{"content": "work"}}}}])
def bye(*_):
    s.close(); sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
time.sleep(60)
"""
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=daemon.env)
    assert p.stdout.readline().strip() == b"ready"
    p.terminate()
    assert p.wait(timeout=20) == 0
    p.stdout.close()
    with daemon.client() as c:
        c.flush()
    entries = read_entries(main_path(daemon.root, CWD, sid))
    assert entries[0]["customTitle"] == "exiting agent" and entries[1]["type"] == "user"
    assert entries[-1] == entries[0]  # exit cleanup re-appended the title


def test_a_foreign_writer_and_daemon_interleave_whole_lines_only(daemon):
    """A writer beside the daemon (Claude Code itself, ``pull``) taking the same
    per-file flock: whole lines only. (The fallback itself never writes while a
    daemon serves the root: tests/client/test_root_clients.py.)"""
    sid = str(uuid.uuid4())
    big = "x" * 200_000  # lines far larger than a pipe buffer or a page
    with daemon.client() as c:
        Session(c, sid, CWD).append(user("seed"), "written")
    path = main_path(daemon.root, CWD, sid)
    script = f"""
import json, os, uuid
from pathlib import Path
from sessiond.store.appendfile import locked_append, open_append
for i in range(40):
    e = {{"type": "user", "uuid": str(uuid.uuid4()), "message": {{"content": "F" + str(i) + "x" * {len(big)}}}}}
    fd, _ = open_append(Path({str(path)!r}))
    locked_append(fd, Path({str(path)!r}), json.dumps(e).encode() + b"\\n")
    os.close(fd)
"""
    p = subprocess.Popen([sys.executable, "-c", script], env=daemon.env)
    with daemon.client() as c:
        s = Session(c, sid, CWD)
        for i in range(40):
            s.append(user(f"D{i}" + big), "written")
    assert p.wait(timeout=60) == 0
    entries = read_entries(main_path(daemon.root, CWD, sid))  # every line parses
    contents = sorted(e["message"]["content"][:3].rstrip("x") for e in entries[1:])
    assert contents == sorted([f"F{i}" for i in range(40)] + [f"D{i}" for i in range(40)])


def test_the_fallback_never_writes_entries_sent_with_fields_it_does_not_implement(short_tmp):
    """A field of a newer protocol (say, a project named directly) changes where
    or how the daemon writes: the direct write, which knows only today's rules,
    leaves such entries undelivered rather than write them elsewhere."""
    from sessiond.client.core import Batch, Outbox
    from sessiond.client.fallback import write_outbox
    from sessiond.wire import messages as m

    sid = str(uuid.uuid4())
    outbox = Outbox(sid, m)
    outbox.add([Batch(False, [line(user("x"))], CWD, "queued", None, None, False, fields={"project": "-elsewhere"})])
    (short_tmp / "run").mkdir(mode=0o700)
    res = write_outbox(outbox, short_tmp / "root", short_tmp / "run" / "s.sock")
    assert (res.undelivered, res.written) == (1, 0)
    assert not (short_tmp / "root").exists() and not outbox.empty
    plain = Outbox(sid, m)
    plain.add(plain.batches(False, [line(user("y"))], 1 << 20, cwd=CWD, durability="queued"))
    assert write_outbox(plain, short_tmp / "root", short_tmp / "run" / "s.sock").written == 1


def test_fallback_resend_keeps_repeated_lines_after_a_new_one(tmp_path):
    """A resend written directly follows the daemon's rule: a line without a
    uuid already in the file's tail is skipped only until a line is found new
    (what a lost daemon wrote of them is a prefix). Claude Code's per-request
    lines after a new ``last-prompt`` are all kept; the same lines resent
    whole are all skipped."""
    sid = str(uuid.uuid4())
    first, second = user("first"), assistant("second")

    direct_append(tmp_path, CWD, sid, [line(first), *api_request_lines(sid, first["uuid"]), line(second)])
    res = direct_append(tmp_path, CWD, sid, api_request_lines(sid, second["uuid"]), resend=True)
    assert (res.written, res.duplicates) == (3, 0)
    res = direct_append(tmp_path, CWD, sid, [line(second), *api_request_lines(sid, second["uuid"])], resend=True)
    assert (res.written, res.duplicates) == (0, 4)
    kinds = [e["type"] for e in read_entries(main_path(tmp_path, CWD, sid))]
    assert kinds.count("atis-latch") == kinds.count("api-request-route") == 2
