"""Exact against ccusage itself: the daily, monthly, session and blocks
reports of ``sessiond.store.spend`` on the corpus tree equal
``ccusage claude <report> --json --offline`` to the token, and their costs
within 0.5% per row.

ccusage (the pinned version, whose offline prices ``prices.json`` was derived
from) is installed from the npm registry into a directory of this test
session. Skipped, saying why, only when npm is absent or the registry cannot
be reached."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from sessiond.store.spend import charges, prices, reports
from tests.conftest import run_cli
from tests.npm import npm_install
from tests.spend.tree import build

CCUSAGE = "ccusage@20.0.24"
TZ = "America/New_York"


@pytest.fixture(scope="module")
def ccusage(tmp_path_factory) -> Path:
    binary = npm_install(CCUSAGE, tmp_path_factory.mktemp("ccusage")) / ".bin" / "ccusage"
    if not binary.exists():
        pytest.skip(f"npm installed {CCUSAGE} without its ccusage command")
    return binary


def run(binary: Path, config: Path, report: str) -> dict:
    out = subprocess.run([str(binary), "claude", report, "--json", "--offline", "--timezone", TZ],
                         env={**os.environ, "CLAUDE_CONFIG_DIR": str(config)}, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return json.loads(out)


TOKENS = (("input_tokens", "inputTokens"), ("output_tokens", "outputTokens"),
          ("cache_creation_tokens", "cacheCreationTokens"), ("cache_read_tokens", "cacheReadTokens"))


def same(mine: list[reports.Row], theirs: list[dict], key: str) -> None:
    assert [r.key for r in mine] == [t[key] for t in theirs]
    for row, t in zip(mine, theirs, strict=True):
        assert {a: getattr(row, a) for a, _ in TOKENS} == {a: t[b] for a, b in TOKENS}, row.key
        assert row.cost == pytest.approx(t["totalCost"], rel=0.005), row.key
        assert row.models == sorted(t["modelsUsed"]), row.key


@pytest.mark.timeout(400)
def test_every_report_equals_ccusage(ccusage, tmp_path):
    projects = build(tmp_path)
    tz = ZoneInfo(TZ)
    pricer = reports.Pricer(prices.Prices.load())
    daily_ledger = charges.load(projects, progress=True)
    ledger = charges.load(projects)
    assert {c.model for c in ledger.charges} >= {"claude-opus-4-6", "claude-sonnet-4-20250514", "claude-haiku-4-5-20251001"}

    theirs = run(ccusage, tmp_path, "daily")["daily"]
    assert len(theirs) > 20
    same(reports.periods(daily_ledger.charges, pricer, tz, month=False), theirs, "date")
    same(reports.periods(ledger.charges, pricer, tz, month=True), run(ccusage, tmp_path, "monthly")["monthly"], "month")

    theirs = run(ccusage, tmp_path, "session")["sessions"]
    mine = reports.sessions(ledger.charges, pricer, tz)
    same(mine, theirs, "sessionId")
    assert [r.project for r in mine] == [t["projectPath"] for t in theirs]
    assert [r.last_activity for r in mine] == [t["lastActivity"] for t in theirs]

    theirs = run(ccusage, tmp_path, "blocks")["blocks"]
    mine_blocks = reports.blocks(ledger.charges, pricer, tz, now_ms=int(time.time() * 1000))
    assert [b.id for b in mine_blocks] == [t["id"] for t in theirs]
    for b, t in zip(mine_blocks, theirs, strict=True):
        counts = t["tokenCounts"]
        assert (b.input_tokens, b.output_tokens, b.cache_creation_tokens, b.cache_read_tokens, b.total_tokens) == (
            counts["inputTokens"], counts["outputTokens"], counts["cacheCreationInputTokens"],
            counts["cacheReadInputTokens"], t["totalTokens"]), b.id
        assert (b.end_time, b.actual_end_time, b.entries, b.is_gap, b.is_active, b.models) == (
            t["endTime"], t["actualEndTime"], t["entries"], t["isGap"], t["isActive"], t["models"]), b.id
        assert b.cost == pytest.approx(t["costUSD"], rel=0.005, abs=1e-12), b.id


@pytest.mark.timeout(200)
def test_the_shipped_prices_are_ccusages(ccusage):
    """``prices.json`` is what ccusage prices offline, model by model, derived
    again now (``bench/usage_prices.py``) from the same ccusage."""
    import sys

    repo = Path(__file__).resolve().parents[2]
    models = (repo / "bench" / "usage_prices_models.txt").read_text()
    done = subprocess.run([sys.executable, str(repo / "bench" / "usage_prices.py"), str(ccusage)], input=models,
                          capture_output=True, text=True, timeout=180, check=True)
    derived = json.loads(done.stdout)["models"]
    shipped = json.loads((repo / "sessiond" / "store" / "spend" / "prices.json").read_text())["models"]
    assert derived == shipped


PROVIDER_SPELLINGS = (
    "claude-sonnet-4@20250514", "claude-sonnet-4-5@20250929", "claude-opus-4-1@20250805", "claude-opus-4-6@default",
    "claude-3-5-sonnet-v2@20241022", "anthropic.claude-3-5-sonnet-20241022-v2:0", "anthropic.claude-opus-4-6-v1",
    "global.anthropic.claude-sonnet-4-5-20250929-v1:0", "global.anthropic.claude-opus-4-6-v1",
    "anthropic/claude-opus-4-6", "claude-opus-4-6[1m]",
)
"""How Claude Code on Google Vertex AI (``model@version``) and Amazon Bedrock
(``[global.]anthropic.model-vN[:M]``) or behind a gateway (``anthropic/``)
records the models it used, and the ``[1m]`` long-context alias."""

REGIONAL = ("us.anthropic.claude-sonnet-4-20250514-v1:0", "us.anthropic.claude-opus-4-6-v1",
            "eu.anthropic.claude-sonnet-4-5-20250929-v1:0", "apac.anthropic.claude-sonnet-4-20250514-v1:0")
"""Bedrock's regional inference profiles: ccusage prices some of them above
the model's own price (a regional premium), so unless the price table carries
the profile itself it is named unpriced, never priced as the model."""


@pytest.mark.timeout(200)
def test_models_as_vertex_and_bedrock_name_them_are_priced_as_ccusage_prices_them(ccusage, tmp_path):
    models = (*PROVIDER_SPELLINGS, *REGIONAL, "claude-sonnet-4-7", "claude-unheard-of-9")
    project = tmp_path / "projects" / "-w-provider"
    project.mkdir(parents=True)
    sid = "44444444-4444-4444-8444-444444444444"
    with open(project / f"{sid}.jsonl", "w") as f:
        for n, model in enumerate(models):
            f.write(json.dumps({
                "type": "assistant", "timestamp": f"2025-01-{n + 1:02d}T12:00:00.000Z", "version": "2.1.7",
                "sessionId": sid, "cwd": "/w/provider", "requestId": f"req_{n}",
                "message": {"id": f"msg_{n}", "model": model, "role": "assistant", "content": [],
                            "usage": {"input_tokens": 1000, "output_tokens": 100, "cache_creation_input_tokens": 2000,
                                      "cache_read_input_tokens": 30000}}}, separators=(",", ":")) + "\n")
    theirs = {r["date"]: r for r in run(ccusage, tmp_path, "daily")["daily"]}
    out = run_cli("--no-autostart", "--root", str(tmp_path), "--socket", str(tmp_path / "none.sock"),
                  "usage", "daily", "--all", "--json", "--timezone", "UTC").stdout
    mine = {r["key"]: r for r in json.loads(out)["rows"]}
    for n, model in enumerate(models):
        day = f"2025-01-{n + 1:02d}"
        row, their_cost = mine[day], theirs[day]["totalCost"]
        priced = ([], pytest.approx(their_cost, rel=0.005))
        if model in PROVIDER_SPELLINGS:
            assert (row["unpriced"], row["cost"]) == priced and their_cost > 0, model
        elif model in REGIONAL:  # priced as ccusage prices the profile, or named: never priced low
            assert (row["unpriced"], row["cost"]) in (priced, ([model], 0)), model
        else:  # unknown to ccusage too
            assert (row["unpriced"], row["cost"], their_cost) == ([model], 0, 0), model
