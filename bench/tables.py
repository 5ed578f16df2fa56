"""The append tables of docs/benchmarks.md, rendered from a results file of ``append_load.py``.

    python bench/tables.py bench/results/append_load.json

One row per client count and level, in the order the levels were run, with the
ratio to Redis (RESP) measured in the same run; baselines with no latency of
their own (direct writes, the raw disk) show none.
"""

from __future__ import annotations

import json
import sys

from benchlib import LEVEL_NAMES

NO_LATENCY = {"direct", "disk", "direct-durable"}


def render(results: dict) -> str:
    rows = results["rows"]
    levels = list(dict.fromkeys(r["level"] for r in rows))
    out = ["| clients | level | entries/s | MB/s | p50 ack ms | p99 ack ms | server CPU µs/entry | vs Redis (RESP) |",
           "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for clients in sorted({r["clients"] for r in rows}):
        redis = next((r["entries_per_s"] for r in rows if r["clients"] == clients and r["level"] == "redis"), None)
        for level in levels:
            row = next((r for r in rows if r["clients"] == clients and r["level"] == level), None)
            if row is None:
                continue

            def cell(key: str, places: int) -> str:
                value = row[key]  # noqa: B023 (called within this iteration)
                if value is None or (level in NO_LATENCY and key.startswith("p")):  # noqa: B023 (called within this iteration)
                    return "—"
                return f"{value:,.{places}f}"

            ratio = f"{row['entries_per_s'] / redis:.2f}x" if redis else "—"
            out.append(f"| {clients} | {LEVEL_NAMES.get(level, level)} | {row['entries_per_s']:,.0f} | {row['mb_per_s']:,.1f} | "
                       f"{cell('p50_ms', 2)} | {cell('p99_ms', 2)} | {cell('server_cpu_us_per_entry', 1)} | {ratio} |")
    return "\n".join(out)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        with open(name) as f:
            print(render(json.load(f)))
