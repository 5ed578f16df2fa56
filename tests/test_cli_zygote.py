"""The suite's forked CLI runs (``tests/cli_zygote.py``) are the runs a new
interpreter makes: the same exit code, stdout and stderr, command by command,
for what the environment, the directory, the umask, the time zone, stdin and a
timeout change."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sessiond.store.writers import open_for_writing
from sessiond.wire import messages as m
from tests import cli_zygote
from tests.conftest import DaemonProc
from tests.helpers import line, main_path, user

CWD = "/work/zygote"


def both(args: tuple[str, ...], env: dict[str, str], input: bytes | None = None) -> tuple[tuple, tuple]:
    forked = cli_zygote.run(args, input, env, 60)
    assert forked is not None, "the zygote declined a run it should take"
    fresh = subprocess.run([sys.executable, "-m", "sessiond.client.cli", *args], input=input, env=env,
                           capture_output=True, timeout=60)
    return (forked.returncode, forked.stdout, forked.stderr), (fresh.returncode, fresh.stdout, fresh.stderr)


def test_forked_runs_answer_as_new_interpreters(daemon: DaemonProc, short_tmp):
    sid = str(uuid.uuid4())
    with daemon.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written",
                        entries=[line(user("the zygote's session: wombat", timestamp="2025-03-04T09:30:00Z"))]))
    tokyo = {**daemon.env, "TZ": "Asia/Tokyo", "COLUMNS": "200"}
    runs = [
        ((("--version",)), daemon.env, None),
        (("--help",), daemon.env, None),
        (("list", "--cwd", CWD), tokyo, None),  # the local time: TZ taken from the run's environment
        (("list", "--cwd", CWD), {**tokyo, "TZ": "America/New_York"}, None),
        (("list", "--cwd", CWD, "--json"), daemon.env, None),
        (("show", sid, "--cwd", CWD, "--color", "never"), daemon.env, None),
        (("search", "wombat", "--cwd", CWD, "--json"), daemon.env, None),
        (("list", "--limit", "x"), daemon.env, None),  # a refused command line: one line, exit 2
        (("nosuchcommand",), daemon.env, None),
        (("append", "--cwd", CWD, "--session", str(uuid.uuid4()), "-"), daemon.env, line(user("from stdin")) + b"\n"),
        (("--no-autostart", "--socket", str(short_tmp / "none.sock"), "status"), daemon.env, None),  # no daemon: exit 1
    ]
    for args, env, data in runs:
        forked, fresh = both(args, env, data)
        if args[0] == "append":  # a second append of the same lines: the daemon's dedup answers alike
            assert forked[0] == fresh[0] == 0, (forked, fresh)
            continue
        assert forked == fresh, args


def test_a_forked_run_takes_the_tests_umask_and_directory(daemon: DaemonProc, short_tmp):
    """``install-service`` writes its unit files with the mode the umask
    leaves (``write_bytes``), and a relative ``export -o`` lands in the
    test's directory."""
    config = short_tmp / "xdg"
    work = short_tmp / "work"
    work.mkdir()
    sid = str(uuid.uuid4())
    with daemon.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written", entries=[line(user("export me"))]))
    env = {**daemon.env, "XDG_CONFIG_HOME": str(config)}
    old_cwd, old_umask = os.getcwd(), os.umask(0o027)
    os.chdir(work)
    try:
        installed = cli_zygote.run(("install-service", "--systemd"), None, env, 60)
        exported = cli_zygote.run(("export", sid, "--cwd", CWD, "--format", "markdown", "-o", "here.md"), None, env, 60)
    finally:
        os.chdir(old_cwd)
        os.umask(old_umask)
    assert installed is not None and installed.returncode == 0, installed
    units = list((config / "systemd" / "user").iterdir())
    assert units and {u.stat().st_mode & 0o777 for u in units} == {0o640}, units
    assert exported is not None and exported.returncode == 0, exported
    assert b"export me" in (work / "here.md").read_bytes()


def test_a_run_whose_start_up_environment_differs_is_not_forked(daemon: DaemonProc):
    assert cli_zygote.run(("--version",), None, {**daemon.env, "LC_ALL": "C"}, 60) is None
    assert cli_zygote.run(("--version",), None, {**daemon.env, "PYTHONIOENCODING": "latin-1"}, 60) is None
    # read as a module the zygote preloaded is imported (daemon/uuidset.py): not forked, and the daemon
    # started so is a new interpreter that makes the set the variable asks for
    assert cli_zygote.run(("--version",), None, {**daemon.env, "SESSIOND_UUIDSET": "python"}, 60) is None
    assert cli_zygote.run(("--version",), None, {**daemon.env, "SESSIOND_SOMETHING_NEW": "1"}, 60) is None
    assert cli_zygote.run(("--version",), None, {**daemon.env, "SESSIOND_FSYNC": "none"}, 60) is not None


def test_a_forked_daemon_is_the_daemon_a_new_interpreter_starts(daemon_factory, monkeypatch):
    """``DaemonProc`` forks its daemons from the zygote: the pid its status
    gives, the fd limit it was given, sessiond taking it for its own (a
    session it holds open is not "live" to ``rm``), a SIGTERM stop's exit 0
    and a SIGKILL's -9 as ``Popen`` reports them."""
    monkeypatch.delenv("SESSIOND_TEST_CLI", raising=False)  # (the run that makes every daemon a new interpreter)
    d = daemon_factory(name="forked").start(nofile=256)
    assert isinstance(d.proc, cli_zygote.Forked)
    sid = str(uuid.uuid4())
    with d.client() as c:
        assert c.status().pid == d.pid
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written", entries=[line(user("held"))]))
    assert re.search(r"Max open files\s+256\s+256", Path(f"/proc/{d.pid}/limits").read_text())
    assert d.proc.poll() is None
    path = str(main_path(d.root, CWD, sid))
    held = {os.readlink(f"/proc/{d.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{d.pid}/fd")}
    assert path in held and open_for_writing([path]) == {}  # its own writer, not another program's
    assert d.stop() == 0 and d.proc.poll() == 0 and d.proc.wait(1) == 0
    d.start()
    d.kill()
    assert d.proc.returncode == -9
    monkeypatch.setenv("SESSIOND_UUIDSET", "python")
    fresh = daemon_factory(name="fresh").start()
    assert isinstance(fresh.proc, subprocess.Popen)
    with fresh.client() as c:
        assert c.status().pid == fresh.pid


@pytest.mark.timeout(60)
def test_a_forked_run_past_its_timeout_is_killed(daemon: DaemonProc):
    with pytest.raises(subprocess.TimeoutExpired):
        cli_zygote.run(("watch", str(uuid.uuid4()), "--cwd", CWD), None, daemon.env, 1.0)
