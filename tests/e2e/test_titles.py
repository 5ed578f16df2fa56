"""One title per session: ``list``, ``show``, ``export`` and ``search`` call a
session the same thing (``lite.session_title``: the title Claude Code's
picker shows, custom title > AI title > last prompt > summary > the first
prompt, a slash command by its name, IDE and interrupt noise stripped), for
corpus files whose first user entries are exactly that
noise. Before, ``show`` printed "(untitled)" for a session ``list`` called
``/init``, and ``export`` titled it ``<command-message>init is analyzing…``."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.conftest import CORPUS

TRICKY = {  # what makes each first prompt hard, and the title every command must show
    "1af7fc5e-8455-4414-9ccd-011d40f70b2a": "/init",  # only a slash command
    # A command, then inline 1.0.x sidechain Task prompts: the picker takes the first of those.
    "5c0375b4-57a5-4f26-b12d-d022ee4e51b7": "Examine the package.json file(s) in /path/to/Demo and any subdirectories. "
    "Focus on: 1. Dependencies (both dependencies and devDependencies) 2. Scripts available for development, build, "
    "lint, etc. 3. V…",
    "8425536d-8181-4524-9ea2-c2148a31dcb0": "/erk:plan-implement 8491",  # "is running…" command message: as typed
    "ef0fcd06-4c4d-4b87-9001-41d5f0f00a11": "continue",  # an interrupt marker before the prompt
    "cb2e607c-c758-415a-8b45-c49e4631906a": None,  # <ide_selection> first
    "9e953218-585f-4692-89df-9e0747a31c68": None,  # <ide_opened_file> first
    "f852ad25-1024-47da-964e-5eaae5bd6e6a": None,  # /clear, then the prompt
    "fe869ecb-c176-478f-9734-7e4b8ef12cff": None,  # summaries of an earlier session at the head
}
CWD = "/work/titled"


@pytest.mark.timeout(300)
def test_list_show_export_and_search_show_one_title(fresh_config, daemon_factory, short_tmp):
    d = daemon_factory().start()
    src = short_tmp / "src" / "-work-titled"
    src.mkdir(parents=True)
    for sid in TRICKY:
        (corpus,) = CORPUS.glob(f"*__{sid}.jsonl")
        shutil.copy(corpus, src / f"{sid}.jsonl")
    d.cli("import", str(src))
    listed = {s["sessionId"]: s["title"] for s in json.loads(d.cli("list", "--all", "--json").stdout)}
    assert set(listed) == set(TRICKY)
    for sid, expected in TRICKY.items():
        title = listed[sid]
        assert title and "<" not in title and not title.startswith("[Request interrupted"), (sid, title)
        if expected is not None:
            assert title == expected, (sid, title)
        shown = d.cli("show", sid, "--no-pager", check=False).stdout.decode().splitlines()[0]
        assert shown == f"session {sid} — {title}", (sid, shown)
        exported = d.cli("export", sid).stdout.decode().splitlines()[0]
        assert re.sub(r"\\(.)", r"\1", exported) == f"# {title}", (sid, exported)  # its punctuation escaped
        html = d.cli("export", sid, "--format", "html").stdout.decode()
        assert "<title>" in html and "&lt;command" not in html.split("</title>")[0], sid
    d.cli("reindex", "--all")
    found = {h["sessionId"]: h["title"] for word in ("the", "claude", "init")
             for h in json.loads(d.cli("search", "--all", "--json", "--limit", "1000", word).stdout)}
    assert set(found) == set(TRICKY), set(TRICKY) - set(found)
    assert found == listed
