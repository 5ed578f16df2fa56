"""Clients and the root: nothing is sent to a daemon of another root than the one
named, and nothing is written directly into a root a daemon serves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from sessiond.client import AsyncClient, Client, Session, direct_append
from sessiond.wire.errors import RootHeld, WrongRoot
from tests.conftest import DaemonProc, run_cli
from tests.helpers import line, main_path, read_entries, user

pytestmark = pytest.mark.timeout(120)

CWD = "/work/project"


def entry(text: str) -> bytes:
    return line(user(text))


def jsonl_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.jsonl")) if root.exists() else []


# ------------------------------------------------------- a daemon of another root


def test_append_to_a_daemon_of_another_root_is_refused_in_one_line(daemon: DaemonProc, short_tmp):
    mine = short_tmp / "my-root"
    sid = str(uuid.uuid4())
    for command in (["append", "--session", sid], ["record", "--session", sid]):
        r = daemon.cli("--root", str(mine), *command, "--cwd", CWD, input=entry("hello") + b"\n", check=False)
        assert r.returncode == 1, r
        assert r.stderr.decode() == (f"sessiond: the daemon on {daemon.socket} serves {daemon.root}, not {mine}; "
                                     "nothing sent to it\n")
    assert jsonl_files(daemon.root) == [] and jsonl_files(mine) == []
    same = daemon.cli("--root", str(daemon.root), "append", "--cwd", CWD, "--session", sid, "--durability", "written",
                      input=entry("hello") + b"\n")
    assert same.returncode == 0 and len(read_entries(main_path(daemon.root, CWD, sid))) == 1


def test_the_python_clients_refuse_a_daemon_of_another_root(daemon: DaemonProc, short_tmp):
    mine = short_tmp / "my-root"
    with pytest.raises(WrongRoot, match=f"serves {daemon.root}, not {mine}"):
        Client(daemon.socket, root=mine, autostart=False).connect()

    async def go() -> None:
        with pytest.raises(WrongRoot):
            async with AsyncClient(daemon.socket, root=mine, autostart=False):
                pass

    anyio.run(go)
    with Client(daemon.socket, root=daemon.root / ".." / daemon.root.name, autostart=False) as c:  # the same root, spelled otherwise
        assert c.served_root == str(daemon.root)
    with Client(daemon.socket, root=mine, autostart=False, other_root_ok=True) as c:  # asked for: status, stop
        assert c.status().root == str(daemon.root)


def test_status_and_stop_still_reach_a_daemon_of_another_root(daemon: DaemonProc, short_tmp):
    other = str(short_tmp / "my-root")
    st = daemon.cli("--root", other, "status", "--json")
    assert json.loads(st.stdout)["root"] == str(daemon.root)
    assert daemon.cli("--root", other, "stop").returncode == 0
    assert daemon.wait() == 0


# ------------------------------------------- direct writers beside a root's daemon


def other_socket(daemon: DaemonProc, short_tmp: Path) -> dict[str, str]:
    """The daemon's root on a socket where no daemon runs."""
    run = short_tmp / "elsewhere"
    run.mkdir(mode=0o700, exist_ok=True)
    return {**daemon.env, "SESSIOND_SOCKET": str(run / "s.sock")}


def test_append_without_a_daemon_on_its_socket_does_not_write_behind_the_roots_daemon(daemon: DaemonProc, short_tmp):
    env = other_socket(daemon, short_tmp)
    sid = str(uuid.uuid4())
    r = run_cli("--no-autostart", "append", "--cwd", CWD, "--session", sid, input=entry("behind its back") + b"\n",
                env=env, check=False)
    assert r.returncode == 1
    assert r.stderr.decode() == (f"sessiond: another sessiond (pid {daemon.pid}, socket {daemon.socket}) is serving "
                                 f"the root {daemon.root}; not writing behind it (--socket {daemon.socket} reaches it)\n")
    assert not main_path(daemon.root, CWD, sid).exists()
    daemon.stop()  # with no daemon on the root, the fallback writes
    ok = run_cli("--no-autostart", "append", "--cwd", CWD, "--session", sid, input=entry("now alone") + b"\n", env=env)
    assert b"wrote directly to the files" in ok.stderr
    assert [e["message"]["content"] for e in read_entries(main_path(daemon.root, CWD, sid))] == ["now alone"]


def test_autostart_on_another_socket_of_a_served_root_names_the_running_daemon(daemon: DaemonProc, short_tmp):
    env = other_socket(daemon, short_tmp)
    r = run_cli("append", "--cwd", CWD, "--session", str(uuid.uuid4()), input=entry("x") + b"\n", env=env, check=False,
                timeout=30)
    assert r.returncode == 1 and r.stderr.count(b"\n") == 1
    assert f"another sessiond (pid {daemon.pid}, socket {daemon.socket}) is serving the root {daemon.root}".encode() in r.stderr
    assert not Path(env["SESSIOND_SOCKET"]).exists()


def test_direct_append_refuses_while_a_daemon_serves_the_root(daemon: DaemonProc):
    sid = str(uuid.uuid4())
    with pytest.raises(RootHeld) as held:
        direct_append(daemon.root, CWD, sid, [entry("behind its back")])
    assert held.value.holder.pid == daemon.pid and held.value.holder.socket == str(daemon.socket)
    assert not main_path(daemon.root, CWD, sid).exists()


def test_session_close_on_a_dead_socket_leaves_a_served_root_alone(daemon_factory, short_tmp):
    """The session's own daemon died; another daemon now serves the root on its
    own socket: the exit fallback reports the entries undelivered instead of
    writing them behind that daemon."""
    a, b = daemon_factory(name="a"), daemon_factory(name="b")
    a.root = b.root = short_tmp / "one-root"
    a.start()
    sid = str(uuid.uuid4())
    c = Client(a.socket, root=a.root, autostart=False, timeout=5)
    # The append after the kill and the close wait out ``reconnect_timeout`` and
    # their own timeout against a dead socket: what is tested is after them.
    s = Session(c, sid, CWD, reconnect_timeout=0.2)
    s.append(user("delivered"), "written")
    a.kill()
    b.start()
    s.append(user("after the kill"))
    res = s.close(timeout=0.2)
    assert res is not None and res.undelivered == 1 and res.written == 0
    assert [e["message"]["content"] for e in read_entries(main_path(a.root, CWD, sid))] == ["delivered"]


def test_rm_with_no_daemon_on_its_socket_goes_through_the_roots_daemon(daemon: DaemonProc, short_tmp):
    """``rm`` finds the daemon that holds the root (from its lock) and asks it:
    it knows a client is writing the session, which a direct move would not."""
    sid = str(uuid.uuid4())
    env = other_socket(daemon, short_tmp)
    with daemon.client() as c:
        s = Session(c, sid, CWD)
        s.append(user("live"), "written")
        r = run_cli("rm", sid, "--cwd", CWD, env=env, check=False)
        assert r.returncode == 1 and b"is live" in r.stderr, r.stderr
        assert main_path(daemon.root, CWD, sid).exists()
        s.close()
    done = run_cli("rm", sid, "--cwd", CWD, env=env)
    assert done.returncode == 0 and not main_path(daemon.root, CWD, sid).exists()


def test_a_direct_writer_with_the_root_free_still_writes(short_tmp):
    root = short_tmp / "root"
    sid = str(uuid.uuid4())
    res = direct_append(root, CWD, sid, [entry("alone")])
    assert res.written == 1
    assert os.stat(root / ".sessiond.lock").st_size == 0  # made, never claimed by a daemon
    script = ("import sys\nfrom pathlib import Path\nfrom sessiond.store.rootlock import direct_writer\n"
              "with direct_writer(Path(sys.argv[1])):\n    with direct_writer(Path(sys.argv[1])):\n        print('ok')\n")
    assert subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True).stdout == b"ok\n"  # shared: many at once
