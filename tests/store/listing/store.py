"""Builders for Claude Code stores in temp dirs: the real corpus, and synthetic files.

Lays files out exactly as Claude Code does (SPEC 2)::

    projects/<sanitized cwd>/<session-id>.jsonl
    projects/<sanitized cwd>/<session-id>/subagents/agent-<id>.jsonl (+ .meta.json)

The corpus layout reads cwd and sessionId from the files with plain ``json``
(test infrastructure, independent of the code under test).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid as uuidlib
from dataclasses import dataclass, field
from pathlib import Path

from sessiond.store.paths import sanitize
from tests.conftest import CORPUS

BASE_MTIME = 1_760_000_000
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

# Files without any cwd go where they were found upstream (see corpus/SOURCES.md).
UPSTREAM_PROJECT = {
    "4e27c414-a885-46a0-b5c8-d58e1417377d": "-Users-dain-workspace-claude-code-log-sample",
    "b23cbd1d-a39d-4f31-98fd-98f8ff69b816": "-Users-dain-workspace-JSSoundRecorder",
    "a95fea4a-b88a-4e49-ac07-4cc323d8700c": "-experiments-ideas",
    "6d3dc917-03e0-448d-a7a5-d5e6c1a6dd27": "-Users-user-project",
    "be89c3cd-bfbf-4c4f-a515-5af6e13249bf": "-Users-user-project",
}


def _first(path: Path, key: str) -> str | None:
    for raw in path.read_bytes().splitlines():
        try:
            value = json.loads(raw).get(key)
        except ValueError:
            continue
        if value:
            return value
    return None


@dataclass
class CorpusStore:
    root: Path
    sessions: dict[str, Path] = field(default_factory=dict)  # id -> main transcript
    mtimes: dict[str, int] = field(default_factory=dict)  # id -> mtime (s)
    agents: list[Path] = field(default_factory=list)
    decoys: dict[str, Path] = field(default_factory=dict)  # not sessions, UUID-named


def build_corpus_store(root: Path) -> CorpusStore:
    store = CorpusStore(root)
    projects = root / "projects"
    mains = sorted(p for p in CORPUS.glob("*.jsonl") if "__agent-" not in p.name)
    project_of: dict[str, Path] = {}
    for i, src in enumerate(mains):
        base = src.name.split("__")[-1].removesuffix(".jsonl")
        sid = base if UUID_RE.fullmatch(base) else _first(src, "sessionId")
        assert sid and sid not in store.sessions, src
        cwd = _first(src, "cwd")
        proj = projects / (sanitize(cwd) if cwd else UPSTREAM_PROJECT[sid])
        proj.mkdir(parents=True, exist_ok=True)
        dst = proj / f"{sid}.jsonl"
        shutil.copyfile(src, dst)
        # Corpus files sorted by name get ascending mtimes, one minute apart.
        mtime = BASE_MTIME + 60 * i
        os.utime(dst, (mtime, mtime))
        store.sessions[sid] = dst
        store.mtimes[sid] = mtime
        project_of[sid] = proj
    for src in sorted(CORPUS.glob("*__agent-*.jsonl")):
        agent = src.name.split("__agent-")[-1].removesuffix(".jsonl")
        parent = _first(src, "sessionId")
        proj = project_of.get(parent) or projects / sanitize(_first(src, "cwd"))
        sub = proj / parent / "subagents"
        sub.mkdir(parents=True, exist_ok=True)
        dst = sub / f"agent-{agent}.jsonl"
        shutil.copyfile(src, dst)
        meta = src.with_name(src.name.removesuffix(".jsonl") + ".meta.json")
        if meta.exists():
            shutil.copyfile(meta, sub / f"agent-{agent}.meta.json")
        store.agents.append(dst)
    # The old flat layout (2.0.x) kept agent files next to the sessions.
    flat = project_of["b3edadab-bca0-4054-9b41-f7ffa6941260"] / "agent-a434715.jsonl"
    shutil.copyfile(CORPUS / "kfischer-okarin__scripts-and-tools__agent-a434715.jsonl", flat)
    # A subagent transcript under a UUID name, and the newest file of its project:
    # its first entry is a sidechain, so it must never be listed.
    side_id = "00000000-0000-4000-8000-00000000a86d"
    side = project_of["b3edadab-bca0-4054-9b41-f7ffa6941260"] / f"{side_id}.jsonl"
    shutil.copyfile(CORPUS / "kfischer-okarin__scripts-and-tools__agent-a86dcdc.jsonl", side)
    top = BASE_MTIME + 60 * (len(mains) + 5)
    for p in (flat, side):
        os.utime(p, (top, top))
    store.decoys[side_id] = side
    return store


# ------------------------------------------------------------------ synthetic


def new_id() -> str:
    return str(uuidlib.uuid4())


def envelope(sid: str, cwd: str = "/w/proj", branch: str = "main", ts: str = "2026-01-01T00:00:00.000Z",
             side: bool = False, **extra) -> dict:
    """Claude Code's key order: parentUuid first, message fields after the envelope."""
    return {"parentUuid": None, "isSidechain": side, "userType": "external", "cwd": cwd,
            "sessionId": sid, "version": "2.0.74", "gitBranch": branch, **extra}


def user_msg(sid: str, content, **kw) -> dict:
    extra = {k: kw.pop(k) for k in ("isMeta", "isCompactSummary", "teamName", "agentName") if k in kw}
    ts = kw.pop("ts", "2026-01-01T00:00:00.000Z")
    return {**envelope(sid, ts=ts, **kw), **extra, "type": "user",
            "message": {"role": "user", "content": content}, "uuid": new_id(), "timestamp": ts}


def assistant_msg(sid: str, blocks: list, **kw) -> dict:
    ts = kw.pop("ts", "2026-01-01T00:00:01.000Z")
    return {**envelope(sid, ts=ts, **kw), "message": {"role": "assistant", "content": blocks},
            "type": "assistant", "uuid": new_id(), "timestamp": ts}


def meta(kind: str, field_name: str, value, sid: str) -> dict:
    return {"type": kind, field_name: value, "sessionId": sid}


def dump(entries: list) -> bytes:
    out = []
    for e in entries:
        out.append(e if isinstance(e, bytes) else json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode())
    return b"".join(line + b"\n" for line in out)


def write(path: Path, data: bytes | list, mtime: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else dump(data))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path
