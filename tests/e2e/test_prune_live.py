"""``prune`` never moves a live session, however old its last write: not one
another program holds open for writing (Claude Code in a terminal, the case
``rm`` refuses), not one a sessiond client holds. ``--dry-run`` lists exactly
what ``--yes`` moves, and both name each live session kept and why."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest

from sessiond.client import Session
from tests.helpers import assistant, line, main_path, user

CWD = "/work/prune-live"
OLD = 100 * 86400


def _session(d, sid: str) -> None:
    d.cli("append", "--cwd", CWD, "--session", sid, "--durability", "written",
          input=line(user("old work", parentUuid=None)) + b"\n" + line(assistant("done")) + b"\n")


def _age(d, sid: str) -> None:
    """Last written 100 days ago, subagent files included."""
    t = time.time() - OLD
    path = main_path(d.root, CWD, sid)
    for p in [path, *path.with_suffix("").rglob("*")]:
        os.utime(p, (t, t))


def _prune(d, *args: str) -> dict:
    return json.loads(d.cli("prune", "--cwd", CWD, "--older-than", "90d", *args, "--json").stdout)


@pytest.mark.parametrize("with_daemon", [True, False], ids=["daemon", "no-daemon"])
def test_prune_keeps_a_session_another_program_holds_open_for_writing(daemon_factory, with_daemon):
    d = daemon_factory().start()
    idle, open_one = str(uuid.uuid4()), str(uuid.uuid4())
    _session(d, idle)
    _session(d, open_one)
    if not with_daemon:
        d.stop()
    path = main_path(d.root, CWD, open_one)
    with open(path, "ab") as out:  # a Claude Code left open in a terminal for months
        holder = subprocess.Popen(["sleep", "60"], stdout=out)
    try:
        _age(d, idle)
        _age(d, open_one)
        dry = _prune(d, "--dry-run")
        assert [s["sessionId"] for s in dry["sessions"]] == [idle], dry
        assert dry["live"] == [open_one]
        said = d.cli("prune", "--cwd", CWD, "--older-than", "90d", "--dry-run").stderr.decode()
        assert f"kept {open_one}: live: pid {holder.pid} holds it open for writing" in said, said
        done = _prune(d, "--yes")
        assert [s["sessionId"] for s in done["sessions"]] == [idle]
        assert done["live"] == [open_one] and done["skipped"] == 0
        assert path.is_file()  # still where its writer writes
        assert not main_path(d.root, CWD, idle).exists()
    finally:
        holder.kill()
        holder.wait()


def test_prune_keeps_a_session_a_client_holds_and_dry_run_says_so(daemon):
    idle, held = str(uuid.uuid4()), str(uuid.uuid4())
    _session(daemon, idle)
    with daemon.client() as c:
        s = Session(c, held, CWD)
        s.append(line(user("an agent idle for months")), "written")
        _age(daemon, idle)
        _age(daemon, held)
        dry = _prune(daemon, "--dry-run")
        assert [x["sessionId"] for x in dry["sessions"]] == [idle], dry  # what --yes will move, no more
        assert dry["live"] == [held]
        out = daemon.cli("prune", "--cwd", CWD, "--older-than", "90d", "--yes", check=False)
        assert out.returncode == 0, out.stderr.decode()
        assert f"kept {held}: live: pid {os.getpid()}" in out.stderr.decode(), out.stderr.decode()
        assert main_path(daemon.root, CWD, held).is_file()
        s.append(line(assistant("still mine")), "written")  # the agent goes on in its own file
        s.close()
    assert b"still mine" in main_path(daemon.root, CWD, held).read_bytes()
