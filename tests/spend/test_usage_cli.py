"""``sessiond usage`` as a person runs it, with no daemon: a real process over
a real store (the corpus tree), its ``--json`` the reports' figures, its
scopes, its tables, and bad input as one line with a non-zero exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.spend.tree import build


def run(root: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sessiond.client.cli", "--root", str(root), "--no-autostart",
                           "usage", *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, "SESSIOND_SOCKET": str(root / "no.sock")})


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("store")
    build(root)
    return root


@pytest.mark.timeout(180)
def test_json_reports_and_scopes(root):
    done = run(root, "daily", "--all", "--json", "--timezone", "America/New_York")
    assert done.returncode == 0, done.stderr
    assert "computed from the transcript files" in done.stderr
    report = json.loads(done.stdout)
    assert report["source"] == "files" and report["report"] == "daily"
    rows = report["rows"]
    assert len(rows) > 20 and report["unpriced"] == []
    assert report["totals"]["totalTokens"] == sum(r["totalTokens"] for r in rows) > 0
    assert report["totals"]["inputTokens"] == sum(r["inputTokens"] for r in rows)

    one = json.loads(run(root, "session", "--cwd", "/kfischer-okarin-scripts-and-tools", "--json").stdout)
    # a cwd's project dir is its path with / as -: this one is -kfischer-okarin-scripts-and-tools
    assert {r["project"] for r in one["rows"]} == {"-kfischer-okarin-scripts-and-tools"}
    every = json.loads(run(root, "session", "--all", "--json").stdout)
    assert len(every["rows"]) > len(one["rows"]) > 0

    window = json.loads(run(root, "daily", "--all", "--json", "--since", "2025-11-01", "--until", "20251130",
                            "--timezone", "UTC", "--by", "model").stdout)
    assert window["rows"] and all("2025-11-01" <= r["key"] <= "2025-11-30" for r in window["rows"])
    for r in window["rows"]:
        assert sum(m["totalTokens"] for m in r["breakdown"]) == r["totalTokens"]

    blocks = json.loads(run(root, "blocks", "--all", "--json").stdout)["blocks"]
    assert any(b["isGap"] for b in blocks)


def test_tables_for_people(root):
    done = run(root, "monthly", "--all", "--by", "model")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:2] == ["MONTH", "MODELS"] and lines[-1].startswith("total")
    assert any(line.startswith("  claude-") for line in lines)  # the per-model lines
    assert "ACTIVE" not in run(root, "blocks", "--all").stdout  # the corpus is old: no block is active


def test_unknown_models_are_named_and_bad_input_is_one_line(root, tmp_path):
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"source": "test", "date": "2026-01-01", "models": {}}))
    done = run(root, "--all", "--prices", str(prices))
    assert done.returncode == 0
    assert "no price for" in done.stderr and "claude-opus-4-6" in done.stderr
    for args in (["--prices", str(tmp_path / "missing.json")], ["--timezone", "Nowhere/Else"], ["--since", "yesterday"],
                 ["weekly"], ["--cwd", "/x", "--all"]):
        done = run(root, *args)
        assert done.returncode != 0 and "Traceback" not in done.stderr, (args, done.stderr)


@pytest.mark.timeout(30)
def test_workers_are_counted_from_the_cores_busy_now_not_a_minutes_mean():
    """Usage from the files forks a worker per idle core: with every core of
    this process's set kept busy by a spinning process started a moment ago
    (too soon for the load average to show it), no core is idle, so it reads
    in one process."""
    from sessiond.client.cli.usage_cmds import idle_cores

    cores = len(os.sched_getaffinity(0))
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        deadline = time.monotonic() + 10
        while sum(1 for p in spin if _running(p.pid)) < cores and time.monotonic() < deadline:
            pass
        assert idle_cores() == 1
    finally:
        for p in spin:
            p.kill()
            p.wait()


def _running(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0] == b"R"
