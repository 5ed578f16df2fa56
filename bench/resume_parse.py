"""Resume: parse+chain speed and peak memory on generated transcripts, against a
naive Python loader and Node's JSON.parse, each in its own fresh process.

    python bench/resume_parse.py                  # 10 MB and 100 MB, 3 runs each
    python bench/resume_parse.py --sizes 10,100,1000 --runs 1

Each size is generated twice: a plain conversation and one with a compaction
boundary at 90% (what long sessions look like). Methods:
- ``sessiond``: protocol.transcript.resume.resolve_chain (SPEC 4 steps 1-6);
- ``sessiond-full``: load_transcript, the whole pipeline with messages decoded;
- ``naive``: json.loads of every line into dicts, then the same parentUuid walk;
- ``node``: JSON.parse of every line in Node, then the same walk.
MB/s is file size over wall time of the load inside the child (interpreter start
excluded); peak RSS is the child's ru_maxrss. Writes bench/results/resume_parse.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent

NODE_LOADER = r"""
const fs = require('fs');
const t0 = process.hrtime.bigint();
const text = fs.readFileSync(process.argv[1], 'utf8');
const byUuid = new Map();
let leaf = null;
for (const line of text.split('\n')) {
  if (!line) continue;
  let e; try { e = JSON.parse(line); } catch { continue; }
  if (!e.uuid) continue;
  byUuid.set(e.uuid, e);
  if (['user', 'assistant', 'system', 'attachment'].includes(e.type) && !e.isSidechain) leaf = e;
}
const chain = []; const seen = new Set();
for (let e = leaf; e && !seen.has(e.uuid); e = e.parentUuid ? byUuid.get(e.parentUuid) : null) { seen.add(e.uuid); chain.push(e.uuid); }
chain.reverse();
const dt = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(JSON.stringify({seconds: dt, chain: chain.length, rss: process.resourceUsage().maxRSS}));
"""


def generate(path: Path, mb: int, compaction: bool) -> None:
    target = mb * 1024 * 1024
    sid = str(uuid.uuid4())
    text = "lorem ipsum dolor sit amet " * 40
    parent = None
    written = 0
    boundary_at = int(target * 0.9) if compaction else -1
    with open(path, "w") as f:
        i = 0
        while written < target:
            u = str(uuid.uuid4())
            if 0 <= boundary_at <= written:
                line = json.dumps({"parentUuid": None, "logicalParentUuid": parent, "isSidechain": False, "type": "system",
                                   "subtype": "compact_boundary", "content": "Conversation compacted", "uuid": u,
                                   "sessionId": sid, "timestamp": "2026-01-01T00:00:00.000Z", "compactMetadata": {"trigger": "auto"}})
                boundary_at = -1
            elif i % 2 == 0:
                line = json.dumps({"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/w", "sessionId": sid,
                                   "version": "2.1.0", "type": "user", "message": {"role": "user", "content": f"question {i}: {text}"},
                                   "uuid": u, "timestamp": "2026-01-01T00:00:00.000Z"})
            else:
                line = json.dumps({"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/w", "sessionId": sid,
                                   "version": "2.1.0", "type": "assistant", "message": {"id": f"msg_{i}", "role": "assistant",
                                   "content": [{"type": "text", "text": f"answer {i}: {text}{text}"}], "usage": {"input_tokens": 10}},
                                   "uuid": u, "timestamp": "2026-01-01T00:00:00.000Z"})
            f.write(line + "\n")
            written += len(line) + 1
            parent = u
            i += 1
        # On disk before any loader runs: else the kernel writes the fresh file back
        # while the first method is timed, and that one pays for it.
        f.flush()
        os.fsync(f.fileno())


# ---------------------------------------------------------------------- children


def child(method: str, path: str) -> None:
    from sessiond.client.resume.pipeline import load_transcript, resolve_chain  # imports are not timed

    # Every loader's result stays alive until the clock stops: freeing it is not
    # part of the load (the naive loader's dict and Node's Map are freed after too).
    t = time.perf_counter()
    if method == "sessiond":
        result = resolve_chain(path)
        dt = time.perf_counter() - t
        n = len(result.chain)
    elif method == "sessiond-full":
        result = load_transcript(path)
        dt = time.perf_counter() - t
        n = len(result.chain)
    else:
        by, leaf = {}, None
        with open(path, "rb") as f:
            for raw in f:
                try:
                    e = json.loads(raw)
                except ValueError:
                    continue
                if "uuid" in e:
                    by[e["uuid"]] = e
                    if e.get("type") in ("user", "assistant", "system", "attachment") and not e.get("isSidechain"):
                        leaf = e
        chain, seen, e = [], set(), leaf
        while e is not None and e["uuid"] not in seen:
            seen.add(e["uuid"])
            chain.append(e["uuid"])
            e = by.get(e.get("parentUuid")) if e.get("parentUuid") else None
        n = len(chain)
        dt = time.perf_counter() - t
    print(json.dumps({"seconds": dt, "chain": n, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


def run_child(method: str, path: Path) -> dict:
    if method == "node":
        out = subprocess.run(["node", "-e", NODE_LOADER, str(path)], capture_output=True, text=True, check=True).stdout
    else:
        out = subprocess.run([sys.executable, __file__, "--child", method, str(path)], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="10,100")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--methods", default="sessiond,sessiond-full,naive,node")
    ap.add_argument("--out", default=str(HERE / "results" / "resume_parse.json"))
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    methods = [x for x in args.methods.split(",") if x != "node" or shutil.which("node")]
    base = Path(tempfile.mkdtemp(prefix="sdr-", dir="/tmp"))
    rows = []
    try:
        print(f"{'file':>18} {'method':>14} {'MB/s':>8} {'peak RSS MB':>12} {'chain':>8}   (median of {args.runs})", flush=True)
        for mb in [int(x) for x in args.sizes.split(",")]:
            for compaction in (False, True):
                path = base / f"t{mb}{'c' if compaction else ''}.jsonl"
                generate(path, mb, compaction)
                size = path.stat().st_size
                for method in methods:
                    if method == "node" and size > 400 * 1024 * 1024:
                        continue  # V8 cannot hold a string over 512 MB: readFileSync+split fails
                    runs = [run_child(method, path) for _ in range(args.runs if mb < 1000 else 1)]
                    secs = statistics.median(r["seconds"] for r in runs)
                    rss = statistics.median(r["rss"] for r in runs) / 1024
                    row = {"size_mb": mb, "compaction": compaction, "method": method, "mb_per_s": size / secs / 1e6,
                           "peak_rss_mb": rss, "chain": runs[0]["chain"], "runs": len(runs)}
                    rows.append(row)
                    label = f"{mb} MB{' +compact' if compaction else ''}"
                    print(f"{label:>18} {method:>14} {row['mb_per_s']:>8.0f} {rss:>12.0f} {row['chain']:>8}", flush=True)
                path.unlink()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"command": "python bench/resume_parse.py " + " ".join(sys.argv[1:]), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
