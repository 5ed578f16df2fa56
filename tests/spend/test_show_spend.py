"""``sessiond show`` gives a session's tokens and cost: a header line for a
person, ``tokens``/``costUSD``/``unpricedModels`` in ``--json``; the figures
are those ``sessiond usage session --json`` reports for the same session
(subagents in it), and the token sums those this test counts itself from the
corpus files. A model the table does not price is named, never priced as 0
silently. Real processes over a real store, no daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spend.test_rules import responses, sums
from tests.spend.tree import CORPUS, build

pytestmark = pytest.mark.timeout(180)
TWO_MODELS = "a7da6a22-facc-4fcd-8bab-f83c87862004"  # opus and haiku, a subagent
WITH_AGENTS = "b3edadab-bca0-4054-9b41-f7ffa6941260"  # two subagents


def cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sessiond.client.cli", "--root", str(root), "--no-autostart", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SESSIOND_SOCKET": str(root / "no.sock"), "NO_COLOR": "1"})


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("store")
    build(root)
    return root


def usage_row(root: Path, session: str) -> dict:
    done = cli(root, "usage", "session", "--all", "--json")
    assert done.returncode == 0, done.stderr
    return next(r for r in json.loads(done.stdout)["rows"] if r["key"] == session)


def show_json(root: Path, session: str) -> dict:
    done = cli(root, "show", session, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def same_figures(shown: dict, row: dict) -> None:
    assert shown["tokens"] == {"input": row["inputTokens"], "output": row["outputTokens"],
                               "cacheCreation": row["cacheCreationTokens"], "cacheRead": row["cacheReadTokens"],
                               "total": row["totalTokens"]}
    assert shown["costUSD"] == pytest.approx(row["cost"], rel=1e-12)
    assert shown["unpricedModels"] == row["unpriced"]


def test_show_json_carries_the_figures_usage_reports(root):
    for session in (TWO_MODELS, WITH_AGENTS):
        shown = show_json(root, session)
        assert shown["sessionId"] == session and shown["messages"]  # the fields it had are still there
        same_figures(shown, usage_row(root, session))
    # and the tokens are those of the session's own files, its subagents' too, each response once
    files = [CORPUS / f"kfischer-okarin__scripts-and-tools__{WITH_AGENTS}.jsonl",
             *CORPUS.glob("kfischer-okarin__scripts-and-tools__agent-*.jsonl")]
    found: dict = {}
    for f in files:
        with open(f, "rb") as fh:
            if WITH_AGENTS.encode() in fh.read():
                found.update(responses(f))
    t = show_json(root, WITH_AGENTS)["tokens"]
    assert (t["input"], t["output"], t["cacheCreation"], t["cacheRead"]) == sums(found)


def test_show_prints_them_in_its_header(root):
    done = cli(root, "show", TWO_MODELS, "--no-pager")
    assert done.returncode == 0, done.stderr
    head = done.stdout.splitlines()[:4]
    row = usage_row(root, TWO_MODELS)
    assert (row["inputTokens"], row["outputTokens"], row["cacheReadTokens"], row["cacheCreationTokens"]) \
        == (3119, 32270, 8629528, 216690) and f"{row['cost']:.2f}" == "6.21"
    assert head[2] == "tokens 3.1k in · 32.3k out · 8.6M cache read · 217k cache write · $6.21"


def test_a_model_without_a_price_is_named(root, tmp_path):
    store = tmp_path / "store"
    project = store / "projects" / "-p"
    project.mkdir(parents=True)
    src = next(CORPUS.glob(f"*{TWO_MODELS}.jsonl"))
    (project / src.name.split("__", 2)[2]).write_bytes(
        src.read_bytes().replace(b'"claude-opus-4-5-20251101"', b'"claude-nonesuch-9"'))
    shown = show_json(store, TWO_MODELS)
    row = usage_row(store, TWO_MODELS)
    same_figures(shown, row)
    assert shown["unpricedModels"] == ["claude-nonesuch-9"] and shown["tokens"]["total"] > 0
    head = cli(store, "show", TWO_MODELS, "--no-pager").stdout.splitlines()[2]
    assert head.startswith("tokens ") and head.endswith("(no price for claude-nonesuch-9: not in the cost)")
