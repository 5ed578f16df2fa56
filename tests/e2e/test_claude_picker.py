"""sessiond's titles are the ones Claude Code's ``--resume`` picker SHOWS: the
real picker of two releases (2.1.197 from the npm registry, the 2.1.3xx
bundled in the Agent SDK's wheel), run offline in tmux on one config dir laid
out from corpus transcripts (``tests/claude_picker.py``: a custom title, an AI
title, a ``last-prompt``, summaries, one 2.1 file given a 2.0 summary so it
holds both, summaries beyond the tail window, a plain first prompt,
``/init``, a custom slash command with arguments, a subagent file under a
session's name, a summary-only file),
read off the captured pane, against ``sessiond list --json`` on the same dir.

The newer picker decides: every session sessiond lists carries the title it
shows. Where the older one differs it is recorded here and the README says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import claude_agent_sdk
import pytest

from tests.claude_picker import CASES, OLD_RELEASE, layout, picker_titles, shows
from tests.conftest import DaemonProc, short_dir
from tests.npm import npm_install

NEW = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
README = Path(__file__).resolve().parents[2] / "README.md"

pytestmark = pytest.mark.slow

OLD_DIFFERS: dict[str, str] = {}
"""Rules on which 2.1.197 shows another title than the newer picker (rule:
what 2.1.197 shows): none, on these files."""


@pytest.fixture(scope="module")
def old_claude(tmp_path_factory) -> Path:
    modules = npm_install(f"@anthropic-ai/claude-code@{OLD_RELEASE}", tmp_path_factory.mktemp("claude-code"))
    # The npm package's own bin/claude.exe is a stub its postinstall replaces (npm runs
    # no install script it was not told to); the binary is the platform package's.
    found = sorted(modules.glob("@anthropic-ai/claude-code-*/claude"))
    if not found:
        pytest.skip(f"npm installed @anthropic-ai/claude-code@{OLD_RELEASE} without a binary for this platform")
    return found[0]


def sessiond_titles(base: Path) -> list[dict]:
    """``sessiond list --json``'s sessions, newest first, on the config dir
    the picker read (the store root is that dir)."""
    (base / "sd").mkdir(mode=0o700)
    d = DaemonProc(base / "sd")
    d.root = base / "config"
    d.start()
    try:
        out = d.cli("list", "--cwd", str((base / "work").resolve()), "--json", timeout=60).stdout
    finally:
        d.stop()
    return json.loads(out)


def picker_and_sessiond(claude: Path) -> tuple[dict[str, str], list[dict], str]:
    with short_dir() as base:
        shown, screen = picker_titles(claude, base)
        return shown, sessiond_titles(base), screen


@pytest.mark.timeout(300)
def test_sessiond_titles_are_what_the_newest_picker_shows():
    assert NEW.exists(), f"the Agent SDK's wheel has no bundled Claude Code at {NEW}"
    shown, listed, screen = picker_and_sessiond(NEW)
    by_session = {c.session: c for c in CASES}
    assert {c.session for c in CASES if c.picker_lists} == set(shown), screen
    assert {c.session for c in CASES if c.sessiond_lists} == {s["sessionId"] for s in listed}
    for s in listed:
        sid = s["sessionId"]
        assert shows(shown[sid], s["title"]), (by_session[sid].rule, shown[sid], s["title"], screen)
    # Its rows are in the order of their last message (not of file mtime), as `sessiond list`'s are.
    by_last = sorted(listed, key=lambda s: s["lastEntryAt"], reverse=True)
    ours = [s["sessionId"] for s in listed]
    assert [s["sessionId"] for s in by_last] == [sid for sid in shown if sid in ours] == ours
    by_mtime = [c.session for c in CASES if c.sessiond_lists]  # the layout's mtimes: newest first
    assert ours != by_mtime  # the files' mtimes say otherwise


@pytest.mark.timeout(400)
def test_the_older_picker_differs_only_where_the_readme_says(old_claude):
    old, listed, old_screen = picker_and_sessiond(old_claude)
    with short_dir() as base:
        new, _ = picker_titles(NEW, base)
    differs = {c.rule: old[c.session] for c in CASES if c.picker_lists and old[c.session] != new[c.session]}
    assert differs == OLD_DIFFERS, old_screen
    readme = " ".join(README.read_text().split())
    assert f"Claude Code {OLD_RELEASE}" in readme and "show the same titles" in readme
    assert "Both pickers put the summary before `last-prompt`" in readme
    # 2.1.197 lists the sessions by file mtime, newest first; sessiond as the newer picker does.
    assert list(old) == [c.session for c in CASES if c.picker_lists], old_screen
    ours = [s["sessionId"] for s in listed]
    assert ours != [sid for sid in old if sid in ours]
    assert "by the time of their last message, as `sessiond list`" in readme  # the newer picker's order


def test_layout_places_every_case_with_mtimes_in_order(short_tmp):
    work = (short_tmp / "work").resolve()
    project = layout(short_tmp / "config", work)
    mtimes = [(project / f"{c.session}.jsonl").stat().st_mtime for c in CASES]
    assert mtimes == sorted(mtimes, reverse=True)
    state = json.loads((short_tmp / "config" / ".claude.json").read_text())
    assert state["projects"][str(work)]["hasTrustDialogAccepted"] is True
