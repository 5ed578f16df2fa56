"""A Claude config dir built from the corpus: every transcript of
``tests/corpus/claude-code`` placed where Claude Code writes it (a main
transcript as ``projects/-<owner>-<repo>/<name>.jsonl``, an agent transcript
under its parent session's ``subagents/``), so ccusage and sessiond read the
same tree."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "claude-code"


def session_id_of(path: Path) -> str | None:
    with open(path, "rb") as f:
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("sessionId"), str):
                return entry["sessionId"]
    return None


def build(config: Path) -> Path:
    """Copy the corpus into ``config/projects``; its ``projects`` dir."""
    projects = config / "projects"
    for src in sorted(CORPUS.glob("*.jsonl")):
        owner, repo, name = src.name.split("__", 2)
        project = projects / f"-{owner}-{repo}"
        if name.startswith("agent-"):
            parent = session_id_of(src) or "orphan"
            dest = project / parent / "subagents" / name
        else:
            dest = project / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    return projects
