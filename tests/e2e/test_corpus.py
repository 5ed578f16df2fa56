"""Every real Claude Code transcript of the corpus, piped through ``sessiond append``.

The expectation is computed here independently (json.loads, plain dicts) from the
rules of SPEC 3: files hold the parseable input lines, same objects, same order;
sidechain entries with an agentId in their agent file; repeated uuids dropped; a
session with no user/assistant message has no main file; exit cleanup re-appends
the current metadata at EOF, and compaction re-appends it before the boundary.
"""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sessiond.store.entries import REAPPENDED_METADATA
from sessiond.wire import messages as m
from tests.conftest import CORPUS
from tests.helpers import main_path, read_entries

FILES = sorted(p for p in CORPUS.glob("*.jsonl"))
CLIENTS = 4


def parsed_lines(path: Path) -> list[dict]:
    out = []
    for raw in path.read_bytes().split(b"\n"):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def expected_layout(entries: list[dict]) -> dict[str, list[dict]]:
    """relative file name -> expected entries, per SPEC 3.2-3.5."""
    files: dict[str, list[dict]] = {}
    seen: dict[str, set] = {}
    meta: dict[str, dict] = {}
    materialized = dirty = False
    for e in entries:
        agent = e.get("agentId") if e.get("isSidechain") else None
        name = f"subagents/agent-{agent}.jsonl" if agent else "main"
        uid = e.get("uuid")
        if uid is not None:
            key = (name, bool(e.get("isSidechain")), uid)
            if key in seen.setdefault(name, set()):
                continue
            seen[name].add(key)
        if name == "main" and materialized and e.get("type") == "system" and e.get("subtype") == "compact_boundary" and not e.get("isSidechain"):
            # SPEC 3.5: the current metadata is re-appended before the boundary.
            files["main"] += [meta[k] for k in REAPPENDED_METADATA if k in meta]
        files.setdefault(name, []).append(e)
        if name == "main":
            if e.get("type") in REAPPENDED_METADATA:
                meta[e["type"]] = e
            else:
                dirty = True
            materialized |= e.get("type") in ("user", "assistant")
    if "main" in files:
        if not materialized:
            del files["main"]
        elif dirty and meta:
            files["main"] += [meta[k] for k in REAPPENDED_METADATA if k in meta]
    return files


def actual_layout(root: Path, cwd: str, sid: str) -> dict[str, list[dict]]:
    main = main_path(root, cwd, sid)
    out = {"main": read_entries(main)} if main.exists() else {}
    sub = main.with_suffix("")
    if sub.exists():
        for p in sorted(sub.rglob("*.jsonl")):
            out[str(p.relative_to(sub))] = read_entries(p)
    return out


def session_for(path: Path) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, path.name))


@pytest.mark.timeout(300)  # 43 CLI processes and a restart: over a minute on a loaded 2-core machine
def test_every_corpus_file_round_trips_through_sessiond_append(daemon):
    expectations = {}

    def append(i: int, path: Path):
        return daemon.cli("append", "--cwd", f"/corpus/{i}", "--session", session_for(path), "--json", str(path), check=False)

    with ThreadPoolExecutor(CLIENTS) as pool:  # a few CLI processes at once: each its own session
        outs = list(pool.map(append, range(len(FILES)), FILES))
    for i, (path, out) in enumerate(zip(FILES, outs)):
        cwd, sid = f"/corpus/{i}", session_for(path)
        entries = parsed_lines(path)
        expected = expected_layout(entries)
        expectations[path.name] = (cwd, sid, expected)
        if not entries:  # nothing to send: refused in one line
            assert out.returncode == 1 and out.stderr.endswith(b"has no entries (it is empty); nothing written\n"), path.name
            continue
        report = json.loads(out.stdout)
        assert report["accepted"] + report["duplicates"] == len(entries), path.name
        assert report["skipped"] == (1 if "entireio__cli__37" in path.name else 0), path.name
        # Main-file entries with no message to materialize them: said at once, exit 1.
        unwritten = "main" not in expected and any(not e.get("isSidechain") for e in entries)
        assert (report.get("pending", 0) > 0) == unwritten, path.name
        assert (b"no file was written" in out.stderr) == unwritten, path.name
        assert out.returncode == (1 if unwritten or report["skipped"] else 0), path.name
    daemon.cli("flush", "--durable")
    for name, (cwd, sid, expected) in expectations.items():
        assert actual_layout(daemon.root, cwd, sid) == expected, name
    # The layout really exercised what it should.
    assert sum(any(k.startswith("subagents/") for k in e) for _, _, e in expectations.values()) >= 5
    assert sum("main" not in e for _, _, e in expectations.values()) >= 4  # empty/summary/snapshot-only

    # Again, after a restart (dedup reloaded from the files): nothing with a uuid
    # is written twice; entries without one are appended again (see docs/guarantees.md).
    assert daemon.stop() == 0
    daemon.start()
    with daemon.client() as c:
        for path in FILES:
            cwd, sid, expected = expectations[path.name]
            lines = [json.dumps(e).encode() for e in parsed_lines(path)]
            c.pipeline(m.Append(id=c.next_id(), session=sid, cwd=cwd, entries=lines[j : j + 200]) for j in range(0, len(lines), 200))
            c.call(m.Close(id=c.next_id(), session=sid))
        c.flush()
    for name, (cwd, sid, expected) in expectations.items():
        actual = actual_layout(daemon.root, cwd, sid)
        assert actual.keys() == expected.keys(), name
        for f, entries in actual.items():
            assert entries[: len(expected[f])] == expected[f], (name, f)
            later = entries[len(expected[f]) :]
            assert all(e.get("uuid") is None for e in later), (name, f)
            assert len({(e.get("isSidechain"), e["uuid"]) for e in entries if "uuid" in e}) == sum("uuid" in e for e in entries)
        if "main" in expected:
            reappended = [e for e in expected["main"] if e.get("type") in REAPPENDED_METADATA]
            assert not reappended or actual["main"][-1].get("type") in REAPPENDED_METADATA, name
