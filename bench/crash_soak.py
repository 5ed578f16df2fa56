"""Crash soak: hundreds of SIGKILLs of the daemon and of clients under load.

    python bench/crash_soak.py [--daemon-rounds 200] [--client-rounds 200] [--clients 4]
                               [--session-clients 2] [--resend-rounds 50] [--sigstop-rounds 10]

Runs real daemon and client processes (tests/crash/harness.py), kills them at
random moments, and checks every file at the end: whole lines only, every
acknowledged entry present exactly once, held entries before their session's
first message. Besides long sessions, ``--session-clients`` clients start
session after session (pre-message entries at every durability, then the first
message), so the daemon kills land before, during and after materialization;
``--resend-rounds`` kill a client right after a daemon restart, while it
resends; ``--sigstop-rounds`` stop the daemon for longer than the clients'
timeout (``--client-timeout``). Prints the figures; exits 1 on a loss.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.crash.harness import Harness  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--daemon-rounds", type=int, default=200)
    ap.add_argument("--client-rounds", type=int, default=200)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--session-clients", type=int, default=2)
    ap.add_argument("--resend-rounds", type=int, default=50)
    ap.add_argument("--sigstop-rounds", type=int, default=10)
    ap.add_argument("--client-timeout", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sdc-", dir="/tmp"))
    h = Harness(base, clients=args.clients, seed=args.seed, session_clients=args.session_clients,
                client_timeout=args.client_timeout)
    t0 = time.monotonic()
    try:
        h.start_all()
        for done in range(0, args.daemon_rounds, 10):
            h.daemon_kill_rounds(min(10, args.daemon_rounds - done))
            print(f"\rdaemon kills {h.daemon_kills}/{args.daemon_rounds}", end="", file=sys.stderr, flush=True)
        for done in range(0, args.client_rounds, 10):
            h.client_kill_rounds(min(10, args.client_rounds - done))
            print(f"\rclient kills {h.client_kills}/{args.client_rounds}  ", end="", file=sys.stderr, flush=True)
        for done in range(0, args.resend_rounds, 10):
            h.resend_kill_rounds(min(10, args.resend_rounds - done))
            print(f"\rkills while resending {h.resend_kills}/{args.resend_rounds}  ", end="", file=sys.stderr, flush=True)
        for _ in range(args.sigstop_rounds):
            h.sigstop_rounds(1, stopped_for=args.client_timeout * 1.5)
            print(f"\rdaemon SIGSTOPs {h.daemon_stops}/{args.sigstop_rounds}  ", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        h.stop_workers()
        code = h.stop_daemon()
        figures = h.verify()
        figures["final_daemon_exit"] = code
        figures["seconds"] = round(time.monotonic() - t0, 1)
        print(json.dumps(figures))
    except AssertionError as exc:
        print(f"LOSS: {exc}", file=sys.stderr)
        sys.exit(1)
    finally:
        h.close()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
