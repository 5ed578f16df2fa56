"""Secret detection throughput over real transcripts (``sessiond.secrets``).

Reads every transcript of ``tests/corpus`` (real Claude Code files, 22 MB)
into memory and times, per line, what ``sessiond secrets`` does (``scan``:
``scan_line``) and what ``export`` and ``secrets --redact`` do (``redact``:
``redact_line``), against two baselines measured in the same run on the same
lines: ``json``, a ``json.loads`` of every line (what any reader that looks
inside an entry pays), and ``prefilter``, the prefilter alone (the floor: a
line without a secret costs only that). ``dense`` is the same corpus with a
generated fake secret (``tests/secrets/fakes.py``) in every 20th line, so the
full rules and the rewriting run often. Every rate is MB of transcript per
CPU second of the one process: on a shared machine wall time also counts the
other processes' turns, and swings 2x between rounds.

``--report`` measures what the README states instead: recall per kind on the
generated set (every fake of ``tests/secrets/fakes.py`` in every embedding and
carrier, found as its kind and gone from the redacted line), and every finding
on the real transcripts of ``tests/corpus`` (each a false positive unless it is
one of the keys listed as looked at, and there are none), plus the scan's MB/s.

``--extract REV`` (repeatable) times the search index's text extraction
(``sessiond.search.extract.extract`` on every corpus line: what redaction
costs the indexer) in this tree and at each revision, in separate processes
taking turns, so every figure is measured under the same load; in CPU time,
MB of transcript per CPU second.

    python bench/secrets.py              # median of 5 runs
    python bench/secrets.py --runs 3
    python bench/secrets.py --report
    python bench/secrets.py --extract main --extract cd02d23

Prints tables and writes bench/results/secrets.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

import benchlib  # noqa: E402

from sessiond.secrets import redact_line, scan_line  # noqa: E402
from sessiond.secrets.rules import maybe_secret  # noqa: E402
from tests.secrets.fakes import KINDS, cases, entry, fakes, miss  # noqa: E402


def corpus_lines() -> list[bytes]:
    return [ln for p in sorted((REPO / "tests" / "corpus" / "claude-code").glob("*.jsonl"))
            for ln in p.read_bytes().split(b"\n") if ln]


def dense(lines: list[bytes]) -> list[bytes]:
    secrets = [f for seed in range(4) for f in fakes(seed)]
    out = []
    for i, ln in enumerate(lines):
        out.append(ln)
        if i % 20 == 0:
            f = secrets[(i // 20) % len(secrets)]
            out.append(json.dumps(entry(f"{f.name}={f.value}", "tool_result")).encode())
    return out


def parse(line: bytes) -> None:
    """The baseline: a JSON decode of the line (a torn capture in the corpus is skipped as a reader would)."""
    try:
        json.loads(line)
    except ValueError:
        pass


def timed(fn, lines: list[bytes], runs: int) -> float:
    """Median CPU seconds of ``runs`` passes of ``fn`` over ``lines`` (CPU, not wall: the machine is shared)."""
    times = []
    for _ in range(runs):
        start = time.process_time()
        for ln in lines:
            fn(ln)
        times.append(time.process_time() - start)
    return statistics.median(times)


def recall() -> list[dict]:
    """Per kind: the generated cases and how many were found as their kind and redacted out."""
    total: collections.Counter[str] = collections.Counter()
    found: collections.Counter[str] = collections.Counter()
    missed = []
    for fake, how, carrier, text in cases():
        total[fake.kind] += 1
        why = miss(fake, how, carrier, text)
        if why is None:
            found[fake.kind] += 1
        else:
            missed.append(why)
    for why in missed:
        print("missed:", why)
    return [{"kind": k, "cases": total[k], "found": found[k], "recall": round(100 * found[k] / total[k], 1)} for k in KINDS]


def false_positives() -> tuple[int, int, list[dict]]:
    """Files, lines, and every finding in the corpus (each one printed, to be looked at)."""
    files = sorted((REPO / "tests" / "corpus" / "claude-code").glob("*.jsonl"))
    out, lines = [], 0
    for p in files:
        for n, ln in enumerate(p.read_bytes().split(b"\n"), 1):
            if ln:
                lines += 1
                out += [{"file": p.name, "line": n, "kind": f.kind, "field": f.field} for f in scan_line(ln)]
    return len(files), lines, out


EXTRACT = """
import pathlib, sys, time
from sessiond.search.extract import extract
lines = [ln for p in sorted(pathlib.Path(sys.argv[1]).glob("*.jsonl")) for ln in p.read_bytes().split(b"\\n") if ln]
for ln in lines:
    extract(ln)
best = float("inf")
for _ in range(int(sys.argv[2])):
    t = time.process_time()
    for ln in lines:
        extract(ln)
    best = min(best, time.process_time() - t)
print(best)
"""
"""One process's measure: a warm-up pass over every corpus line, then the
fastest of a few passes in CPU seconds (on a shared machine, wall time counts
the other processes' turns; CPU time is what extraction itself costs)."""


PASSES = 5
"""Timed passes over the corpus in each extraction process."""


def extraction(revs: list[str], runs: int) -> list[dict]:
    """Extraction MB/s of this tree and of each revision in ``revs``: the median
    over ``runs`` rounds (each round one process per code, in turn) of each
    process's fastest pass."""
    corpus = REPO / "tests" / "corpus" / "claude-code"
    size = sum(len(ln) + 1 for ln in corpus_lines())
    with tempfile.TemporaryDirectory(prefix="sdsec-") as tmp:
        codes = [("this tree", REPO)] + [(rev, benchlib.baseline_tree(rev, Path(tmp) / str(i))) for i, rev in enumerate(revs)]
        times: dict[str, list[float]] = {name: [] for name, _ in codes}
        for r in range(runs):
            for name, path in codes:
                env = {**os.environ, "PYTHONPATH": str(path)}
                done = subprocess.run([sys.executable, "-P", "-c", EXTRACT, str(corpus), str(PASSES)], env=env, check=True,
                                      capture_output=True, text=True)
                times[name].append(float(done.stdout))
            print(f"extraction round {r + 1}/{runs}", file=sys.stderr)
    base = statistics.median(times[codes[0][0]])
    return [{"code": name, "mb": round(size / 1e6, 1), "mb_per_s": round(size / 1e6 / statistics.median(t), 1),
             "vs_this_tree": round(base / statistics.median(t), 2), "runs": [round(x, 4) for x in t]} for name, t in times.items()]


def throughput(runs: int) -> list[dict]:
    """The prefilter, scan and redact against ``json.loads``, on the corpus and the dense set."""
    sets = {"corpus": corpus_lines()}
    sets["dense"] = dense(sets["corpus"])
    results = []
    for name, lines in sets.items():
        size = sum(len(ln) + 1 for ln in lines)
        base = timed(parse, lines, runs)
        for what, fn in (("prefilter", maybe_secret), ("scan", scan_line), ("redact", redact_line), ("json", parse)):
            secs = base if what == "json" else timed(fn, lines, runs)
            results.append({"set": name, "what": what, "mb": round(size / 1e6, 1), "lines": len(lines),
                            "mb_per_s": round(size / 1e6 / secs, 1), "vs_json": round(base / secs, 2)})
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--report", action="store_true", help="recall per kind, false positives on the corpus, scan MB/s")
    ap.add_argument("--extract", action="append", default=[], metavar="REV",
                    help="time the index's extraction here and at REV (repeatable)")
    ap.add_argument("--out", default=str(HERE / "results" / "secrets.json"))
    args = ap.parse_args()
    out: dict = {}
    if args.report:
        out["recall"] = recall()
        print("| kind | cases | found | recall |")
        print("|---|---:|---:|---:|")
        for r in out["recall"]:
            print(f"| {r['kind']} | {r['cases']} | {r['found']} | {r['recall']} % |")
        cases_, found = sum(r["cases"] for r in out["recall"]), sum(r["found"] for r in out["recall"])
        print(f"| all {len(out['recall'])} kinds | {cases_} | {found} | {round(100 * found / cases_, 1)} % |")
        files, lines, fps = false_positives()
        out["false_positives"] = {"files": files, "lines": lines, "findings": fps}
        for f in fps:
            print("finding:", f)
        print(f"\nfindings on the corpus ({files} files, {lines} lines): {len(fps)}")
    if args.extract:
        out["extract"] = extraction(args.extract, args.runs)
        print("\n| extraction | MB | MB per CPU s | speed vs this tree |")
        print("|---|---:|---:|---:|")
        for r in out["extract"]:
            print(f"| {r['code']} | {r['mb']} | {r['mb_per_s']} | {r['vs_this_tree']}x |")
    out["throughput"] = throughput(args.runs)
    print("\n| lines | what | MB | MB per CPU s | speed vs json.loads |")
    print("|---|---|---:|---:|---:|")
    for r in out["throughput"]:
        print(f"| {r['set']} | {r['what']} | {r['mb']} | {r['mb_per_s']} | {r['vs_json']}x |")
    benchlib.save(args.out, {"argv": sys.argv[1:], **out})


if __name__ == "__main__":
    main()
