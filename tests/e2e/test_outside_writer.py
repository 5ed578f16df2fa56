"""A session Claude Code itself is writing is live (issue 29): a process of
the same user outside sessiond that holds the transcript open for writing is
named in ``list`` (LIVE, ``--json`` ``live``) and ``status`` (LIVE, ``--json``
``outsideWriters``), and ``rm`` refuses the session
without ``--force``. The writer here is a real process holding the real file
open with ``O_APPEND``, as a writer that keeps its file open does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

from tests.conftest import DaemonProc
from tests.helpers import assistant, line, main_path, user

CWD = "/home/dev/outside-writer"
HOLD = ("import os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)\n"
        "print('open', flush=True)\n"
        "time.sleep(120)\n")


def session(daemon: DaemonProc) -> str:
    sid = str(uuid.uuid4())
    entries = [user("hello", "u1", parentUuid=None, cwd=CWD, sessionId=sid),
               assistant("hi", "a1", parentUuid="u1", cwd=CWD, sessionId=sid)]
    daemon.cli("append", "--cwd", CWD, "--session", sid, "--durability", "written",
               input=b"".join(line(e) + b"\n" for e in entries))
    return sid


def listed(daemon: DaemonProc) -> dict[str, dict | None]:
    return {s["sessionId"]: s["live"] for s in json.loads(daemon.cli("list", "--cwd", CWD, "--json").stdout)}


def test_a_session_held_open_by_another_process_is_live(daemon: DaemonProc):
    held, free = session(daemon), session(daemon)
    assert listed(daemon) == {held: None, free: None}  # sessiond's own writer does not count
    writer = subprocess.Popen([sys.executable, "-c", HOLD, str(main_path(daemon.root, CWD, held))],
                              stdout=subprocess.PIPE)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == b"open\n"
        live = listed(daemon)
        assert live[free] is None and live[held] == {"pid": writer.pid, "writer": "open for writing"}
        table = daemon.cli("list", "--cwd", CWD).stdout.decode()
        assert "LIVE" in table and f"pid {writer.pid}" in table
        refused = daemon.cli("rm", held, "--cwd", CWD, check=False)
        assert refused.returncode == 1
        assert f"live: pid {writer.pid} holds it open for writing" in refused.stderr.decode()
        assert main_path(daemon.root, CWD, held).exists()
        daemon.cli("rm", free, "--cwd", CWD)  # the other one goes as before
        daemon.cli("rm", held, "--cwd", CWD, "--force")
        assert not main_path(daemon.root, CWD, held).exists()
    finally:
        writer.kill()
        writer.wait(timeout=30)
        if writer.stdout is not None:
            writer.stdout.close()


def test_status_counts_and_names_a_session_held_open_by_another_process(daemon: DaemonProc):
    held, free = session(daemon), session(daemon)
    before = json.loads(daemon.cli("status", "--json").stdout)
    assert before["outsideWriters"] == []  # sessiond's own writer does not count
    assert "written by other processes" not in daemon.cli("status").stdout.decode()
    path = main_path(daemon.root, CWD, held)
    writer = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == b"open\n"
        after = json.loads(daemon.cli("status", "--json").stdout)
        assert after["outsideWriters"] == [{"sessionId": held, "project": path.parent.name,
                                            "path": os.path.realpath(path), "pid": writer.pid,
                                            "writer": "open for writing"}]
        assert free not in json.dumps(after)
        text = daemon.cli("status").stdout.decode()
        assert "1 session written by other processes" in text
        live = [ln for ln in text.splitlines() if ln.strip().startswith(f"LIVE      {held} ")]
        assert len(live) == 1 and f": pid {writer.pid} holds it open for writing" in live[0], text
    finally:
        writer.kill()
        writer.wait(timeout=30)
        if writer.stdout is not None:
            writer.stdout.close()
    assert json.loads(daemon.cli("status", "--json").stdout)["outsideWriters"] == []  # gone with its writer


def now_iso(seconds_ago: float = 0.0) -> str:
    from datetime import UTC, datetime, timedelta

    return (datetime.now(UTC) - timedelta(seconds=seconds_ago)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_like_claude_code(path, sid: str, n: int, stamp: str | None = None) -> None:
    """Append ``n`` exchanges the way Claude Code does: open, append, close per
    entry, so no process holds the file between writes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    parent = None
    for i in range(n):
        for entry in (user(f"q{i}", f"u{i}-{sid[:8]}", parentUuid=parent, cwd=CWD, sessionId=sid, timestamp=stamp or now_iso()),
                      assistant(f"a{i}", f"a{i}-{sid[:8]}", parentUuid=f"u{i}-{sid[:8]}", cwd=CWD, sessionId=sid,
                                timestamp=stamp or now_iso())):
            with open(path, "ab") as f:
                f.write(line(entry) + b"\n")
            parent = entry["uuid"]


def test_a_session_written_outside_sessiond_a_moment_ago_is_live(daemon: DaemonProc):
    """Claude Code opens, appends and closes per entry: between its writes no
    process holds the file, so what tells is that the daemon's follower saw it
    written outside sessiond in the last seconds: list, status and rm say so."""
    import time

    ours, theirs = session(daemon), str(uuid.uuid4())
    path = main_path(daemon.root, CWD, theirs)
    write_like_claude_code(path, theirs, 2)
    deadline = time.monotonic() + 60
    while (live := listed(daemon)).get(theirs) is None:  # the follower's next pass
        assert time.monotonic() < deadline, live
        write_like_claude_code(path, theirs, 1)
        time.sleep(0.2)
    assert live[ours] is None  # sessiond's own writes are not another program's
    assert live[theirs]["writer"] == "written outside sessiond" and isinstance(live[theirs]["secondsAgo"], int)
    status = json.loads(daemon.cli("status", "--json").stdout)
    assert [w["sessionId"] for w in status["writtenOutside"]] == [theirs]
    assert [w["sessionId"] for w in status["outsideWriters"]] == [theirs]
    text = daemon.cli("status").stdout.decode()
    live = [ln for ln in text.splitlines() if ln.strip().startswith(f"LIVE      {theirs} ")]
    assert len(live) == 1 and ": written outside sessiond" in live[0], text
    refused = daemon.cli("rm", theirs, "--cwd", CWD, check=False)
    assert refused.returncode == 1 and "written outside sessiond" in refused.stderr.decode()
    assert path.exists()
    daemon.cli("rm", theirs, "--cwd", CWD, "--force")
    assert not path.exists()


def test_without_a_daemon_a_session_whose_newest_entry_is_seconds_old_is_live(daemon_factory):
    """No daemon runs, so every write is another program's: a session whose
    newest entry is a few seconds old is listed live; an older one is not. rm
    takes both (a recent write may be sessiond's own direct append; the trash
    gives it back), as the daemon would refuse the live one."""
    d = daemon_factory()  # never started
    fresh, old = str(uuid.uuid4()), str(uuid.uuid4())
    write_like_claude_code(main_path(d.root, CWD, fresh), fresh, 1)
    write_like_claude_code(main_path(d.root, CWD, old), old, 1, stamp=now_iso(seconds_ago=120))
    out = {s["sessionId"]: s["live"] for s in json.loads(d.cli("list", "--cwd", CWD, "--json").stdout)}
    assert out[old] is None and out[fresh]["writer"] == "written outside sessiond"
    d.cli("--no-autostart", "rm", old, fresh, "--cwd", CWD)
    assert not main_path(d.root, CWD, old).exists() and not main_path(d.root, CWD, fresh).exists()
    assert not d.socket.exists()
