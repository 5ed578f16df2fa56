"""Secret detection throughput over real transcripts (``sessiond.secrets``).

Reads every transcript of ``tests/corpus`` (real Claude Code files, 22 MB)
into memory and times, per line, what ``sessiond secrets`` does (``scan``:
``scan_line``) and what ``export`` and ``secrets --redact`` do (``redact``:
``redact_line``), against two baselines measured in the same run on the same
lines: ``json``, a ``json.loads`` of every line (what any reader that looks
inside an entry pays), and ``prefilter``, the prefilter alone (the floor: a
line without a secret costs only that). ``dense`` is the same corpus with a
generated fake secret (``tests/secrets/fakes.py``) in every 20th line, so the
full rules and the rewriting run often.

    python bench/secrets.py              # median of 5 runs
    python bench/secrets.py --runs 3

Prints a table and writes bench/results/secrets.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from sessiond.secrets import redact_line, scan_line  # noqa: E402
from sessiond.secrets.rules import maybe_secret  # noqa: E402
from tests.secrets.fakes import entry, fakes  # noqa: E402


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
    """Median seconds of ``runs`` passes of ``fn`` over ``lines``."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for ln in lines:
            fn(ln)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results" / "secrets.json"))
    args = ap.parse_args()
    sets = {"corpus": corpus_lines()}
    sets["dense"] = dense(sets["corpus"])
    results = []
    for name, lines in sets.items():
        size = sum(len(ln) + 1 for ln in lines)
        base = timed(parse, lines, args.runs)
        for what, fn in (("prefilter", maybe_secret), ("scan", scan_line), ("redact", redact_line), ("json", parse)):
            secs = base if what == "json" else timed(fn, lines, args.runs)
            results.append({"set": name, "what": what, "mb": round(size / 1e6, 1), "lines": len(lines),
                            "mb_per_s": round(size / 1e6 / secs, 1), "vs_json": round(base / secs, 2)})
    print("| lines | what | MB | MB/s | speed vs json.loads |")
    print("|---|---|---:|---:|---:|")
    for r in results:
        print(f"| {r['set']} | {r['what']} | {r['mb']} | {r['mb_per_s']} | {r['vs_json']}x |")
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
