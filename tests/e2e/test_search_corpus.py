"""Relevance on real transcripts: a distinctive phrase of a conversation finds
that conversation first, through the daemon's index and through the offline
scan; and the index answers what the scan answers."""

from __future__ import annotations

import json
import shutil
import uuid

import pytest

from tests.conftest import CORPUS

PROJECT = "-work-corpus"
QUERIES = [
    # (query, corpus file it must find first)
    ('"a look around this project"', "blackgirlbytes__planetfall-seed-signalkit__07-d253ca52d8-3-full.jsonl"),
    ('"you update the CLAUDE md"', "d-kimuson__claude-code-viewer__5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"),
    ('"create a TODO app"', "d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"),
    ("sub agents Haiku", "daaain__claude-code-log__29ccd257-68b1-427f-ae5f-6524b7cb6f20.jsonl"),
    ('"make this project installable"', "daaain__claude-code-log__cb2e607c-c758-415a-8b45-c49e4631906a.jsonl"),
    ('"read public tokenizer css"', "daaain__claude-code-log__f852ad25-1024-47da-964e-5eaae5bd6e6a.jsonl"),
    ('"add a Github Action"', "daaain__claude-code-log__fe869ecb-c176-478f-9734-7e4b8ef12cff.jsonl"),
    ('"print Hello from"', "dagster-io__erk__8425536d-8181-4524-9ea2-c2148a31dcb0.jsonl"),
    ("remove duplicate simple edits", "dagster-io__erk__dc2f576f-81dd-4f52-8708-126e301daf57.jsonl"),
    ("shadow branch suffixes", "entireio__cli__1e-868c83dbb7-0-full.jsonl"),
    ('"212 213 is outdated"', "entireio__cli__29-38d5d1ba71-0-full.jsonl"),
    ("strategy producing transcript", "entireio__cli__d5-99f72ee73a-0-full.jsonl"),
    ('"Simplify Whole Repo Code"', "entireio__external-agents__24-4c84dd9136-0-full.jsonl"),
    ("test conversation", "kfischer-okarin__scripts-and-tools__b3edadab-bca0-4054-9b41-f7ffa6941260.jsonl"),
]


@pytest.fixture(scope="module")
def corpus_daemon(tmp_path_factory):
    import os
    import tempfile

    from tests.conftest import DaemonProc

    base = tempfile.mkdtemp(prefix="sd-", dir="/tmp")
    os.chmod(base, 0o700)
    d = DaemonProc(__import__("pathlib").Path(base))
    proj = d.root / "projects" / PROJECT
    proj.mkdir(parents=True)
    names = {}
    for f in sorted(CORPUS.glob("*.jsonl")):
        if "__agent-" in f.name:
            continue
        sid = str(uuid.uuid4())
        shutil.copy(f, proj / f"{sid}.jsonl")  # written by another writer, before the daemon
        names[sid] = f.name
    d.start()
    yield d, names
    d.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("query,expected", QUERIES, ids=[q for q, _ in QUERIES])
def test_a_distinctive_phrase_finds_its_conversation_first(corpus_daemon, query, expected):
    d, names = corpus_daemon
    hits = json.loads(d.cli("search", "--all", "--json", "--limit", "5", "--", query).stdout)
    assert hits, f"nothing found for {query}"
    assert names[hits[0]["sessionId"]] == expected


def test_the_scan_agrees_with_the_index_on_the_first_hit(corpus_daemon):
    d, names = corpus_daemon
    env = {"SESSIOND_SOCKET": str(d.socket) + ".none"}  # no daemon there, and no index at that root
    offline_root = d.base / "scan-root"
    if not offline_root.exists():
        shutil.copytree(d.root / "projects", offline_root / "projects")
    for query, expected in QUERIES[:5]:
        r = d.cli("--root", str(offline_root), "search", "--all", "--json", "--limit", "3", "--", query, env=env)
        hits = json.loads(r.stdout)
        assert b"scanned the files" in r.stderr
        assert hits and names[hits[0]["sessionId"]] == expected, query
