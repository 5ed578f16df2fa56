"""Lifecycle costs: import against a plain ``cp -a`` of the same tree (the
baseline, measured in the same run), a second import (nothing to do), and rm +
restore per session through a daemon.

The source tree is the test corpus laid out as Claude Code's projects dir
(``tests/lifecycle_tree.py``), copied ``--copies`` times under new session ids.
Median of ``--runs`` runs, each into a fresh store. Results in
``bench/results/lifecycle.json``.

    python bench/lifecycle.py [--copies 5] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import benchlib

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.lifecycle_tree import build  # noqa: E402


def make_source(base: Path, copies: int) -> Path:
    tree = build(base / "one")
    src = base / "projects"
    for i in range(copies):
        for sid, path in tree.sessions.items():
            new = str(uuid.uuid5(uuid.NAMESPACE_OID, f"{i}-{sid}"))
            d = src / f"{path.parent.name}-{i}"
            d.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, d / f"{new}.jsonl")
            side = path.parent / sid
            if side.is_dir():
                shutil.copytree(side, d / new)
    return src


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sessiond.client.cli", *args], env=env, capture_output=True, check=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rm", type=int, default=40, help="sessions to rm and restore per run")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "lifecycle.json"))
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sd-bench-", dir="/tmp"))
    try:
        src = make_source(base, args.copies)
        files = [p for p in src.rglob("*") if p.is_file()]
        nbytes = sum(p.stat().st_size for p in files)
        sessions = len(list(src.glob("*/*.jsonl")))
        rows: dict[str, list[float]] = {k: [] for k in ("cp -a", "import (no daemon)", "import (daemon)",
                                                         "import again (daemon)", "rm (daemon) per session",
                                                         "restore (daemon) per session")}
        for run in range(args.runs):
            dest = base / f"cp-{run}"
            t = time.perf_counter()
            subprocess.run(["cp", "-a", str(src), str(dest)], check=True)
            subprocess.run(["sync", "-f", str(dest)], check=True)  # import syncs every file: so does the baseline
            rows["cp -a"].append(time.perf_counter() - t)
            for mode in ("no daemon", "daemon"):
                root = base / f"root-{mode[:2]}-{run}"
                sock = base / f"run-{run}" / "s.sock"
                env = {**os.environ, "SESSIOND_ROOT": str(root), "SESSIOND_SOCKET": str(sock), "SESSIOND_NO_AUTOSTART": "1"}
                proc = benchlib.start_daemon(sock, root) if mode == "daemon" else None
                try:
                    t = time.perf_counter()
                    cli(env, "import", str(src))
                    rows[f"import ({mode})"].append(time.perf_counter() - t)
                    if proc is None:
                        continue
                    t = time.perf_counter()
                    cli(env, "import", str(src))
                    rows["import again (daemon)"].append(time.perf_counter() - t)
                    ids = sorted(p.name[:-6] for p in (root / "projects").glob("*/*.jsonl"))[: args.rm]
                    t = time.perf_counter()
                    cli(env, "rm", *ids)
                    rows["rm (daemon) per session"].append((time.perf_counter() - t) / len(ids))
                    t = time.perf_counter()
                    for sid in ids:
                        cli(env, "restore", sid)
                    rows["restore (daemon) per session"].append((time.perf_counter() - t) / len(ids))
                finally:
                    if proc is not None:
                        proc.terminate()
                        proc.wait(timeout=30)
        medians = {k: statistics.median(v) for k, v in rows.items()}
        result = {"sessions": sessions, "files": len(files), "bytes": nbytes, "runs": args.runs,
                  "median_s": medians, "vs_cp": {k: medians[k] / medians["cp -a"] for k in medians if k.startswith("import")}}
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"{sessions} sessions, {len(files)} files, {nbytes / 1e6:.1f} MB; median of {args.runs}")
        for k, v in medians.items():
            extra = f"  ({v / medians['cp -a']:.2f}x cp -a, {nbytes / v / 1e6:.0f} MB/s)" if k.startswith("import (") else ""
            unit = f"{v * 1000:.1f} ms" if "per session" in k else f"{v:.2f} s"
            print(f"  {k:<30} {unit}{extra}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
