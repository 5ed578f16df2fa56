"""Derive ``sessiond/store/spend/prices.json`` from ccusage's offline prices.

ccusage prices Claude models from a LiteLLM snapshot built into it, with its
own fuzzy model matching; rather than re-implement that matching, this prices
one probe response per (model, token kind) with ``ccusage claude daily --json
--offline`` (one day each) and reads the per-token rate back: 100,000 tokens
for the base rate, 1,000,000 for the rate past 200,000, a ``fast`` response for
the fast-mode multiplier. Models it cannot price are left out.

    python bench/usage_prices.py CCUSAGE_BINARY < bench/usage_prices_models.txt > prices.json
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tempfile

KINDS = {
    "input": "input_tokens", "output": "output_tokens",
    "cacheCreation": "cache_creation_input_tokens", "cacheRead": "cache_read_input_tokens",
}
BASE, BIG = 100_000, 1_000_000


def probes(models: list[str]) -> list[tuple[str, str, str, dict]]:
    """(model, kind, variant, usage), one a day."""
    out = []
    for model in models:
        for kind, field in KINDS.items():
            out.append((model, kind, "base", {field: BASE}))
            out.append((model, kind, "big", {field: BIG}))
        out.append((model, "input", "fast", {"input_tokens": BASE, "speed": "fast"}))
    return out


def main() -> None:
    binary = sys.argv[1]
    models = [m.strip() for m in sys.stdin if m.strip()]
    plan = probes(models)
    config = tempfile.mkdtemp()
    project = os.path.join(config, "projects", "-probe")
    os.makedirs(project)
    day0 = datetime.date(2025, 1, 1)
    by_day = {}
    with open(os.path.join(project, "11111111-1111-1111-1111-111111111111.jsonl"), "w") as f:
        for n, (model, kind, variant, usage) in enumerate(plan):
            day = str(day0 + datetime.timedelta(days=n))
            by_day[day] = (model, kind, variant)
            line = {"type": "assistant", "timestamp": f"{day}T12:00:00.000Z", "version": "2.0.0",
                    "sessionId": "11111111-1111-1111-1111-111111111111", "requestId": f"req_{n}",
                    "message": {"id": f"msg_{n}", "model": model, "role": "assistant",
                                "usage": {"input_tokens": 0, "output_tokens": 0, **usage}}}
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
    out = subprocess.run([binary, "claude", "daily", "--json", "--offline", "--timezone", "UTC"],
                         env={**os.environ, "CLAUDE_CONFIG_DIR": config}, capture_output=True, text=True, check=True)
    cost: dict[str, dict[tuple[str, str], float]] = {}
    for row in json.loads(out.stdout)["daily"]:
        model, kind, variant = by_day[row["date"]]
        cost.setdefault(model, {})[(kind, variant)] = row["totalCost"]
    table = {}
    for model in models:
        c = cost.get(model, {})
        base = {k: c.get((k, "base"), 0.0) / BASE for k in KINDS}
        if not any(base.values()):
            continue
        rate: dict[str, float] = {k: float(f"{v:.6g}") for k, v in base.items()}
        for k in KINDS:
            above = (c[(k, "big")] - 200_000 * base[k]) / (BIG - 200_000)
            if abs(above - base[k]) > 1e-15:
                rate[k + "Above200k"] = float(f"{above:.6g}")
        fast = c[("input", "fast")] / c[("input", "base")] if c.get(("input", "base")) else 1.0
        if abs(fast - 1) > 1e-9:
            rate["fastMultiplier"] = round(fast, 6)
        table[model] = rate
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    json.dump({"about": f"Claude model prices in USD per token as {version} prices them offline; see bench/usage_prices.py",
               "source": "https://raw.githubusercontent.com/BerriAI/litellm/main/model_prices_and_context_window.json"
                         f" via {version} (npm)",
               "date": str(datetime.date.today()), "models": table}, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
