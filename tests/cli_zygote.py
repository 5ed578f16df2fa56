"""Runs of the ``sessiond`` CLI forked from an interpreter that has imported it.

The suite runs the CLI some 1,600 times, and most of each run's CPU is the
start of Python and the CLI's imports, on a suite that is CPU-bound on two
cores. A *zygote*, one per pytest worker, imports the CLI once; each run is
then a ``fork`` of it that takes the run's argv, environment, working
directory, umask and standard streams, and calls the console script's
``main``. The run is still a process of its own: the test's pipes as its fds
0-2, its own exit code, its interpreter's normal exit (atexit handlers, thread
joins, stream flushes). Only the start-up is shared.

What a fork cannot redo is what Python settles as it starts (the locale and
stdio encodings, ``PYTHON*`` settings, the user site from ``HOME``), so a run
whose environment differs from the zygote's there is not forked: ``run``
returns None and the caller starts a new interpreter. The time zone is set
again from the run's ``TZ``. ``SESSIOND_TEST_CLI=exec`` makes every run of
``tests.conftest.run_cli`` a new interpreter (the way to check that the
zygote changes no outcome). Tests of
start-up itself (imports, the hook, ``serve``) start their own interpreters
and never come here.

Protocol, on a Unix socket private to the worker: the test sends a
length-prefixed JSON request with the run's three fds (SCM_RIGHTS); the
zygote answers the child's pid, then its exit code, one line each.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "sessiond.client.cli"]
_STARTUP_PREFIXES = ("PYTHON", "LC_")
_STARTUP_NAMES = ("LANG", "LANGUAGE", "HOME")


def _startup_env(env: dict[str, str]) -> dict[str, str]:
    """The part of an environment the interpreter reads as it starts."""
    return {k: v for k, v in env.items() if k.startswith(_STARTUP_PREFIXES) or k in _STARTUP_NAMES}


# ------------------------------------------------------------------ the zygote


def _preload() -> None:
    """What ``sessiond.client.cli.main`` imports, in its order, and the
    connection most commands go on to import (a run imports the rest itself)."""
    from sessiond.client.cli import import_msgspec_lean

    import_msgspec_lean()
    import sessiond.client.cli.group  # noqa: F401
    import sessiond.client.connection  # noqa: F401


def _serve(listener: socket.socket, parent: int) -> dict[str, Any]:
    """Answer runs until the worker that started it is gone; returns (only in a
    forked child) the run the child is to be."""
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    running: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)
    while os.getppid() == parent:
        for key, _ in sel.select(timeout=1.0):
            if key.data is None:
                conn, _ = listener.accept()
                request, fds = _receive(conn)
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    listener.close()
                    conn.close()
                    for pidfd, (_, other) in running.items():
                        os.close(pidfd)
                        other.close()
                    request["fds"] = fds
                    return request
                for fd in fds:
                    os.close(fd)
                conn.sendall(b"%d\n" % pid)
                pidfd = os.pidfd_open(pid)
                running[pidfd] = (pid, conn)
                sel.register(pidfd, selectors.EVENT_READ, pid)
            else:
                pidfd = key.fd
                pid, conn = running.pop(pidfd)
                sel.unregister(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                try:
                    conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
                except OSError:  # the test gave up on it (a timeout)
                    pass
                conn.close()
    sys.exit(0)


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < 4 or len(data) < 4 + struct.unpack("!I", data[:4])[0]:
        more = conn.recv(1 << 16)
        if not more:
            raise EOFError("request cut short")
        data += more
    (size,) = struct.unpack("!I", data[:4])
    return json.loads(data[4:4 + size]), list(fds)


def _become(request: dict[str, Any]) -> None:
    """In the forked child: take the run's streams, directory, umask,
    environment and argv, then run the console script's ``main`` as ``python
    -m sessiond.client.cli`` would; its SystemExit ends this interpreter the
    normal way."""
    for target, fd in enumerate(request["fds"]):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()  # the zone a new interpreter would take from this environment's TZ
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = request["argv"]
    sys.path[0] = request["cwd"]  # as ``-m`` puts the directory it starts in first
    from sessiond.client.cli import main

    main()


def zygote_main() -> None:
    path = sys.argv[1]
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    _preload()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    request = _serve(listener, parent)
    _become(request)


# ------------------------------------------------------------------ the test's side


class _Zygote:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="sd-zyg-", dir="/tmp"))
        self.path = str(self.dir / "z.sock")
        self.env = dict(os.environ)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.cli_zygote", self.path], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, env=self.env, cwd=REPO)
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()
        if ready != b"ready\n":
            raise RuntimeError(f"the CLI zygote did not start: {ready!r}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        for p in self.dir.iterdir():
            p.unlink()
        self.dir.rmdir()


_zygote: _Zygote | None = None
_lock = threading.Lock()


def _get() -> _Zygote:
    global _zygote
    with _lock:
        if _zygote is None or not _zygote.alive():
            if _zygote is not None:
                _zygote.close()
            _zygote = _Zygote()
        return _zygote


def close() -> None:
    """End the worker's zygote (at the end of the session)."""
    global _zygote
    with _lock:
        if _zygote is not None:
            _zygote.close()
            _zygote = None


def run(args: tuple[str, ...], input: bytes | None, env: dict[str, str] | None,
        timeout: float) -> subprocess.CompletedProcess | None:
    """``subprocess.run([python, -m, sessiond.client.cli, *args], input=input,
    env=env, capture_output=True, timeout=timeout)``, forked from the zygote;
    None when this run must be a new interpreter (see the module's docstring)."""
    if sys.platform != "linux":  # pidfd_open, and what the suite runs on
        return None
    env = dict(os.environ) if env is None else env
    zygote = _get()
    if _startup_env(env) != _startup_env(zygote.env):
        return None
    umask = os.umask(0o022)
    os.umask(umask)
    argv = [str(REPO / "sessiond" / "client" / "cli" / "__main__.py"), *args]
    body = json.dumps({"argv": argv, "env": env, "cwd": os.getcwd(), "umask": umask}).encode()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r = in_w = -1
    if input is not None:
        in_r, in_w = os.pipe()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(zygote.path)
        socket.send_fds(conn, [struct.pack("!I", len(body)) + body], [in_r if input is not None else 0, out_w, err_w])
    finally:
        os.close(out_w)
        os.close(err_w)
        if in_r >= 0:
            os.close(in_r)
    reader = _Reader(conn, out_r, err_r, in_w, input or b"")
    reader.wait(time.monotonic() + timeout)
    if reader.code is None:  # timed out: the run is ended, as subprocess.run ends it
        if reader.pid is not None:
            try:
                os.kill(reader.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reader.finish()
        raise subprocess.TimeoutExpired(CLI + list(args), timeout, output=bytes(reader.out), stderr=bytes(reader.err))
    reader.finish()
    return subprocess.CompletedProcess(CLI + list(args), reader.code, bytes(reader.out), bytes(reader.err))


class _Reader:
    """Reads a run's stdout and stderr to their end, feeds its stdin, and takes
    the zygote's two lines (pid, exit code), with one deadline for all."""

    def __init__(self, conn: socket.socket, out: int, err: int, stdin: int, data: bytes) -> None:
        self.conn, self.out_fd, self.err_fd = conn, out, err
        self.out, self.err, self.status = bytearray(), bytearray(), bytearray()
        self.pid: int | None = None
        self.code: int | None = None
        self.sel = selectors.DefaultSelector()
        self.sel.register(out, selectors.EVENT_READ, self.out)
        self.sel.register(err, selectors.EVENT_READ, self.err)
        self.sel.register(conn, selectors.EVENT_READ, self.status)
        self.stdin, self.data = stdin, memoryview(data)
        if stdin >= 0:
            os.set_blocking(stdin, False)
            self.sel.register(stdin, selectors.EVENT_WRITE, None)

    def wait(self, deadline: float) -> None:
        """Until both streams end and the exit code came, or the deadline."""
        while self.sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for key, _ in self.sel.select(timeout=left):
                if key.data is None:
                    self._feed()
                    continue
                chunk = os.read(key.fd, 1 << 16) if key.fd != self.conn.fileno() else self.conn.recv(64)
                if chunk:
                    key.data.extend(chunk)
                else:
                    self.sel.unregister(key.fd)
        lines = bytes(self.status).split(b"\n")
        if len(lines) >= 2:
            self.pid = int(lines[0])
        if len(lines) >= 3:
            self.code = int(lines[1])

    def _feed(self) -> None:
        try:
            sent = os.write(self.stdin, self.data[:1 << 16])
        except BrokenPipeError:
            sent = len(self.data)
        self.data = self.data[sent:]
        if not self.data:
            self.sel.unregister(self.stdin)
            os.close(self.stdin)
            self.stdin = -1

    def finish(self) -> None:
        for key in list(self.sel.get_map().values()):
            self.sel.unregister(key.fd)
        self.sel.close()
        for fd in (self.out_fd, self.err_fd, self.stdin):
            if fd >= 0:
                os.close(fd)
        self.stdin = -1
        self.conn.close()


if __name__ == "__main__":
    zygote_main()
