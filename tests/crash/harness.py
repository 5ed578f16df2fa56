"""The crash-recovery harness: real daemon and client processes, SIGKILL at
random moments, then every file checked. Used by tests/crash (a few fast rounds)
and bench/crash_soak.py (hundreds of rounds).

What is checked after a run:
- every file parses line by line (a torn last line is allowed: the next append
  moves it to <file>.torn);
- every entry acknowledged at ANY level by the daemon is in its file exactly once
  (uuid entries; acked uuid-less titles at least once) — clients resend what was
  not known to be written after a daemon restart, uuid dedup makes that idempotent.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

from sessiond.client.autostart import socket_answers
from sessiond.protocol.transcript.paths import project_dir, session_file

WORKER = Path(__file__).with_name("worker.py")


class Harness:
    def __init__(self, base: Path, clients: int = 4, seed: int = 0, daemon_args: tuple[str, ...] = ()) -> None:
        self.base = base
        self.root = base / "root"
        self.socket = base / "run" / "s.sock"
        self.socket.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.rng = random.Random(seed)
        self.daemon: subprocess.Popen | None = None
        self.daemon_args = daemon_args
        self.sessions = [(str(uuid.uuid4()), f"/crash/client{i}") for i in range(clients)]
        self.workers: list[subprocess.Popen | None] = [None] * clients
        self.daemon_kills = self.client_kills = 0
        self.log = open(base / "daemon.log", "ab")

    # ---------------------------------------------------------------- processes

    def start_daemon(self) -> None:
        self.daemon = subprocess.Popen(
            [sys.executable, "-m", "sessiond.client.cli", "--socket", str(self.socket), "--root", str(self.root), "serve",
             "--flush-interval", "20", *self.daemon_args],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while not socket_answers(self.socket):
            if self.daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"daemon did not start ({self.daemon.poll()})")
            time.sleep(0.01)

    def kill_daemon(self) -> None:
        assert self.daemon is not None
        self.daemon.kill()
        self.daemon.wait(timeout=20)
        self.daemon_kills += 1

    def ackfile(self, i: int) -> Path:
        return self.base / f"acks-{i}.jsonl"

    def start_worker(self, i: int) -> None:
        sid, cwd = self.sessions[i]
        p = subprocess.Popen([sys.executable, str(WORKER), str(self.socket), str(self.root), sid, cwd, str(self.ackfile(i))],
                             stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert p.stdout.readline().strip() == b"ready"
        self.workers[i] = p

    def kill_worker(self, i: int) -> None:
        p = self.workers[i]
        assert p is not None
        p.kill()
        p.wait(timeout=20)
        p.stdout.close()
        self.client_kills += 1

    def stop_workers(self) -> None:
        for p in self.workers:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.workers:
            if p is not None:
                p.wait(timeout=120)
                p.stdout.close()

    def stop_daemon(self) -> int:
        assert self.daemon is not None
        self.daemon.send_signal(signal.SIGTERM)
        return self.daemon.wait(timeout=60)

    def close(self) -> None:
        for p in [*self.workers, self.daemon]:
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        self.log.close()

    # -------------------------------------------------------------------- rounds

    def pause(self) -> None:
        time.sleep(self.rng.uniform(0.02, 0.25))

    def daemon_kill_rounds(self, rounds: int) -> None:
        """SIGKILL the daemon under load ``rounds`` times, restarting it each time."""
        for _ in range(rounds):
            self.pause()
            self.kill_daemon()
            if self.rng.random() < 0.3:
                time.sleep(self.rng.uniform(0, 0.2))  # clients find no daemon for a while
            self.start_daemon()

    def client_kill_rounds(self, rounds: int) -> None:
        """SIGKILL a random client ``rounds`` times and start it again."""
        for _ in range(rounds):
            self.pause()
            i = self.rng.randrange(len(self.workers))
            self.kill_worker(i)
            self.start_worker(i)

    # --------------------------------------------------------------------- check

    def verify(self) -> dict:
        """Check every file; returns figures, raises AssertionError on a loss."""
        acked = 0
        torn_tails = 0
        for i, (sid, cwd) in enumerate(self.sessions):
            path = session_file(project_dir(self.root, cwd), sid)
            data = path.read_bytes() if path.exists() else b""
            lines = data.split(b"\n")
            tail = lines.pop()  # b"" when the file ends with a newline
            entries = [json.loads(line) for line in lines if line]  # every whole line parses
            if tail:
                torn_tails += 1
            uuids = Counter(e["uuid"] for e in entries if "uuid" in e)
            titles = {e["customTitle"] for e in entries if e.get("type") == "custom-title"}
            dup = [u for u, n in uuids.items() if n > 1]
            assert not dup, f"session {i}: duplicated uuids {dup[:3]}"
            if not self.ackfile(i).exists():
                continue
            for raw in self.ackfile(i).read_text().splitlines():
                if not raw.endswith("]"):
                    continue  # the worker was killed while logging
                u, level = json.loads(raw)
                acked += 1
                if u.startswith("title "):
                    assert u in titles, f"session {i}: acked {level} title {u!r} lost"
                else:
                    assert uuids.get(u) == 1, f"session {i}: acked {level} entry {u} lost"
        return {"acked": acked, "torn_tails": torn_tails, "daemon_kills": self.daemon_kills, "client_kills": self.client_kills}
