"""The daemon's peak RSS under each attack of issue 14, with its default budgets.

    python bench/bounds.py [--runs 3] [--only NAME,...] [--baseline REV] [--out bench/results/bounds.json]

Each attack runs against a fresh daemon (default settings: 64 MiB frames, 256 MiB
for partial frames, pending entries and queues), then a well-behaved client
makes durable appends; the figure is the daemon's peak resident set (VmHWM)
against its fresh RSS, the median of ``--runs`` fresh daemons. The attacks are the functions the adversarial tests use
(tests/adversarial/attacks.py), here at full size.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import benchlib  # noqa: E402

from sessiond.client.connection import Client  # noqa: E402
from sessiond.protocol.wire import messages as m  # noqa: E402
from tests.adversarial import attacks  # noqa: E402
from tests.helpers import line, user  # noqa: E402

MiB = attacks.MiB
MAX_FRAME = 64 * MiB
CWD = "/work/bench-bounds"


def victim(sock: Path, root: Path) -> float:
    """Three durable appends by a well-behaved client; the slowest, in ms."""
    worst = 0.0
    with Client(sock, root=root, autostart=False, timeout=60).connect() as c:
        sid = str(uuid.uuid4())
        for i in range(3):
            t = time.perf_counter()
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(user(f"v{i}"))], durability="durable"))
            worst = max(worst, time.perf_counter() - t)
    return worst * 1000


def pipelining(sock: Path, root: Path) -> str:
    s, sent = attacks.pipeline_without_reading(sock, 256 * MiB)
    try:
        return f"daemon took {sent / MiB:.1f} MiB of requests, then stopped reading"
    finally:
        s.close()


def nonreaders(sock: Path, root: Path) -> str:
    conns = [attacks.pipeline_without_reading(sock, 64 * MiB, patience=0.1) for _ in range(100)]
    try:
        with Client(sock, root=root, autostart=False, timeout=60).connect() as c:
            unread = c.status().budgets["unreadOutputBytes"]  # type: ignore[index]
        return f"{unread['clients']} held ({unread['used'] / MiB:.0f} MiB unread), {100 - unread['clients']} disconnected"
    finally:
        for s, _ in conns:
            s.close()


def malformed(sock: Path, root: Path) -> str:
    answers = attacks.malformed_near_cap(sock, MAX_FRAME)
    return ", ".join(getattr(a, "code", type(a).__name__) for a in answers)


def nested(sock: Path, root: Path) -> str:
    return ", ".join(getattr(attacks.nested_deep(sock, w)[0], "code", "?") for w in sorted(attacks.NESTED_BODIES))


def stalled(sock: Path, root: Path) -> str:
    conns, refused = attacks.stalled_big_frames(sock, MAX_FRAME)
    try:
        with Client(sock, root=root, autostart=False, timeout=60).connect() as c:
            partial = c.status().budgets["partialBytes"]  # type: ignore[index]
        return f"{refused} refused busy, {partial['waiting']} waiting, {partial['used'] / MiB:.0f} MiB charged"
    finally:
        for s in conns:
            s.close()


def pending(sock: Path, root: Path) -> str:
    with Client(sock, root=root, autostart=False, timeout=60).connect() as c:
        accepted, refused = attacks.fill_pending_buffers(c, CWD, sessions=400, per_session=240)
        used = c.status().budgets["pendingBytes"]["used"]  # type: ignore[index]
    return f"{len(accepted)} sessions, {used / MiB:.0f} MiB pending, then {refused.code if refused else 'no refusal'}"


def sessions(sock: Path, root: Path) -> str:
    opened, refused = attacks.open_sessions(sock, CWD, 50_000)
    return f"{opened} sessions opened, {refused} refused busy"


def idle(sock: Path, root: Path) -> str:
    conns = attacks.idle_connections(sock, 3000)
    try:
        with Client(sock, root=root, autostart=False, timeout=60).connect() as c:
            deadline = time.monotonic() + 30
            while c.status().clients < 3001 and time.monotonic() < deadline:
                time.sleep(0.05)
            return f"{c.status().clients - 1} idle connections held"
    finally:
        for s in conns:
            s.close()


CHURN_PROCESSES = 3
CHURN_ROUNDS = 100


def _victim_rounds(c: Client, sid: str, rounds: int) -> tuple[dict[str, list[float]], int]:
    """A well-behaved client's Search, List and durable Append, ``rounds``
    times: their round trips in ms, and the most read-pool jobs status showed."""
    lat: dict[str, list[float]] = {"Search": [], "List": [], "Append": []}
    most = 0
    for i in range(rounds):
        for req in (m.Search(id=c.next_id(), query="churn", all=True), m.List(id=c.next_id(), all=True),
                    m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(user(f"v{i}"))], durability="durable")):
            t = time.perf_counter()
            c.call(req)
            lat[type(req).__name__].append((time.perf_counter() - t) * 1000)
        workers = c.status().workers or {}
        most = max(most, workers.get("jobsWaiting", 0) + workers.get("jobsRunning", 0))
    return lat, most


def _p99s(lat: dict[str, list[float]]) -> str:
    return "/".join(f"{benchlib.pct(xs, 99):.0f}" for xs in lat.values())


def churn(sock: Path, root: Path) -> str:
    """Processes that connect, pipeline 8 Searches and close, over and over;
    a victim's round trips timed first without them, then under them."""
    sid = str(uuid.uuid4())
    with Client(sock, root=root, autostart=False, timeout=60).connect() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="durable",
                        entries=[line(user(f"churn {i}")) for i in range(50)]))
        while not c.call(m.Search(id=c.next_id(), query="churn", all=True)).hits:  # type: ignore[union-attr]
            time.sleep(0.1)  # the indexer has it
        quiet, _ = _victim_rounds(c, sid, CHURN_ROUNDS)
        quiet_peak = attacks.peak_rss(c.status().pid)
        churning = attacks.Churning(sock, sock.parent / "churn-stop", CHURN_PROCESSES, cycles=1_000_000, seconds=60)
        try:
            loud, most = _victim_rounds(c, sid, CHURN_ROUNDS)
            throughout = churning.running()
        finally:
            cycles = churning.stop()
        workers = c.status().workers or {}
    return (f"{cycles} connect/Search/close cycles from {CHURN_PROCESSES} processes"
            f"{'' if throughout else ' (over before the victim was done)'}, "
            f"{workers.get('jobsDropped', '?')} Searches dropped, at most {most} jobs queued; victim p99 "
            f"Search/List/durable Append {_p99s(loud)} ms vs {_p99s(quiet)} ms without; "
            f"peak RSS without {quiet_peak / MiB:.1f} MiB")


def owed(sock: Path, root: Path) -> str:
    entries, answers = attacks.owed_answers_flood(sock, str(uuid.uuid4()), CWD, 20_000)
    return f"{sum(isinstance(a, m.Appended) for a in answers)} of {len(entries)} written appends answered"


ATTACKS: dict[str, tuple[str, Callable[[Path, Path], str]]] = {
    "pipelining": ("pipelined Status requests, answers never read", pipelining),
    "nonreaders": ("100 clients pipelining Status, none reading", nonreaders),
    "malformed": ("two malformed frames just under 64 MiB (64M empty arrays)", malformed),
    "nested": ("bodies nested 200,000 deep", nested),
    "stalled": ("50 connections stalled inside 64 MiB frames", stalled),
    "pending": ("fresh sessions filling their pending buffers", pending),
    "sessions": ("50,000 fresh sessions opened by one connection", sessions),
    "idle": ("3,000 idle connections", idle),
    "owed": ("20,000 pipelined written appends", owed),
    "churn": ("connection churn: 3 processes connecting, pipelining 8 Searches, closing", churn),
}


def run(name: str, source: Path | None = None) -> dict:
    base = Path(tempfile.mkdtemp(prefix="sdb-", dir="/tmp"))
    sock, root = base / "run" / "s.sock", base / "root"
    proc = benchlib.start_daemon(sock, root, source=source)
    try:
        fresh = attacks.peak_rss(proc.pid)
        what, attack = ATTACKS[name]
        outcome = attack(sock, root)
        worst = victim(sock, root)
        peak = attacks.peak_rss(proc.pid)
        alive = proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(base, ignore_errors=True)
    return {"attack": name, "what": what, "outcome": outcome, "fresh_mib": round(fresh / MiB, 1),
            "peak_mib": round(peak / MiB, 1), "victim_worst_ms": round(worst, 1), "alive": alive}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default=",".join(ATTACKS))
    ap.add_argument("--out", default="bench/results/bounds.json")
    ap.add_argument("--baseline", default=None, metavar="REV",
                    help="Also run each attack against this revision's daemon (a 'before' row), in the same run.")
    args = ap.parse_args()
    daemons: list[tuple[str, Path | None]] = [("now", None)]
    if args.baseline:
        daemons.insert(0, (args.baseline, benchlib.baseline_tree(args.baseline, Path(tempfile.mkdtemp(prefix="sdb-base-")))))
    rows = []
    for name in args.only.split(","):
        for code, source in daemons:
            runs = sorted((run(name, source) for _ in range(args.runs)), key=lambda r: r["peak_mib"])
            row = {**runs[len(runs) // 2], "daemon": code}
            row["peak_mib_runs"] = [r["peak_mib"] for r in runs]
            row["alive"] = all(r["alive"] for r in runs)
            rows.append(row)
    print("| attack | daemon | outcome | fresh RSS MiB | peak RSS MiB | daemon alive | victim's slowest durable append ms |")
    print("|---|---|---|---:|---:|---|---:|")
    for r in rows:
        print(f"| {r['what']} | {r['daemon']} | {r['outcome']} | {r['fresh_mib']} | **{r['peak_mib']}** | "
              f"{'yes' if r['alive'] else 'NO'} | {r['victim_worst_ms']} |")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
