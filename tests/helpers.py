"""Small builders of transcript entries and readers of transcript files for tests."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
import uuid as uuidlib
from pathlib import Path

from sessiond.store.paths import project_dir, session_file


def sigint_default() -> None:
    """A ``preexec_fn`` for a child a test will interrupt (SIGINT): a test run
    started as a background job of a non-interactive shell (``cmd &``, some CI
    runners) inherits SIGINT ignored, and Python then never raises
    KeyboardInterrupt in the child, so the Ctrl-C under test would be lost."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_until_open(proc: subprocess.Popen, inside: Path, timeout: float = 30.0) -> None:
    """Wait until ``proc`` holds a descriptor on ``inside`` or a file below it:
    its own code is running. A signal sent before that lands in the interpreter's
    start-up (a loaded machine takes seconds there), which is Python's behaviour,
    not the command's."""
    deadline = time.monotonic() + timeout
    fds = Path(f"/proc/{proc.pid}/fd")
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            targets = [os.readlink(fds / fd) for fd in os.listdir(fds)]
        except OSError:  # it exited, or an fd closed between the listing and the readlink
            targets = []
        if any(t == str(inside) or t.startswith(f"{inside}/") for t in targets):
            return
        time.sleep(0.005)


def user(text: str, uid: str | None = None, **extra) -> dict:
    return {"type": "user", "message": {"role": "user", "content": text}, "uuid": uid or str(uuidlib.uuid4()), **extra}


def assistant(text: str, uid: str | None = None, **extra) -> dict:
    return {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
            "uuid": uid or str(uuidlib.uuid4()), **extra}


def line(entry: dict) -> bytes:
    return json.dumps(entry, separators=(",", ":")).encode()


def api_request_lines(session: str, leaf: str) -> list[bytes]:
    """What Claude Code writes without a uuid around each API request: a
    ``last-prompt`` naming the newest entry (``leaf``), then ``atis-latch`` and
    ``api-request-route``, byte for byte the same at every request."""
    return [line({"type": "last-prompt", "sessionId": session, "leafUuid": leaf}),
            line({"type": "atis-latch", "sessionId": session, "atis": ""}),
            line({"type": "api-request-route", "sessionId": session, "provider": "customEndpoint", "credential": "key"})]


def read_entries(path: Path) -> list[dict]:
    """Every line of a file parsed; fails the test on a torn or invalid line."""
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), f"{path} does not end with a newline"
    return [json.loads(ln) for ln in data.splitlines() if ln]


def main_path(root: Path, cwd: str, session: str) -> Path:
    return session_file(project_dir(root, cwd), session)


def wait_until(condition, what: str, timeout: float = 15.0, every: float = 0.05) -> None:
    """Poll ``condition`` until it is true; fail naming ``what`` if it never is.
    A bound on a wait, not a timing assertion."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def index_status(d) -> dict:
    """The daemon ``d``'s search indexer status (``status().index``; {} with no index)."""
    with d.client() as c:
        return c.status().index or {}


def indexer_started(d) -> dict:
    """The daemon ``d``'s search indexer status, once the indexer runs (it
    starts ``link.START_DELAY`` after the daemon, or at the first search)."""
    status: dict = {}

    def running() -> bool:
        status.update(index_status(d))
        return bool(status.get("running"))

    wait_until(running, "the search indexer to start")
    return status


def make_deep(base: Path, nbytes: int) -> str:
    """An existing directory chain ``base/d/d/...`` of about ``nbytes`` (a cwd
    as deep as PATH_MAX allows), made level by level through descriptors."""
    import os

    levels = (nbytes - len(str(base))) // 2
    fd = os.open(base, os.O_RDONLY)
    for _ in range(levels):
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(fd)
    return str(base) + "/d" * levels


def remove_deep(base: Path) -> None:
    """Remove a ``make_deep`` chain bottom-up by descriptors (shutil.rmtree
    recurses once per level and gives up past the recursion limit)."""
    import os

    fds = [os.open(base, os.O_RDONLY)]
    while True:
        try:
            fds.append(os.open("d", os.O_RDONLY, dir_fd=fds[-1]))
        except FileNotFoundError:
            break
    os.close(fds.pop())
    while fds:
        parent = fds.pop()
        os.rmdir("d", dir_fd=parent)
        os.close(parent)


class CliProcess:
    """A ``sessiond`` command that runs until it is stopped (``tail -f``,
    ``watch``): its output read line by line, each read with a timeout, and the
    process killed and reaped at the end of the ``with`` block."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", *args], env=env, bufsize=0,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._buf = b""

    def line(self, timeout: float = 20.0) -> bytes:
        """The next line it prints (with its newline); fails after ``timeout``
        seconds without one, or when the process ends first."""
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise AssertionError(f"{self.proc.args[3:]} printed no whole line within {timeout:g}s (so far {self._buf!r})")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"{self.proc.args[3:]} exited ({self.proc.wait(timeout)}) before printing a line: "
                                     f"{self.proc.stderr.read().decode(errors='replace')}")
            self._buf += chunk
        head, _, self._buf = self._buf.partition(b"\n")
        return head + b"\n"

    def __enter__(self) -> CliProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait(timeout=20)
        self.proc.stdout.close()
        self.proc.stderr.close()


THOROUGH_PROFILE = "ci"
"""``--hypothesis-profile=ci`` (or ``SESSIOND_TEST_THOROUGH=1``): every property
test at its full example count, for CI, which has the time."""


def examples(full: int) -> int:
    """The example count of a property test that dominates the suite's run time:
    ``full`` in the thorough run, a quarter of it (at least 25) in ``make test``
    on a developer's machine (these few tests were half the protocol tests' time).
    Each run draws new examples, so the quick runs add up to coverage too; CI
    runs the full counts."""
    import os

    from hypothesis import settings

    thorough = os.environ.get("SESSIOND_TEST_THOROUGH") == "1" or \
        settings.default.max_examples >= settings.get_profile(THOROUGH_PROFILE).max_examples
    return full if thorough else max(25, full // 4)


def in_terminal(args: list[str], env: dict, rows: int = 24, cols: int = 100, timeout: float = 60, *,
                answer: bytes | None = None, after: bytes = b"") -> tuple[int, bytes]:
    """Run the CLI with a pty of ``rows`` x ``cols`` as stdin, stdout and
    stderr, typing ``answer`` once ``after`` shows (if given); (exit status,
    all it wrote)."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", *args], stdin=slave, stdout=slave, stderr=slave,
                            env=env, close_fds=True, preexec_fn=sigint_default)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the other side is closed
                    break
                if not chunk:
                    break
                out += chunk
                if answer is not None and after in out:
                    os.write(master, answer)
                    answer = None
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=max(1.0, deadline - time.monotonic())), bytes(out)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
