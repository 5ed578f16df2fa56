"""Runs of the ``sessiond`` CLI, and the suite's daemons, forked from an
interpreter that has imported them.

The suite runs the CLI some 1,600 times and starts some 550 daemons, and most
of each one's CPU is the start of Python and its imports, on a suite that is
CPU-bound on two cores. A *zygote*, one per pytest worker, imports the CLI,
every command's module and the daemon once; each run is then a ``fork`` of it
that takes the run's argv, environment, working directory, umask, resource
limits and standard streams, and calls the console script's ``main``. The run
is still a process of its own: the test's pipes (or a daemon's log) as its fds
0-2, its own pid and exit code. Only the start-up is shared, and, for a CLI
run, the teardown of the modules it did not import (``_exit_as_python``: the
exit does all the interpreter's exit does but that). The zygote frees its
preloaded objects from the collector (``gc.freeze``) so forks do not copy
their pages by touching them.

``run`` is ``subprocess.run`` for a CLI command; ``spawn`` is
``subprocess.Popen`` for ``serve`` (``tests.conftest.DaemonProc``), and its
``Forked`` answers what the suite asks of a ``Popen`` (pid, poll, wait,
signals). The zygote's command line names ``sessiond.client.cli``, as a new
interpreter's does, so sessiond tells these processes for its own as it does
those.

What a fork cannot redo is what Python settles as it starts (the locale and
stdio encodings, ``PYTHON*`` settings, the user site from ``HOME``), and what
a preloaded module reads from the environment as it is imported (any
``SESSIOND_`` variable but the run-time ones, see ``_RUN_TIME``); a run whose
environment differs from the zygote's there is not forked: ``run`` and
``spawn`` return None and the caller starts a new interpreter. The time zone
is set again from the run's ``TZ``. ``SESSIOND_TEST_CLI=exec`` makes every
run of ``tests.conftest.run_cli`` and every ``DaemonProc`` a new interpreter
(the way to check that the zygote changes no outcome). Tests of start-up
itself (imports, the hook, ``start``, a daemon under strace or with an
address-space cap) start their own interpreters and never come here.

Protocol, on a Unix socket private to the worker: the test sends a
length-prefixed JSON request with the run's three fds (SCM_RIGHTS); the
zygote answers the child's pid, then its exit code, one line each.
"""

from __future__ import annotations

import gc
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
# sessiond's own variables that are read when a command or the daemon runs (the settings' ENV, the client's
# options, the suite's); any other SESSIOND_ variable may be read as a module is imported (store/crc.py,
# daemon/uuidset.py, store/entries.py), so a run that sets one is not forked from modules imported without it
_RUN_TIME = frozenset({"SESSIOND_CONFIG", "SESSIOND_NO_AUTOSTART", "SESSIOND_TIMEOUT", "SESSIOND_TEST_CLI",
                       "SESSIOND_TEST_THOROUGH"})
FORK_TIMEOUT = 20.0  # seconds for the zygote to answer a run's pid


def _startup_env(env: dict[str, str]) -> dict[str, str]:
    """The part of an environment the interpreter reads as it starts, or the
    zygote's modules as they are imported (not imported by the zygote
    itself before its preload: msgspec is to be imported lean first)."""
    from sessiond.config import ENV

    return {k: v for k, v in env.items() if k.startswith(_STARTUP_PREFIXES) or k in _STARTUP_NAMES
            or (k.startswith("SESSIOND_") and k not in _RUN_TIME and k not in ENV)}


# ------------------------------------------------------------------ the zygote


def _preload() -> None:
    """What ``sessiond.client.cli.main`` imports, in its order; then every
    command's module, what ``--version`` and the readable views import, and
    the daemon ``serve`` runs (``spawn``). The picker and the web view are
    left to the runs that use them: Textual reads its environment as it is
    imported."""
    import importlib
    import pkgutil

    from sessiond.client.cli import import_msgspec_lean

    import_msgspec_lean()
    import sessiond.client.cli as cli
    import sessiond.client.cli.group  # noqa: F401
    import sessiond.client.connection  # noqa: F401

    for module in pkgutil.iter_modules(cli.__path__):
        if module.name != "__main__":  # (runs the CLI)
            importlib.import_module(f"{cli.__name__}.{module.name}")
    import importlib.metadata  # noqa: F401

    import sessiond.client.render.html  # noqa: F401
    import sessiond.client.render.terminal  # noqa: F401
    import sessiond.daemon.server  # noqa: F401


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
    environment, resource limits and argv, then run the console script's
    ``main`` as ``python -m sessiond.client.cli`` would. A spawned run (the
    daemon) ends as any interpreter ends; a CLI run ends by ``_exit_as_python``."""
    import resource

    for target, fd in enumerate(request["fds"]):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()  # the zone a new interpreter would take from this environment's TZ
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for name, value in request.get("limits", {}).items():
        resource.setrlimit(getattr(resource, name), (value, value))
    sys.argv = request["argv"]
    sys.path[0] = request["cwd"]  # as ``-m`` puts the directory it starts in first
    from sessiond.client.cli import main

    if request.get("spawn"):
        main()
        return
    try:
        main()
        code: object = 0
    except SystemExit as stop:
        code = stop.code
    _exit_as_python(code)


def _exit_as_python(code: object) -> None:
    """End a CLI run as the interpreter's exit does (``Py_FinalizeEx``): join
    its threads, run its atexit callbacks, flush the standard streams,
    collect what is garbage. What it leaves out is the teardown of every module
    the zygote imported, which is most of a forked run's CPU (each object's
    refcount write copies its page) and finalizes only what the run left in
    module globals. Any exit off this path (a message as the code, a flush
    that fails) goes the interpreter's own way."""
    import atexit

    if code is not None and not isinstance(code, int):
        sys.exit(code)  # printed to stderr, status 1
    threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter calls first at exit
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        gc.collect()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        sys.exit(code)  # the interpreter's exit tries the flush again and reports it (status 120)
    os._exit(code or 0)


def zygote_main() -> None:
    path = sys.argv[-1]
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    _preload()
    # What the preload made lives as long as the runs: out of the collector's sight, a run neither
    # collects it nor, by touching its objects' headers, copies every page of it (copy-on-write)
    gc.freeze()
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
        # "sessiond.client.cli" in its command line, as in a new interpreter's: what the zygote forks (CLI runs,
        # daemons) inherits it, and it is how sessiond tells its own processes (store/writers.py)
        argv = [sys.executable, "-m", "tests.cli_zygote", "sessiond.client.cli", self.path]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
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


def _accepting(env: dict[str, str]) -> _Zygote | None:
    """The worker's zygote, when a run in ``env`` can be forked from it."""
    if sys.platform != "linux":  # pidfd_open, and what the suite runs on
        return None
    zygote = _get()
    return zygote if _startup_env(env) == _startup_env(zygote.env) else None


def _send(zygote: _Zygote, args: tuple[str, ...], env: dict[str, str], fds: list[int], **extra: Any) -> socket.socket:
    """Ask the zygote for a run of the CLI with ``args`` whose fds 0-2 are
    ``fds``; the connection its pid and exit code come back on."""
    umask = os.umask(0o022)
    os.umask(umask)
    argv = [str(REPO / "sessiond" / "client" / "cli" / "__main__.py"), *args]
    body = json.dumps({"argv": argv, "env": env, "cwd": os.getcwd(), "umask": umask, **extra}).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(zygote.path)
        socket.send_fds(conn, [struct.pack("!I", len(body)) + body], fds)
    except BaseException:
        conn.close()
        raise
    return conn


def run(args: tuple[str, ...], input: bytes | None, env: dict[str, str] | None,
        timeout: float) -> subprocess.CompletedProcess | None:
    """``subprocess.run([python, -m, sessiond.client.cli, *args], input=input,
    env=env, capture_output=True, timeout=timeout)``, forked from the zygote;
    None when this run must be a new interpreter (see the module's docstring)."""
    env = dict(os.environ) if env is None else env
    zygote = _accepting(env)
    if zygote is None:
        return None
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r = in_w = -1
    if input is not None:
        in_r, in_w = os.pipe()
    try:
        conn = _send(zygote, args, env, [in_r if input is not None else 0, out_w, err_w])
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


def spawn(args: tuple[str, ...], env: dict[str, str], output: int, limits: dict[str, int]) -> Forked | None:
    """``subprocess.Popen([python, -m, sessiond.client.cli, *args], env=env,
    stdin=DEVNULL, stdout=output, stderr=output)`` with ``limits``
    (``resource`` names: ``{"RLIMIT_NOFILE": 64}``) set in the child,
    forked from the zygote: how the suite starts its daemons (``serve``)
    without importing the daemon anew each time. None when the run must be a
    new interpreter."""
    zygote = _accepting(env)
    if zygote is None:
        return None
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        conn = _send(zygote, args, env, [null, output, output], spawn=True, limits=limits)
    finally:
        os.close(null)
    return Forked(conn, CLI + list(args))


class Forked:
    """A spawned run, with what the suite uses of a ``Popen``: ``pid``,
    ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill`` and
    ``returncode`` (negative: the signal that ended it). The zygote is its
    parent and reaps it, and sends its exit code on the run's connection.
    Signals go through a pidfd, so none reaches a process that took the pid
    after the run was reaped."""

    def __init__(self, conn: socket.socket, args: list[str]) -> None:
        self.args = args
        self.returncode: int | None = None
        self._conn = conn
        self._said = bytearray()
        self._lines: list[int] = []
        self._pidfd: int | None = None
        self._read(FORK_TIMEOUT, lines=1)
        if not self._lines:
            conn.close()
            raise RuntimeError("the zygote did not fork the run")
        self.pid = self._lines[0]
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except ProcessLookupError:  # already ended and reaped: its exit code is on its way
            pass

    def _read(self, timeout: float | None, lines: int = 2) -> None:
        """Take what the zygote says within ``timeout`` seconds (None: no
        limit) until it has said ``lines`` lines: the pid, then the exit code
        (which sets ``returncode``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(self._lines) < lines:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not _readable(self._conn, left):
                return
            chunk = self._conn.recv(64)
            if not chunk:
                self._conn.close()
                raise RuntimeError(f"the zygote went away before {self.args} ended")
            self._said += chunk
            *done, rest = bytes(self._said).split(b"\n")
            self._said = bytearray(rest)
            self._lines += [int(x) for x in done]
        if len(self._lines) >= 2 and self.returncode is None:
            self.returncode = self._lines[1]
            self._conn.close()
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._read(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None and self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:  # ended, not yet reaped
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _readable(conn: socket.socket, timeout: float | None) -> bool:
    with selectors.DefaultSelector() as sel:
        sel.register(conn, selectors.EVENT_READ)
        return bool(sel.select(timeout))


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
