"""Every real transcript is named as Anthropic's own reader names it.

The Agent SDK's ``list_sessions`` ports the lite listing of Claude Code's
``--resume`` picker; for every file of the corpus (copied into a throwaway
``CLAUDE_CONFIG_DIR``, read by both from the same bytes), sessiond's title must
be the SDK's ``summary`` field, and a file the SDK does not list (a subagent
transcript, an empty file) must not be listed by sessiond either.

One deliberate difference: a file holding only summary entries (a 1.0.x
session whose messages live in another file) is listed by the SDK under its
summary, but has nothing ``resume`` could continue, so sessiond counts it as
metadata-only (SPEC 5) and does not list it. And one where the SDK is not
the picker: a session first named by a slash command with arguments is shown
by Claude Code's picker (2.1.197 and 2.1.3xx, ``tests/e2e/test_claude_picker.py``)
with them, ``/erk:plan-implement 8491``, and by the SDK by the name alone;
sessiond follows the picker.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from sessiond.store.lite import read_lite
from sessiond.store.paths import is_session_id

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "claude-code"
FILES = sorted(CORPUS.glob("*.jsonl"))


def _sid(path: Path) -> str:
    tail = path.name.removesuffix(".jsonl").rsplit("__", 1)[-1]
    return tail if is_session_id(tail) else str(uuid.uuid5(uuid.NAMESPACE_URL, path.name))


@pytest.fixture(scope="module")
def sdk_listing(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    sdk = pytest.importorskip("claude_agent_sdk")
    config = tmp_path_factory.mktemp("claude-config")
    proj = config / "projects" / "-corpus"
    proj.mkdir(parents=True)
    for p in FILES:
        shutil.copyfile(p, proj / f"{_sid(p)}.jsonl")
    mp = pytest.MonkeyPatch()
    mp.setenv("CLAUDE_CONFIG_DIR", str(config))
    try:
        listed = {s.session_id: s.summary for s in sdk.list_sessions()}
    finally:
        mp.undo()
    return proj, listed


def test_the_corpus_has_distinct_session_names():
    assert len({_sid(p) for p in FILES}) == len(FILES) > 30


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name[:60])
def test_title_is_the_sdks(sdk_listing, path):
    proj, listed = sdk_listing
    info = read_lite(proj / f"{_sid(path)}.jsonl")
    ours = info.title if info.listable else None
    theirs = listed.get(_sid(path))
    if ours is None and theirs is not None and info.state == "metadata-only":
        assert info.summary == theirs  # listed by the SDK under its summary; nothing to resume here
        return
    if ours != theirs and theirs is not None and theirs.startswith("/") and info.first_prompt == ours:
        assert ours.startswith(theirs + " ")  # the command's arguments, as the picker shows them
        return
    assert ours == theirs
