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
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import benchlib  # noqa: E402

from sessiond.client.connection import Client  # noqa: E402
from sessiond.wire import messages as m  # noqa: E402
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
    c, sid = _seeded_victim(sock, root)
    with c:
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


def _seeded_victim(sock: Path, root: Path) -> tuple[Client, str]:
    """A connected well-behaved client whose session holds the word its
    Searches look for ("churn"), once the indexer has it."""
    sid = str(uuid.uuid4())
    c = Client(sock, root=root, autostart=False, timeout=60).connect()
    c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="durable",
                    entries=[line(user(f"churn {i}")) for i in range(50)]))
    deadline = time.monotonic() + 60
    while not c.call(m.Search(id=c.next_id(), query="churn", all=True)).hits:  # type: ignore[union-attr]
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return c, sid


def _beside(sock: Path, root: Path, attack: Callable[[threading.Event], str], rounds: int = 60) -> str:
    """The victim's rounds without, then beside ``attack`` (run in a thread
    until the event is set; it says what it did)."""
    c, sid = _seeded_victim(sock, root)
    with c:
        quiet, _ = _victim_rounds(c, sid, rounds)
        stop = threading.Event()
        said: list[str] = []
        t = threading.Thread(target=lambda: said.append(attack(stop)), daemon=True)
        t.start()
        try:
            loud, _ = _victim_rounds(c, sid, rounds)
            empty = sum(not c.call(m.Search(id=c.next_id(), query="churn", all=True)).hits  # type: ignore[union-attr]
                        for _ in range(rounds))
        finally:
            stop.set()
            t.join(timeout=60)
        state = (c.status().index or {}).get("state")
    return (f"{said[0] if said else 'attack unfinished'}; victim p99 Search/List/durable Append {_p99s(loud)} ms "
            f"vs {_p99s(quiet)} ms without; {empty} of {rounds} more Searches empty; index {state}")


GiB = 1024 * MiB


def hostile_state_files(root: Path) -> None:
    """Before the daemon starts: its lease table a symlink to /dev/zero, a
    2 GiB sparse spool file and a FIFO among the spool's files, a FIFO where
    the search index should be."""
    root.mkdir(parents=True, exist_ok=True)
    attacks.plant(root / ".sessiond-leases.json", "dev-zero")
    spool = root / ".sessiond-spool"
    spool.mkdir()
    attacks.plant(spool / f"{uuid.uuid4()}.jsonl", "sparse")
    attacks.plant(spool / f"{uuid.uuid4()}.jsonl", "fifo")
    attacks.plant(root / ".sessiond-search.sqlite3", "fifo")


def hostile_trash(root: Path) -> None:
    """Before the daemon starts (its start-up recovery reads every manifest):
    200 trash entries whose manifests are FIFOs, /dev/zero, 1 GiB sparse
    files, or name ``../`` and absolute paths and a month 13."""
    trash = root / ".trash"
    trash.mkdir(parents=True)
    for i in range(200):
        sid = str(uuid.uuid4())
        entry = trash / f"20261205T000000Z-{sid}"
        entry.mkdir()
        manifest = entry / "manifest.json"
        kind = i % 5
        if kind < 3:
            attacks.plant(manifest, ("fifo", "dev-zero", "sparse")[kind], size=GiB)
        else:
            item = "../../../etc/passwd" if kind == 3 else "/etc/passwd"
            manifest.write_text(json.dumps({
                "name": entry.name, "session": sid, "trashedAt": "2026-13-05T00:00:00Z", "state": "restoring",
                "bytes": 1, "files": 1, "items": [{"rel": item, "kind": "file", "bytes": 1}]}))


def non_utf8_names(root: Path) -> None:
    """Before the daemon starts: 2,000 sessions in 20 project directories whose
    names are not UTF-8, each with a subagent file named in such bytes too."""
    projects = os.fsencode(root / "projects")
    for p in range(20):
        pdir = projects + b"/-proj\xff" + str(p).encode() + b"\xfe"
        os.makedirs(pdir)
        for _ in range(100):
            sid = str(uuid.uuid4())
            with open(pdir + b"/" + sid.encode() + b".jsonl", "wb") as f:
                f.write(line(user(f"churn named {sid}")) + b"\n")
            agents = pdir + b"/" + sid.encode() + b"/subagents"
            os.makedirs(agents)
            with open(agents + b"/agent-\xfe" + sid[:8].encode() + b".jsonl", "wb") as f:
                f.write(line(user("sidechain churn", isSidechain=True)) + b"\n")


def startup(sock: Path, root: Path) -> str:
    """What the daemon made of what was planted (status), then the victim."""
    with Client(sock, root=root, autostart=False, timeout=60).connect() as c:
        st = c.status()
        problems = len(st.stateFiles or [])
        listed = len(c.call(m.List(id=c.next_id(), all=True, limit=100_000)).sessions)  # type: ignore[union-attr]
    return f"served; {problems} state files set aside or not used; List answers {listed} sessions; " + _beside(
        sock, root, lambda stop: (stop.wait(), "nothing more")[1])


def lost_index(sock: Path, root: Path) -> str:
    """The index truncated, overwritten with garbage or deleted every 50 ms
    while the victim searches."""
    index = root / ".sessiond-search.sqlite3"

    def damage(stop: threading.Event) -> str:
        done = 0
        while not stop.wait(0.05):
            try:
                if done % 3 == 0:
                    os.truncate(index, 0)
                elif done % 3 == 1:
                    with open(index, "r+b") as f:
                        f.write(os.urandom(4096))
                else:
                    os.unlink(index)
            except OSError:
                pass
            done += 1
        return f"index damaged {done} times"

    return _beside(sock, root, damage, rounds=400)


def out_of_range(sock: Path, root: Path) -> str:
    """One raw client sending requests whose numbers are out of range
    (a Search limit of 2**64-1, a List offset of -1, a Usage ``all`` that is
    no bool, a ``since`` of 999999 weeks) as fast as the answers come."""
    bad = [attacks.msgpack({"op": "Search", "id": 1, "query": "churn", "limit": 2**64 - 1}),
           attacks.msgpack({"op": "List", "id": 2, "offset": -1}),
           attacks.msgpack({"op": "Usage", "id": 3, "dirs": ["x"] * 3, "all": "yes"}),
           attacks.msgpack({"op": "Search", "id": 4, "query": "churn", "since": "999999w"})]

    def flood(stop: threading.Event) -> str:
        refused = sent = 0
        s = attacks.raw_conn(sock)
        try:
            while not stop.is_set():
                s.sendall(b"".join(attacks.frame(b) for b in bad))
                sent += len(bad)
                refused += sum(isinstance(a, m.Error) and a.code == "bad_request"
                               for a in attacks.read_answers(s, len(bad)))
        finally:
            s.close()
        return f"{refused} of {sent} out-of-range requests answered bad_request"

    return _beside(sock, root, flood)


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
    "statefiles": ("hostile state files at start: lease table -> /dev/zero, 2 GiB sparse spool, FIFOs at a spool file and the index", startup),
    "trash": ("200 hostile trash manifests at start: FIFO, /dev/zero, 1 GiB sparse, ../ and absolute items, month 13", startup),
    "names": ("2,000 sessions in 20 project dirs named in bytes that are not UTF-8", startup),
    "lostindex": ("the search index truncated, overwritten or deleted every 50 ms during searches", lost_index),
    "outofrange": ("a client sending out-of-range numbers as fast as it is answered", out_of_range),
}

PREPARE: dict[str, Callable[[Path], None]] = {
    "statefiles": hostile_state_files,
    "trash": hostile_trash,
    "names": non_utf8_names,
}
"""What an attack plants in the root before the daemon starts."""


def run(name: str, source: Path | None = None) -> dict:
    base = Path(tempfile.mkdtemp(prefix="sdb-", dir="/tmp"))
    sock, root = base / "run" / "s.sock", base / "root"
    if name in PREPARE:
        PREPARE[name](root)
    try:
        proc = benchlib.start_daemon(sock, root, source=source)
    except (SystemExit, RuntimeError) as exc:  # a baseline that hangs or dies on what was planted
        shutil.rmtree(base, ignore_errors=True)
        what = ATTACKS[name][0]
        return {"attack": name, "what": what, "outcome": f"never served: {str(exc).splitlines()[0][:120]}",
                "fresh_mib": 0.0, "peak_mib": 0.0, "victim_worst_ms": 0.0, "alive": False}
    try:
        fresh = attacks.peak_rss(proc.pid) if proc.poll() is None else float("nan")
        what, attack = ATTACKS[name]
        try:
            outcome = attack(sock, root)
            worst = victim(sock, root)
        except Exception as exc:  # a baseline that stops answering
            outcome, worst = f"failed: {type(exc).__name__}: {str(exc)[:120]}", float("nan")
        alive = proc.poll() is None
        peak = attacks.peak_rss(proc.pid) if alive else float("nan")  # a baseline that died of it
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a baseline stuck in a blocking open
            proc.kill()
            proc.wait(timeout=30)
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
