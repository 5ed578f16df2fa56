"""The crash-recovery harness: real daemon and client processes, SIGKILL at
random moments, then every file checked. Used by tests/crash (a few fast rounds)
and bench/crash_soak.py (hundreds of rounds).

Two kinds of clients: ``worker.py`` appends to one long session; with
``session_clients``, ``session_worker.py`` starts one new session after another
(pre-message entries at every durability, then the first message), so kills land
before, during and after materialization.

What is checked after a run:
- every file parses line by line (a torn last line is allowed: the next append
  moves it to <file>.torn);
- every entry acknowledged at ANY level by the daemon is in its file exactly once
  (uuid entries exactly once; acked uuid-less titles and tags at least once, and
  a second copy only where it is the documented metadata re-append: the latest
  value of its kind at that point) — clients resend what was not known to be
  written after a daemon restart, uuid dedup makes that idempotent;
- entries held before a session's first message come before it in the file.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

from sessiond.client.autostart import socket_answers
from sessiond.store.paths import project_dir, session_file

WORKER = Path(__file__).with_name("worker.py")
SESSION_WORKER = Path(__file__).with_name("session_worker.py")
METADATA_KEYS = {"custom-title": "customTitle", "tag": "tag"}


class Harness:
    def __init__(self, base: Path, clients: int = 4, seed: int = 0, daemon_args: tuple[str, ...] = (),
                 session_clients: int = 0, client_timeout: float = 5.0) -> None:
        self.base = base
        self.root = base / "root"
        self.socket = base / "run" / "s.sock"
        self.socket.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.rng = random.Random(seed)
        self.daemon: subprocess.Popen | None = None
        self.daemon_args = daemon_args
        self.sessions = [(str(uuid.uuid4()), f"/crash/client{i}") for i in range(clients)]
        self.session_cwds = [f"/crash/sessions{j}" for j in range(session_clients)]
        self.client_timeout = client_timeout
        self.workers: list[subprocess.Popen | None] = [None] * (clients + session_clients)
        self.daemon_kills = self.client_kills = self.daemon_stops = self.resend_kills = 0
        self.at_risk: set[str] = set()
        """``queued`` acks a client killed right after a daemon kill may have
        held alone (not yet known written): both holders died, so they may be
        gone. Counted, not treated as a loss: ``queued`` promises nothing more."""
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
        """Client ``i``: a long-session worker, or past ``len(self.sessions)`` a
        session worker."""
        if i < len(self.sessions):
            sid, cwd = self.sessions[i]
            args = [str(WORKER), str(self.socket), str(self.root), sid, cwd, str(self.ackfile(i)), "300", str(self.client_timeout)]
        else:
            cwd = self.session_cwds[i - len(self.sessions)]
            args = [str(SESSION_WORKER), str(self.socket), str(self.root), cwd, str(self.ackfile(i)), str(self.client_timeout)]
        p = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
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

    def start_all(self) -> None:
        self.start_daemon()
        for i in range(len(self.workers)):
            self.start_worker(i)

    def sigstop_rounds(self, rounds: int, stopped_for: float) -> None:
        """SIGSTOP the daemon for longer than the clients' timeout, then SIGCONT:
        clients give up on the connection, reconnect and resend while the old
        connection's requests are still in the daemon's socket buffer."""
        assert self.daemon is not None
        for _ in range(rounds):
            self.pause()
            self.daemon.send_signal(signal.SIGSTOP)
            time.sleep(stopped_for)
            self.daemon.send_signal(signal.SIGCONT)
            self.daemon_stops += 1

    def resend_kill_rounds(self, rounds: int) -> None:
        """SIGKILL the daemon, start a new one, and SIGKILL a random client while
        it is reconnecting and resending; start it again."""
        for _ in range(rounds):
            self.pause()
            self.kill_daemon()
            self.start_daemon()
            time.sleep(self.rng.uniform(0, 0.05))
            i = self.rng.randrange(len(self.workers))
            self.kill_worker(i)
            self._mark_at_risk(i)
            self.start_worker(i)
            self.resend_kills += 1

    def _mark_at_risk(self, i: int) -> None:
        acks = self._acks(i)
        confirmed = max((k for k, a in enumerate(acks) if a[-2 if len(a) == 4 else -1] != "queued"), default=-1)
        self.at_risk.update(a[1] if len(a) == 4 else a[0] for a in acks[confirmed + 1:])

    def client_kill_rounds(self, rounds: int) -> None:
        """SIGKILL a random client ``rounds`` times and start it again."""
        for _ in range(rounds):
            self.pause()
            i = self.rng.randrange(len(self.workers))
            self.kill_worker(i)
            self.start_worker(i)

    def acked_so_far(self) -> Counter:
        """Figures of ``verify`` (``acked``, ``acked_held_<level>``,
        ``sessions``) from the acks logged so far, counting only what it is sure
        to count: a session client's session once one of its messages is
        acknowledged (its file then exists after a clean stop)."""
        figures: Counter = Counter()
        for i in range(len(self.sessions)):
            figures["acked"] += len(self._acks(i))
        for j in range(len(self.session_cwds)):
            by_session: dict[str, list] = {}
            for sid, _key, level, held in self._acks(len(self.sessions) + j):
                by_session.setdefault(sid, []).append((level, held))
            for acks in by_session.values():
                if all(held for _, held in acks):
                    continue
                figures["sessions"] += 1
                figures["acked"] += len(acks)
                for level, held in acks:
                    figures[f"acked_{'held' if held else 'message'}_{level}"] += 1
        return figures

    # --------------------------------------------------------------------- check

    def verify(self) -> dict:
        """Check every file; returns figures, raises AssertionError on a loss
        or a double."""
        figures = Counter()
        for i, (sid, cwd) in enumerate(self.sessions):
            acks = [(sid, u, level, False) for u, level in self._acks(i)]
            self._verify_session(f"client {i}", session_file(project_dir(self.root, cwd), sid), acks, figures, self.at_risk)
        for j, cwd in enumerate(self.session_cwds):
            by_session: dict[str, list] = {}
            for sid, key, level, held in self._acks(len(self.sessions) + j):
                by_session.setdefault(sid, []).append((sid, key, level, held))
            for sid, acks in by_session.items():
                path = session_file(project_dir(self.root, cwd), sid)
                if not path.exists() and all(held for *_, held in acks):
                    figures["held_never_materialized"] += len(acks)  # its client died before the first message
                    continue
                figures["sessions"] += 1
                self._verify_session(f"session {sid}", path, acks, figures, self.at_risk)
        log = (self.base / "daemon.log").read_text(errors="replace")
        spool = self.root / ".sessiond-spool"
        leftover = sorted(p.name for p in spool.iterdir()) if spool.exists() else []
        assert not leftover, f"spool files left after a clean stop: {leftover[:3]}"
        return {**figures, "lost": 0, "doubled": 0,
                "spool_replays": sum(int(line.split("held entries of ")[1].split()[0]) for line in log.splitlines()
                                     if "replayed the held entries of " in line),
                "daemon_kills": self.daemon_kills, "client_kills": self.client_kills,
                "daemon_stops": self.daemon_stops, "resend_kills": self.resend_kills}

    def _acks(self, i: int) -> list[list]:
        if not self.ackfile(i).exists():
            return []
        return [json.loads(raw) for raw in self.ackfile(i).read_text().splitlines() if raw.endswith("]")]

    @staticmethod
    def _verify_session(name: str, path: Path, acks: list, figures: Counter, at_risk: set[str]) -> None:
        data = path.read_bytes() if path.exists() else b""
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when the file ends with a newline
        entries = [json.loads(line) for line in lines if line]  # every whole line parses
        figures["torn_tails"] += bool(tail)
        uuids = Counter(e["uuid"] for e in entries if "uuid" in e)
        dup = [u for u, n in uuids.items() if n > 1]
        assert not dup, f"{name}: duplicated uuids {dup[:3]}"
        seen: dict[str, int] = {}  # uuid-less metadata value -> copies
        latest: dict[str, str] = {}
        first_message = next((k for k, e in enumerate(entries) if e.get("type") in ("user", "assistant")), len(entries))
        position = {}
        for k, e in enumerate(entries):
            field = METADATA_KEYS.get(e.get("type"))
            if field is None or "uuid" in e:
                continue
            value = e[field]
            if value in seen:
                # A second copy is the exit re-append only if it is that kind's latest value.
                assert latest.get(e["type"]) == value, f"{name}: {value!r} written twice"
                figures["reappended"] += 1
            seen[value] = seen.get(value, 0) + 1
            latest[e["type"]] = value
            position.setdefault(value, k)
        for u in (e["uuid"] for e in entries if "uuid" in e):
            position.setdefault(u, next(k for k, e in enumerate(entries) if e.get("uuid") == u))
        for _sid, key, level, held in acks:
            figures["acked"] += 1
            figures[f"acked_{'held' if held else 'message'}_{level}"] += 1
            if key in at_risk and key not in seen and key not in uuids:
                figures["queued_gone_with_both_holders"] += 1
                continue
            if key.startswith(("title ", "tag ")):
                assert key in seen, f"{name}: acked {level} {key!r} lost"
            else:
                assert uuids.get(key) == 1, f"{name}: acked {level} entry {key} lost"
            if held:
                assert position[key] < first_message, f"{name}: held {key!r} written after the first message"
