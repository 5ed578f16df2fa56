"""The search index's own title of a session (what a hit shows when the file
is gone) is the one title (``lite.title_of``): the tail's summary, else its
``last-prompt``, else the first prompt, as ``list`` and Claude Code's picker
name it. Real files indexed into a real index, then read back as a search
reads it."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from sessiond.daemon.index.store import Store
from sessiond.search import query
from sessiond.search.schema import index_path
from sessiond.store.lite import session_title
from tests.helpers import assistant, line, user

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "claude-code"
PROJECT = "-work-titles"


def indexed(root: Path, files: list[Path]) -> None:
    store = Store(root, index_path(root))
    for f in files:
        store.catch_up(str(f))
    store.commit()
    store.close()


def test_the_index_names_corpus_sessions_with_a_last_prompt_as_list_does(tmp_path):
    sources = sorted(f for f in CORPUS.glob("*.jsonl") if b'"type":"last-prompt"' in f.read_bytes())
    assert len(sources) >= 5  # the 2.1 files that carry one
    project = tmp_path / "projects" / PROJECT
    project.mkdir(parents=True)
    copies = {}
    for f in sources:
        sid = str(uuid.uuid4())
        copies[sid] = project / f"{sid}.jsonl"
        shutil.copyfile(f, copies[sid])
    indexed(tmp_path, list(copies.values()))
    conn = query.open_read_only(index_path(tmp_path))
    try:
        for sid, path in copies.items():
            assert query.session_title(conn, PROJECT, sid)[0] == session_title(path), path.name
    finally:
        conn.close()


@pytest.mark.parametrize("summary, title", [(None, "now rename the output files"), ("Pipeline setup", "Pipeline setup")])
def test_a_hit_whose_file_is_gone_keeps_the_last_prompt_title(tmp_path, summary, title):
    sid = str(uuid.uuid4())
    project = tmp_path / "projects" / PROJECT
    project.mkdir(parents=True)
    path = project / f"{sid}.jsonl"
    entries = [user("set up the zebrafish pipeline", "u1", parentUuid=None, sessionId=sid, cwd="/work/titles"),
               assistant("done", "a1", parentUuid="u1", sessionId=sid, cwd="/work/titles"),
               *([{"type": "summary", "summary": summary, "leafUuid": "a1"}] if summary else []),
               {"type": "last-prompt", "lastPrompt": "now rename the output files", "sessionId": sid}]
    path.write_bytes(b"".join(line(e) + b"\n" for e in entries))
    assert session_title(path) == title  # what list shows
    indexed(tmp_path, [path])
    path.unlink()  # the index still has it; the hit's title can only come from there
    conn = query.open_read_only(index_path(tmp_path))
    try:
        hits = query.run(conn, tmp_path, "zebrafish").hits
    finally:
        conn.close()
    assert [(h.sessionId, h.title) for h in hits] == [(sid, title)]
