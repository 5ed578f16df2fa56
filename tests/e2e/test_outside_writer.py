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
        assert f"LIVE      {held}: pid {writer.pid} holds it open for writing" in text
    finally:
        writer.kill()
        writer.wait(timeout=30)
        if writer.stdout is not None:
            writer.stdout.close()
    assert json.loads(daemon.cli("status", "--json").stdout)["outsideWriters"] == []  # gone with its writer
