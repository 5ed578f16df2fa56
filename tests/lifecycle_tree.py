"""A Claude Code ``projects`` tree built from the real transcripts of the corpus,
for the lifecycle tests: project dirs, sessions named by their ids, a session
with subagent files and a meta file, summary-only and snapshot-only files."""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path

from tests.conftest import CORPUS

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class Tree:
    def __init__(self, projects: Path) -> None:
        self.projects = projects
        self.sessions: dict[str, Path] = {}  # session id -> its transcript
        self.with_agents: str = ""
        self.flat_agent: Path | None = None

    def files(self) -> dict[str, bytes]:
        """Every file under the tree, by path relative to it."""
        return {str(p.relative_to(self.projects)): p.read_bytes() for p in sorted(self.projects.rglob("*")) if p.is_file()}


def build(base: Path) -> Tree:
    projects = base / "projects"
    tree = Tree(projects)
    agents = sorted(CORPUS.glob("*agent-*.jsonl"))
    for src in sorted(CORPUS.glob("*.jsonl")):
        if src in agents:
            continue
        owner_repo = src.name.split("__")[1] if "__" in src.name else "misc"
        project = projects / f"-home-user-{owner_repo}"
        project.mkdir(parents=True, exist_ok=True)
        found = _UUID.search(src.name)
        sid = found.group(0) if found else str(uuid.uuid5(uuid.NAMESPACE_URL, src.name))
        if sid in tree.sessions:
            sid = str(uuid.uuid5(uuid.NAMESPACE_URL, src.name))
        shutil.copyfile(src, project / f"{sid}.jsonl")
        tree.sessions[sid] = project / f"{sid}.jsonl"
    # The largest session gets the corpus's agent files and a meta file.
    sid = max(tree.sessions, key=lambda s: tree.sessions[s].stat().st_size)
    sub = tree.sessions[sid].parent / sid / "subagents"
    sub.mkdir(parents=True)
    legacy = CORPUS / "kfischer-okarin__scripts-and-tools__agent-a86dcdc.jsonl"  # Claude Code 2.0.x: beside its session
    owner = tree.sessions["b3edadab-bca0-4054-9b41-f7ffa6941260"]
    shutil.copyfile(legacy, owner.parent / "agent-a86dcdc.jsonl")
    tree.flat_agent = owner.parent / "agent-a86dcdc.jsonl"
    for a in agents:
        if a == legacy:
            continue
        name = a.name.split("__")[-1]
        shutil.copyfile(a, sub / name)
        (sub / name.replace(".jsonl", ".meta.json")).write_bytes(b'{"agentType":"general-purpose"}')
    tree.with_agents = sid
    return tree


def session_with_agent(d, cwd: str) -> tuple[str, dict[Path, bytes]]:
    """A session written through daemon ``d`` with one subagent file; its files' bytes."""
    from sessiond.client import Session
    from tests.helpers import assistant, line, main_path, user

    sid = str(uuid.uuid4())
    with d.client() as c:
        s = Session(c, sid, cwd)
        s.append(line(user("hello")), "written")
        s.append(line({**assistant("from a subagent"), "isSidechain": True, "agentId": "a1"}), "written")
        s.close()
    path = main_path(d.root, cwd, sid)
    return sid, {p: p.read_bytes() for p in [path, *path.with_suffix("").rglob("*")] if p.is_file()}
