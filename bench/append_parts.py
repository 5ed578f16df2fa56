"""What each part on the append path costs: the daemon with one part switched off at a time.

    python bench/append_parts.py [--clients 1] [--total 64000] [--runs 3] [--parts follower,compaction,...]
    python bench/append_parts.py --baseline main      # that revision's daemon too, every part on
    python bench/append_parts.py --python-set         # this daemon with the pure-Python dedup set too

Each configuration is a real daemon (its defaults: index, follower, leases,
bounds, catalog all on) under ``append_load``'s ``written`` clients (1 KB
entries, batches of 16), with one part's hook on the append path replaced by
a no-op: ``follower`` (its inotify watches and the writer's own-write hook:
it sees nothing at all), ``follower-events`` (its watches only), ``compaction``
(the dedup sets are never packed), ``index`` (no search indexer), ``index-hook``
(the indexer runs, the writer does not tell it), ``spend`` (the usage book's
write observer), ``catalog`` (the catalog's), ``watchers`` (the watchers'),
``leases`` (the lease check), ``all`` (every one of them); and the Python floor
(``floor_server.py``). Rounds interleave every configuration; the daemon's CPU
per entry (schedstat) and entries/s are medians over ``--runs``. A part's cost
is the drop in CPU per entry without it, measured in the same run; these
daemons are not sessiond (they lose guarantees): a tool to find where the time
goes, never a configuration to run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import append_load
import benchlib

HERE = Path(__file__).resolve().parent
PARTS = ["follower", "follower-events", "compaction", "index", "index-hook", "spend", "catalog", "watchers", "leases"]


def serve_without(parts: set[str], serve_args: list[str]) -> None:
    """Run ``sessiond serve`` in this process with ``parts`` switched off."""
    if "index" in parts:
        os.environ["SESSIOND_SEARCH_INDEX"] = "0"
    from sessiond.daemon import catalog, compaction, leases, spend, watchers
    from sessiond.daemon.follow import tree
    from sessiond.daemon.index import link

    def nothing(*args: object, **kw: object) -> None:
        return None

    async def no_start(self: object) -> None:
        return None

    if "follower" in parts:
        tree.Follower.own_write = nothing  # type: ignore[method-assign]
    if "follower" in parts or "follower-events" in parts:
        tree.Follower.start = no_start  # type: ignore[method-assign]
    hooks = {"compaction": (compaction.Compactor, "hot"), "index-hook": (link.IndexLink, "observe"),
             "spend": (spend.SpendBook, "written"), "catalog": (catalog.Catalog, "written"),
             "watchers": (watchers.Watchers, "written"), "leases": (leases.Leases, "guard")}
    for part, (cls, name) in hooks.items():
        if part in parts:
            setattr(cls, name, nothing)
    from sessiond.client.cli import main

    sys.argv = ["sessiond", *serve_args]
    main()


def one_run(config: str, args: argparse.Namespace) -> tuple[float, float]:
    base = Path(tempfile.mkdtemp(prefix="sdp-", dir="/tmp"))
    os.chmod(base, 0o700)
    sock = base / "run" / "s.sock"
    serve = ["--socket", str(sock), "--root", str(base / "root"), "serve", "--log-level", "warning"]
    env = None
    if config == "floor":
        cmd = [sys.executable, str(HERE / "floor_server.py"), str(sock), str(base / "floor")]
    elif config == "python-set":  # this daemon, every part on, with the pure-Python dedup set (uuidset.py)
        env = {**os.environ, "SESSIOND_UUIDSET": "python"}
        cmd = [sys.executable, __file__, "--serve-without", "", "--", *serve]
    elif config.startswith("@"):  # a revision's daemon, every part on
        source = append_load.baseline_source(config[1:])
        env = {**os.environ, "PYTHONPATH": str(source)}
        cmd = [sys.executable, "-P", "-m", "sessiond.client.cli", *serve]
    else:
        off = ",".join(PARTS) if config == "all" else config
        cmd = [sys.executable, __file__, "--serve-without", "" if config == "none" else off, "--", *serve]
    daemon = benchlib.start_server(sock, cmd, env=env)
    try:
        ns = argparse.Namespace(size=1024, batch=16, window=1, mix=False, text=False)
        procs = append_load.spawn_workers("written", args.clients, args.total // args.clients, sock, base, ns)
        cpu0 = benchlib.cpu_seconds_fine(daemon.pid)
        _, _, wall = append_load.run_workers(procs)
        cpu = benchlib.cpu_seconds_fine(daemon.pid) - cpu0
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        subprocess.run(["rm", "-rf", str(base)])
    return args.total / wall, cpu / args.total * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--total", type=int, default=64_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--parts", default=",".join(PARTS), help="the parts to switch off, one at a time")
    ap.add_argument("--baseline", default=None, metavar="REV", help="also that revision's daemon, every part on")
    ap.add_argument("--python-set", action="store_true",
                    help="also this daemon with the pure-Python dedup set (SESSIOND_UUIDSET=python), every part on")
    ap.add_argument("--out", default=str(HERE / "results" / "append_parts.json"))
    ap.add_argument("--serve-without", default=None, help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args()
    if args.serve_without is not None:
        serve_without(set(filter(None, args.serve_without.split(","))), [x for x in rest if x != "--"])
        return
    configs = ["none", *args.parts.split(","), "all", "floor", *(["python-set"] if args.python_set else []),
               *([f"@{args.baseline}"] if args.baseline else [])]
    runs: dict[str, list[tuple[float, float]]] = {c: [] for c in configs}
    load = []
    for r in range(args.runs):
        load.append(os.getloadavg()[0])
        for c in configs:
            runs[c].append(one_run(c, args))
        print(f"round {r + 1}/{args.runs} (load {load[-1]:.1f})", flush=True)
    base_cpu = statistics.median(x[1] for x in runs["none"])
    rows = []
    print(f"load average (1 min) at each round: {', '.join(f'{x:.1f}' for x in load)}")
    print("| switched off | entries/s | daemon CPU µs/entry | CPU saved µs/entry |")
    print("|---|---:|---:|---:|")
    for c in configs:
        eps = statistics.median(x[0] for x in runs[c])
        cpu = statistics.median(x[1] for x in runs[c])
        rows.append({"config": c, "entries_per_s": round(eps), "cpu_us_per_entry": round(cpu, 2)})
        name = {"none": "nothing (sessiond as it runs)", "floor": "Python floor (floor_server.py)"}.get(c, c)
        saved = "—" if c in ("none", "floor", "python-set") or c.startswith("@") else f"{base_cpu - cpu:.2f}"
        print(f"| {name} | {eps:,.0f} | {cpu:.2f} | {saved} |")
    benchlib.save(args.out, {"clients": args.clients, "total": args.total, "runs": args.runs, "load_avg": load,
                             "rows": rows, "command": " ".join(["python", "bench/append_parts.py", *sys.argv[1:]])})


if __name__ == "__main__":
    main()
