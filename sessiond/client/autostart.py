"""Starting the daemon on demand, like ssh-agent and gpg-agent.

The caller runs a short-lived launcher (``python -m sessiond.client.autostart``)
and waits for it. The launcher starts the daemon in its own session with stdio to
a log file next to the socket, waits until the socket answers (or the daemon
dies), and exits; the daemon is then re-parented away, so no agent process is left
with a zombie child or a daemon in its process group. Two clients racing to start
it are harmless: the second daemon finds the lock taken and exits. A daemon that
exits because another one, on another socket, serves the root is reported at once
(its one line names that daemon), not waited for.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from sessiond.store.locations import LOG_NAME, check_private_dir, daemon_holds_lock, open_private_file
from sessiond.wire.errors import DaemonUnavailable, UnsafeSocketDir

START_TIMEOUT = 10.0
EXIT_ALREADY_RUNNING = 3  # the daemon's exit code when another one owns the socket (or the root)
EXIT_UNSAFE_DIR = 4  # the launcher's exit code when the socket directory is not ours alone


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


def start_daemon(sock: Path, root: Path | None, timeout: float = START_TIMEOUT) -> None:
    """Start a daemon for ``sock`` and return once it answers."""
    cmd = [sys.executable, "-m", "sessiond.client.autostart", str(sock), str(root or ""), str(timeout)]
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout + 5)
    except subprocess.TimeoutExpired:
        raise DaemonUnavailable(f"the daemon did not answer on {sock} within {timeout:.0f}s") from None
    if proc.returncode != 0:
        why = proc.stderr.decode(errors="replace").strip().splitlines()
        if proc.returncode == EXIT_UNSAFE_DIR:
            raise UnsafeSocketDir(why[-1] if why else f"{sock.parent} is not a private directory of ours")
        raise DaemonUnavailable(why[-1] if why else f"the daemon failed to start; see {sock.parent / LOG_NAME}")


def _launch(sock: Path, root: str, timeout: float) -> int:
    from .cli.output import echo  # its lines quote the daemon's log and paths: shown as every CLI line is

    # The directory is checked before anything is opened in it: another user
    # may have made it (``/tmp/sessiond-<uid>``) and planted a symlink as the log.
    try:
        sock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        check_private_dir(sock.parent)
        log_path = sock.parent / LOG_NAME
        fd = open_private_file(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except PermissionError as exc:
        echo(f"refusing to start the daemon: {exc}", err=True)
        return EXIT_UNSAFE_DIR
    cmd = [sys.executable, "-m", "sessiond.client.cli", "--socket", str(sock)]
    if root:
        cmd += ["--root", root]
    cmd.append("serve")
    try:
        daemon = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True)
    finally:
        os.close(fd)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if socket_answers(sock):
            return 0
        code = daemon.poll()
        if code is not None and (code != EXIT_ALREADY_RUNNING or not daemon_holds_lock(sock)):
            # Exit 3 with the socket's lock free: it lost the ROOT to a daemon on
            # another socket, which will never answer on this one.
            why = _last_line(log_path)
            echo(f"the daemon failed to start (exit {code}){': ' + why if why else ''}; log: {log_path}", err=True)
            return 1
        time.sleep(0.02)
    echo(f"the daemon did not answer on {sock} within {timeout:.0f}s; see {log_path}", err=True)
    return 1


def _last_line(path: Path) -> str:
    """The daemon's last words (its one-line reason), from the end of the log."""
    from sessiond.store.regular import open_regular  # never blocks on a FIFO planted there

    try:
        with os.fdopen(open_regular(path), "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            lines = f.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    if not lines:
        return ""
    last = lines[-1].removeprefix("sessiond: ")
    stamp = last.find(" sessiond[")  # the log's "<time> sessiond[<pid>] ERROR " prefix: the reason is what follows
    if stamp >= 0 and "] " in last[stamp:]:
        last = last[stamp:].split("] ", 1)[1].split(" ", 1)[-1]
    return last


if __name__ == "__main__":
    sys.exit(_launch(Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])))
