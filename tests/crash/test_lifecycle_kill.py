"""A process SIGKILLed in the middle of an rm, a restore or an import: after the
restart nothing is lost and nothing is half-moved (strace holds the process
inside the operation, right after one of its moves, while the test kills it)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from tests.helpers import main_path, wait_until
from tests.lifecycle_tree import build, session_with_agent

CWD = "/work/project"
pytestmark = pytest.mark.skipif(not shutil.which("strace"), reason="strace not installed")


def _hold_after(syscall: str, nth: int) -> list[str]:
    """strace that stalls every call of ``syscall`` from the ``nth`` on (counted
    per thread) for 5 s once it is done: each move is followed by a pause the
    test's kill lands in, whichever worker thread does it."""
    return ["strace", "-f", "-qq", "-o", "/dev/null", "-e", f"trace={syscall}",
            "-e", f"inject={syscall}:delay_exit=5000000:when={nth}+"]


def _kill_tracee_first(pid: int, cli: subprocess.Popen | None = None) -> None:
    """SIGKILL the stalled process itself before its strace: a tracer that dies
    first would release it to finish the operation. Pending, the kill takes it
    the moment strace lets go, before it runs another instruction. The CLI that
    asked for the operation dies first: left alive, it would see its daemon go and
    retry the operation (autostarting a daemon or doing it itself), so the test
    would check that retry, not the restarted daemon's settling of the kill."""
    if cli is not None:
        cli.kill()
        cli.wait(timeout=30)
    os.kill(pid, signal.SIGKILL)


def _wait_dead(pid: int) -> None:
    """Until the killed process is gone: a stopped one still holds its listening
    socket (a connect succeeds) and its lock, so a restart could talk to it."""

    def dead() -> bool:  # every thread: a worker thread can outlive its leader
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            return True
        for t in tasks:
            try:
                with open(f"/proc/{pid}/task/{t}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                        return False
            except FileNotFoundError:
                continue
        return True

    wait_until(dead, "the killed daemon to be gone")


def _daemon_pid(d) -> int:
    with d.client() as c:
        return c.status().pid


def _child(pid: int) -> int:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return int(f.read().split()[0])


def _trash(d) -> list[dict]:
    return json.loads(d.cli("trash", "--json").stdout)


def _background_cli(d, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", *args], env=d.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_daemon_killed_in_the_middle_of_an_rm(daemon_factory):
    d = daemon_factory().start()
    sid, files = session_with_agent(d, CWD)
    d.stop()
    d.start(wrap=_hold_after("renameat2", 1))
    pid = _daemon_pid(d)
    path = main_path(d.root, CWD, sid)
    cli = _background_cli(d, "rm", sid, "--cwd", CWD)
    wait_until(lambda: not path.exists(), "the first item of the rm to move", timeout=60)
    _kill_tracee_first(pid, cli)
    d.kill()
    _wait_dead(pid)
    assert path.with_suffix("").exists()  # the kill landed between the two moves
    cli.wait(timeout=30)
    d.start()
    assert all(p.exists() for p in files), (d.log_text()[-3000:], sorted(str(p) for p in (d.root / ".trash").rglob("*")))
    assert {p: p.read_bytes() for p in files} == files  # rolled back, byte for byte
    assert _trash(d) == []
    assert "rolled-back" in d.log_text()
    d.cli("rm", sid, "--cwd", CWD)  # and an rm now goes through
    assert [e["session"] for e in _trash(d)] == [sid]


def test_daemon_killed_in_the_middle_of_a_restore(daemon_factory):
    d = daemon_factory().start()
    sid, files = session_with_agent(d, CWD)
    d.cli("rm", sid, "--cwd", CWD)
    d.stop()
    d.start(wrap=_hold_after("renameat2", 1))
    pid = _daemon_pid(d)
    path = main_path(d.root, CWD, sid)
    cli = _background_cli(d, "restore", sid)
    wait_until(path.exists, "the first item of the restore to move back", timeout=60)
    _kill_tracee_first(pid, cli)
    d.kill()
    _wait_dead(pid)
    assert not path.with_suffix("").exists()  # the kill landed between the two moves
    cli.wait(timeout=30)
    d.start()
    assert not any(p.exists() for p in files), d.log_text()[-2500:]  # rolled back: all in the trash again
    assert [(e["session"], e["state"]) for e in _trash(d)] == [(sid, "trashed")]
    d.cli("restore", sid)
    assert {p: p.read_bytes() for p in files} == files


def test_daemon_killed_in_the_middle_of_an_import(daemon_factory, short_tmp):
    tree = build(short_tmp / "src")
    expected = tree.files()
    d = daemon_factory().start(wrap=_hold_after("linkat", 3))
    pid = _daemon_pid(d)
    projects = d.root / "projects"
    cli = _background_cli(d, "import", str(tree.projects))
    wait_until(lambda: projects.exists() and sum(1 for p in projects.rglob("*") if p.is_file()) >= 3,
               "three files of the import to land", timeout=60)
    _kill_tracee_first(pid, cli)
    d.kill()
    _wait_dead(pid)
    assert sum(1 for p in projects.rglob("*") if p.is_file()) < len(expected)  # the kill landed inside the import
    cli.wait(timeout=30)
    landed = {str(p.relative_to(projects)): p.read_bytes() for p in projects.rglob("*") if p.is_file()}
    assert landed and all(expected[k] == v for k, v in landed.items())  # whole files only, nothing else
    d.start()
    out = json.loads(d.cli("import", str(tree.projects), "--json").stdout)
    assert out["counts"]["imported"] + out["counts"]["unchanged"] == len(tree.sessions)
    assert {str(p.relative_to(projects)): p.read_bytes() for p in projects.rglob("*") if p.is_file()} == expected


def test_cli_killed_in_the_middle_of_an_rm_with_no_daemon(daemon_factory):
    d = daemon_factory().start()
    sid, files = session_with_agent(d, CWD)
    d.stop()
    path = main_path(d.root, CWD, sid)
    cli = subprocess.Popen([*_hold_after("renameat2", 1), sys.executable, "-m", "sessiond.client.cli", "rm", sid, "--cwd", CWD],
                           env=d.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: not path.exists(), "the first item of the rm to move", timeout=60)
        _kill_tracee_first(_child(cli.pid))
    finally:
        os.killpg(cli.pid, signal.SIGKILL)
        cli.wait(timeout=30)
    assert path.with_suffix("").exists()  # the kill landed between the two moves
    assert _trash(d) == []  # the next CLI run settles it first: rolled back
    assert {p: p.read_bytes() for p in files} == files
