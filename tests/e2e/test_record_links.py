"""Issue 16 item 4: ``record`` writes the parent links Claude Code writes.

Every corpus chain (the entries a resume selects, in file order) is stripped of its
envelope and parent links, recorded through a real daemon in several calls, and
each written ``parentUuid`` compared with the original's, resolved through the
progress entries the original had in between (sessiond does not record progress).
Files with no chain (bookkeeping alone) and the empty file are tested for what
holds for them instead: nothing linked, nothing left on disk, a one-line refusal.
One daemon serves the module (each file records into a session of its own).
"""

from __future__ import annotations

import functools
import json
import uuid as uuidlib

import pytest

from sessiond.client import Session
from sessiond.client.resume.pipeline import resolve_chain
from sessiond.store.paths import agent_file, project_dir
from tests.conftest import CORPUS
from tests.helpers import main_path, read_entries

CORPUS_FILES = sorted(CORPUS.glob("*.jsonl"))
CWD = "/tmp/record-links"
STRIPPED = ("parentUuid", "logicalParentUuid", "sessionId", "cwd", "userType", "version", "gitBranch", "agentId")
BATCH = 7  # several record calls: the hint between them must carry the cursor


@functools.cache
def original_chain(path):
    """The chain's entries as the file has them, in file order, and the file's links
    (parsed once per file: collection sorts the files by it, the test reuses it)."""
    resolved = resolve_chain(path, skip_threshold=float("inf"))
    picked = sorted((e for e in resolved.chain if e.type != "progress"), key=lambda e: e.index)
    entries = [json.loads(e.raw) for e in picked]
    progress: dict[str, str | None] = {}
    for raw in path.read_bytes().splitlines():
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("type") == "progress" and isinstance(obj.get("uuid"), str):
            progress[obj["uuid"]] = obj.get("parentUuid")
    return in_memory_order(entries, progress), progress, resolved.loaded.sidechain_only


def in_memory_order(entries, progress):
    """File order, except that an entry written before its own parent (one real file
    has such a pair: two hook attachments written in reverse) follows its parent, as
    it did in the writer's memory."""
    position = {e["uuid"]: i for i, e in enumerate(entries)}
    late = {}
    for i, e in enumerate(entries):
        parent = through_progress(e.get("parentUuid"), progress)
        if position.get(parent, -1) > i:
            late.setdefault(parent, []).append(e)
    out = []
    for e in entries:
        if any(e is x for xs in late.values() for x in xs):
            continue
        out.append(e)
        out.extend(late.get(e["uuid"], ()))
    return out


def through_progress(parent, progress):
    seen = set()
    while parent in progress and parent not in seen:
        seen.add(parent)
        parent = progress[parent]
    return parent


EMPTY = [p for p in CORPUS_FILES if not p.stat().st_size]
WITH_CHAIN = [p for p in CORPUS_FILES if p not in EMPTY and original_chain(p)[0]]
WITHOUT_CHAIN = [p for p in CORPUS_FILES if p not in EMPTY and not original_chain(p)[0]]
"""Files of bookkeeping alone (a summary, file-history snapshots): no message to link."""


def test_the_corpus_has_files_of_every_kind():
    """The split is over real files: no kind may silently become empty, and none is lost."""
    assert len(WITH_CHAIN) >= 30 and len(WITHOUT_CHAIN) >= 2 and EMPTY
    assert len(WITH_CHAIN) + len(WITHOUT_CHAIN) + len(EMPTY) == len(CORPUS_FILES)


@pytest.mark.parametrize("path", EMPTY, ids=lambda p: p.name[:60])
def test_an_empty_file_is_refused_as_input(shared_daemon, path):
    sid = str(uuidlib.uuid4())
    r = shared_daemon.cli("record", "--cwd", CWD, "--session", sid, input=path.read_bytes(), check=False)
    assert (r.returncode, r.stderr) == (1, b"sessiond: stdin has no entries (it is empty); nothing written\n")
    assert not main_path(shared_daemon.root, CWD, sid).exists()


@pytest.mark.parametrize("path", WITH_CHAIN, ids=lambda p: p.name[:60])
def test_recorded_links_are_claude_codes(shared_daemon, path):
    daemon = shared_daemon
    entries, progress, sidechain = original_chain(path)
    sid = str(uuidlib.uuid4())
    agent = entries[0].get("agentId") if sidechain else None
    with daemon.client() as c:
        s = Session(c, sid, CWD, agent=agent or ("a1" if sidechain else None))
        for i in range(0, len(entries), BATCH):
            s.record([{k: v for k, v in e.items() if k not in STRIPPED} for e in entries[i : i + BATCH]])
        s.flush()
        s.close()
    written_path = (
        agent_file(project_dir(daemon.root, CWD), sid, agent or "a1") if sidechain else main_path(daemon.root, CWD, sid)
    )
    written = {e["uuid"]: e for e in read_entries(written_path) if "uuid" in e}
    position = {e["uuid"]: i for i, e in enumerate(entries)}
    compared, wrong = 0, []
    assert len(written) >= len(entries)
    for i, e in enumerate(entries):
        got = written[e["uuid"]]
        if e.get("type") == "system" and e.get("subtype") == "compact_boundary":
            assert got["parentUuid"] is None
            want, have, field = through_progress(e.get("logicalParentUuid"), progress), got.get("logicalParentUuid"), "logical"
        else:
            want, have, field = through_progress(e.get("parentUuid"), progress), got.get("parentUuid"), "parent"
        if i == 0 or want not in position:
            continue  # the chain's start, or a parent the chain does not hold (a gap, a relink)
        compared += 1
        if have != want:
            wrong.append((i, e["uuid"], e.get("type"), field, want, have))
    assert wrong == []
    assert compared >= 0.9 * (len(entries) - 1)


@pytest.mark.parametrize("path", WITHOUT_CHAIN, ids=lambda p: p.name[:60])
def test_a_file_without_messages_records_no_link_and_leaves_no_transcript(shared_daemon, path):
    """What holds for them: recording their entries links nothing (no hint comes
    back), holds them all (lazy materialization, SPEC 3.2), and a session closed
    with no message leaves no transcript; the CLI says so and exits 1."""
    daemon = shared_daemon
    entries = [json.loads(raw) for raw in path.read_bytes().splitlines() if raw.strip()]
    sid = str(uuidlib.uuid4())
    with daemon.client() as c:
        s = Session(c, sid, CWD)
        assert s.record([{k: v for k, v in e.items() if k not in STRIPPED} for e in entries]) is None
        assert s.pending == len(entries)
        s.flush()
        s.close()
    assert not main_path(daemon.root, CWD, sid).exists()
    r = daemon.cli("record", "--cwd", CWD, "--session", sid, input=path.read_bytes(), check=False)
    assert r.returncode == 1 and b"no file was written" in r.stderr and r.stderr.count(b"\n") == 1, r.stderr
    assert not main_path(daemon.root, CWD, sid).exists()


def _block(uid: str, response: str, block: dict) -> dict:
    return {"type": "assistant", "uuid": uid, "message": {"id": response, "role": "assistant", "content": [block]}}


def _call(uid: str, response: str) -> dict:
    return _block(uid, response, {"type": "tool_use", "id": f"toolu_{uid}", "name": "Bash", "input": {}})


def _result(uid: str, call: str) -> dict:
    return {"type": "user", "uuid": uid, "sourceToolAssistantUUID": call,
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{call}", "content": "ok"}]}}


def test_a_streamed_response_keeps_its_blocks_on_one_branch(daemon):
    """Tools run while the response streams: tool_use A, tool_use B, result A, tool_use C,
    result C, result B, then the next response. Recorded in two calls with a daemon
    restart between them (the cursor is rebuilt from the file): C continues from B,
    not from result A (with "the previous message" rule the response's blocks were
    split over two branches, B's a dead end); each result hangs off its call; the
    next response hangs off the last result written, as Claude Code links it."""
    sid = str(uuidlib.uuid4())
    first = [{"type": "user", "uuid": "p", "message": {"role": "user", "content": "go"}},
             _call("A", "m1"), _call("B", "m1"), _result("rA", "A")]
    second = [_call("C", "m1"), _result("rC", "C"), _result("rB", "B"),
              _block("N", "m2", {"type": "text", "text": "all done"})]
    with daemon.client() as c:
        s = Session(c, sid, CWD)
        assert s.record(first) == "B"  # the tip: result A answered an earlier call
        s.flush()
        s.close()
    daemon.stop()
    daemon.start()
    daemon.cli("record", "--cwd", CWD, "--session", sid, "-",
               input=b"".join(json.dumps(e).encode() + b"\n" for e in second))
    daemon.cli("flush", "--session", sid)
    links = {e["uuid"]: e.get("parentUuid") for e in read_entries(main_path(daemon.root, CWD, sid)) if "uuid" in e}
    assert links == {"p": None, "A": "p", "B": "A", "rA": "A", "C": "B", "rC": "C", "rB": "B", "N": "rB"}
