"""Shared fixtures: real daemon processes on real sockets in short temp dirs."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import settings

from sessiond.client.autostart import socket_answers
from sessiond.client.connection import Client
from tests import cli_zygote

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "corpus" / "claude-code"  # real transcripts carried with the tests (see SOURCES.md)
START_TIMEOUT = 15.0

settings.register_profile("ci", max_examples=400)  # tests.helpers.THOROUGH_PROFILE: see examples()

# The CLI sizes its tables from COLUMNS/LINES before the terminal; pytest-xdist's
# workers set both (80x24), which a test of piped or pty output must not see.
# A test that wants a width passes COLUMNS in its own environment.
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)


def pytest_sessionfinish() -> None:
    cli_zygote.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextmanager
def short_dir() -> Iterator[Path]:
    """``short_tmp`` for any scope."""
    d = Path(tempfile.mkdtemp(prefix="sd-", dir="/tmp"))
    os.chmod(d, 0o700)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A 0700 dir with a short path: Unix socket paths must stay under ~104 bytes."""
    with short_dir() as d:
        yield d


class DaemonProc:
    """A real ``sessiond serve`` process, started and stopped by the test."""

    def __init__(self, base: Path, *args: str) -> None:
        self.base = base
        self.root = base / "root"
        self.socket = base / "run" / "sessiond.sock"
        self.log = base / "daemon.log"
        self.wrapped = False
        self.args = list(args)
        self.proc: subprocess.Popen | cli_zygote.Forked | None = None

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SESSIOND_ROOT"] = str(self.root)
        env["SESSIOND_SOCKET"] = str(self.socket)
        return env

    def start(self, *args: str, nofile: int | None = None, fsize: int | None = None, wrap: list[str] | None = None,
              address_space: int | None = None) -> DaemonProc:
        """Start the daemon; ``nofile`` caps its fd limit, ``fsize`` the largest
        file it may write (RLIMIT_FSIZE), ``address_space`` its memory
        (RLIMIT_AS), ``wrap`` runs it under a command (strace for fault injection)."""
        self.socket.parent.mkdir(mode=0o700, exist_ok=True)
        extra = list(args) or self.args

        def limit() -> None:
            import resource

            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            if fsize is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
            if address_space is not None:
                resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

        env = self.env
        if wrap:  # a traced daemon: strace -f would follow (and inject faults into) the search indexer's process too
            env = {**env, "SESSIOND_SEARCH_INDEX": "false"}
        args = ("serve", "--log-level", "debug", *extra)
        limits = {name: value for name, value in (("RLIMIT_NOFILE", nofile), ("RLIMIT_FSIZE", fsize)) if value is not None}
        with open(self.log, "ab") as log:
            # forked from the worker's CLI zygote, which has imported the daemon (the imports are most of a start's
            # CPU); a new interpreter under a wrapper, with an address-space cap (the zygote's image is not a new
            # process's), or where SESSIOND_TEST_CLI=exec asks for every run to be one
            forked = None
            if not wrap and address_space is None and os.environ.get("SESSIOND_TEST_CLI") != "exec":
                forked = cli_zygote.spawn(args, env, log.fileno(), limits)
            self.proc = forked or subprocess.Popen(
                [*(wrap or []), sys.executable, "-m", "sessiond.client.cli", *args],
                env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL, preexec_fn=limit,
                start_new_session=bool(wrap),  # stop/kill reach the daemon under the wrapper too
            )
        self.wrapped = bool(wrap)
        deadline = time.monotonic() + START_TIMEOUT
        while not socket_answers(self.socket):
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}: {self.log.read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"daemon did not start: {self.log.read_text()}")
            time.sleep(0.01)
        # A connect succeeds as soon as the socket listens, before the daemon has
        # settled what a kill left (trash recovery, spool replay): started means
        # serving, so wait for an answer.
        with self.client() as c:
            c.status()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, sig: int) -> None:
        self._signal_all(sig)

    def wait(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self._signal_all(signal.SIGTERM)
        return self.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self._signal_all(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def _signal_all(self, sig: int) -> None:
        """The daemon, and when it runs under a wrapper (which need not pass
        signals on), the wrapper's whole process group."""
        assert self.proc is not None
        if self.wrapped:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
        else:
            self.proc.send_signal(sig)

    def client(self, **kw) -> Client:
        kw.setdefault("autostart", False)
        kw.setdefault("timeout", 20.0)
        return Client(self.socket, root=self.root, **kw).connect()

    def cli(self, *args: str, input: bytes | None = None, check: bool = True, env: dict | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
        return run_cli(*args, input=input, env={**self.env, **(env or {})}, check=check, timeout=timeout)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def run_cli(*args: str, input: bytes | None = None, env: dict | None = None, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    """``sessiond ARGS`` as a process of its own, its output captured: forked
    from an interpreter that has imported the CLI (``tests/cli_zygote.py``)
    where the environment allows, else a new ``python -m sessiond.client.cli``."""
    forked = None if os.environ.get("SESSIOND_TEST_CLI") == "exec" else cli_zygote.run(args, input, env, timeout)
    proc = forked or subprocess.run(
        [sys.executable, "-m", "sessiond.client.cli", *args],
        input=input, env=env, capture_output=True, timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"sessiond {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode()}")
    return proc


@pytest.fixture
def daemon_factory(short_tmp: Path) -> Iterator:
    made: list[DaemonProc] = []

    def make(*args: str, name: str = "d") -> DaemonProc:
        base = short_tmp / name
        base.mkdir(mode=0o700, exist_ok=True)
        d = DaemonProc(base, *args)
        made.append(d)
        return d

    yield make
    for d in made:
        try:
            d.stop()
        except Exception:
            d.kill()


@pytest.fixture
def daemon(daemon_factory) -> DaemonProc:
    return daemon_factory().start()


@pytest.fixture(scope="module")
def shared_daemon() -> Iterator[DaemonProc]:
    """One daemon for a whole module, for tests that only add sessions of their
    own (a fresh session id each) and never stop, kill or reconfigure it: a
    start costs about a second on a loaded machine, a session id nothing."""
    with short_dir() as base, stopped_after(DaemonProc(base)) as d:
        yield d.start()


@contextmanager
def stopped_after(d: DaemonProc) -> Iterator[DaemonProc]:
    """``d``, stopped (killed if a stop fails) when the block ends."""
    try:
        yield d
    finally:
        try:
            d.stop()
        except Exception:
            d.kill()
