"""Starting the daemon on demand, like ssh-agent and gpg-agent.

The daemon is spawned detached (its own session, stdio to a log file next to the
socket) and we wait until its socket answers. Two clients racing to start it are
harmless: the second daemon finds the lock taken and exits.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from sessiond.protocol.locations import LOG_NAME
from sessiond.protocol.wire.errors import DaemonUnavailable

START_TIMEOUT = 10.0


def socket_answers(path: Path) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def spawn_daemon(sock: Path, root: Path | None, extra: list[str] | None = None) -> subprocess.Popen:
    sock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "sessiond.client.cli", "--socket", str(sock)]
    if root is not None:
        cmd += ["--root", str(root)]
    cmd += ["serve", *(extra or [])]
    log_path = sock.parent / LOG_NAME
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(fd)


def start_daemon(sock: Path, root: Path | None, timeout: float = START_TIMEOUT) -> None:
    """Spawn a daemon and wait until its socket answers."""
    proc = spawn_daemon(sock, root)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if socket_answers(sock):
            return
        code = proc.poll()
        if code is not None and code != 3:  # 3: another daemon won the race
            raise DaemonUnavailable(
                f"the daemon failed to start (exit {code}); see {sock.parent / LOG_NAME}"
            )
        time.sleep(0.02)
    raise DaemonUnavailable(f"the daemon did not answer on {sock} within {timeout:.0f}s")
