"""One writer per root: a second daemon on a root another daemon serves (on any
socket) exits 3 before it binds or writes, and the lock goes with its holder."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import DaemonProc
from tests.helpers import main_path, read_entries, user, wait_until

CWD = "/work/project"

pytestmark = pytest.mark.timeout(120)


def pair(daemon_factory, short_tmp: Path) -> tuple[DaemonProc, DaemonProc]:
    """Two daemons with their own sockets on one root."""
    a, b = daemon_factory(name="a"), daemon_factory(name="b")
    a.root = b.root = short_tmp / "shared-root"
    return a, b


def serve_once(d: DaemonProc, timeout: float = 60) -> subprocess.CompletedProcess:
    """``sessiond serve`` as ``d`` would run it, to completion."""
    d.socket.parent.mkdir(mode=0o700, exist_ok=True)
    return subprocess.run([sys.executable, "-m", "sessiond.client.cli", "serve"], env=d.env, capture_output=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("first", ["a", "b"])
def test_a_second_daemon_on_the_same_root_exits_3_naming_the_first(daemon_factory, short_tmp, first):
    a, b = pair(daemon_factory, short_tmp)
    running, loser = (a, b) if first == "a" else (b, a)
    running.start()
    sid = str(uuid.uuid4())
    with running.client() as c:
        c.session(sid, CWD).append(user("only the first daemon writes"), "written")
    transcripts = lambda: sorted((p, p.stat().st_size, p.stat().st_mtime_ns) for p in running.root.rglob("*.jsonl"))  # noqa: E731
    before = transcripts()
    r = serve_once(loser)
    assert r.returncode == 3, r.stderr
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert f"pid {running.pid}, socket {running.socket}" in lines[0] and str(running.root) in lines[0]
    assert not loser.socket.exists()  # it never bound, so nobody could send it anything
    assert transcripts() == before and len(before) == 1
    assert json.loads((running.root / ".sessiond.lock").read_bytes()) == {"pid": running.pid, "socket": str(running.socket)}
    with running.client() as c:  # the first one never noticed
        assert c.status().pid == running.pid


def test_the_root_is_free_again_once_its_daemon_is_killed(daemon_factory, short_tmp):
    a, b = pair(daemon_factory, short_tmp)
    a.start()
    a.kill()  # SIGKILL: no cleanup ran, the kernel dropped the flock
    b.start()
    sid = str(uuid.uuid4())
    with b.client() as c:
        assert c.status().pid == b.pid
        c.session(sid, CWD).append(user("written by the second"), "written")
    assert read_entries(main_path(b.root, CWD, sid))[0]["message"]["content"] == "written by the second"
    assert json.loads((b.root / ".sessiond.lock").read_bytes())["pid"] == b.pid
    r = serve_once(a)  # and now the first one, restarted, is the loser
    assert r.returncode == 3 and f"pid {b.pid}, socket {b.socket}" in r.stderr.decode()


def test_a_stopped_daemon_releases_the_root(daemon_factory, short_tmp):
    a, b = pair(daemon_factory, short_tmp)
    a.start()
    assert a.stop() == 0
    b.start()
    with b.client() as c:
        assert c.status().pid == b.pid


@pytest.mark.skipif(not shutil.which("systemd-socket-activate"), reason="systemd-socket-activate not installed")
def test_a_socket_activated_daemon_on_a_served_root_exits_3_before_serving(daemon_factory, short_tmp):
    a, b = pair(daemon_factory, short_tmp)
    a.start()
    b.socket.parent.mkdir(mode=0o700)
    env = {**b.env}
    env.pop("SESSIOND_SOCKET")
    log = short_tmp / "activated.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["systemd-socket-activate", "-l", str(b.socket), "-E", "SESSIOND_ROOT", "-E", "PATH",
                                 sys.executable, "-m", "sessiond.client.cli", "serve"], env=env, stdout=out, stderr=out)
    try:
        import socket as socketlib

        socks: list[socketlib.socket] = []

        def connected() -> bool:
            # The socket's file exists from its bind(2), a moment before it
            # listens: a connect in between is refused, so try again.
            socks.append(socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM))
            try:
                socks[-1].connect(str(b.socket))  # the first connection starts the daemon, which must lose
            except (FileNotFoundError, ConnectionRefusedError):
                socks.pop().close()
                assert proc.poll() is None, log.read_text()
                return False
            return True

        try:
            wait_until(connected, "the activation socket to listen", every=0.01)
            s = socks[0]
            s.settimeout(20)
            try:
                assert s.recv(1) == b""  # closed without a word: it never served
            except ConnectionResetError:
                pass
        finally:
            for sock in socks:
                sock.close()
        assert proc.wait(timeout=30) == 3
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert f"pid {a.pid}, socket {a.socket}" in text and "ready" not in text


def test_a_daemon_waits_for_a_direct_writer_then_serves(daemon_factory, short_tmp):
    """A direct writer (fallback, rm with no daemon) holds the root shared while it
    writes: a daemon starting meanwhile waits for it instead of writing under it."""
    d = daemon_factory()
    d.root.mkdir(mode=0o700)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\nfrom sessiond.store.rootlock import direct_writer\n"
         "with direct_writer(Path(sys.argv[1])):\n    print('held', flush=True)\n    time.sleep(float(sys.argv[2]))\n"
         "    Path(sys.argv[3]).write_text('done')\n",  # written while still holding the root
         str(d.root), "1.5", str(short_tmp / "writer-done")], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        d.start()
        assert (short_tmp / "writer-done").exists()  # ready only after the writer's last act under the lock
        assert holder.wait(timeout=10) == 0
    finally:
        if holder.poll() is None:
            holder.send_signal(signal.SIGKILL)
            holder.wait()
        holder.stdout.close()
    with d.client() as c:
        assert c.status().pid == d.pid
    assert json.loads((d.root / ".sessiond.lock").read_bytes())["pid"] == d.pid
    assert os.stat(d.root / ".sessiond.lock").st_mode & 0o777 == 0o600


def test_a_symlink_planted_as_the_root_lock_is_refused_in_one_line(daemon_factory, short_tmp):
    d = daemon_factory()
    d.root.mkdir(mode=0o700)
    target = short_tmp / "elsewhere"
    (d.root / ".sessiond.lock").symlink_to(target)
    r = serve_once(d)
    assert r.returncode == 1 and r.stderr.decode().count("\n") == 1
    assert ".sessiond.lock is a symlink" in r.stderr.decode()
    assert not target.exists() and not d.socket.exists()
