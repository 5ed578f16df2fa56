"""The picker's search, ranking, keys and fork grouping, driven through
Textual's pilot on real files, with a real daemon where the key goes through
one (fork, and rename, tag and trash when one runs): each key's effect is
checked on the files and through the CLI (``sessiond list``), as a person
would see it after leaving the picker."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from sessiond.client.cli import Context
from sessiond.client.cli.output import size
from sessiond.client.picker.matching import Matcher
from sessiond.store import trash as trash_mod
from tests.client.test_picker import held_open, picker, previewed, run, shown_ids, table_column, write_session
from tests.conftest import DaemonProc
from tests.helpers import main_path, read_entries

pytestmark = pytest.mark.timeout(180)


async def until(pilot, ready, what: str, limit: float = 60.0) -> None:
    """Let the app run until ``ready()`` holds (the pytest timeout bounds the
    test; this one names what never came)."""
    deadline = time.monotonic() + limit
    while not ready():
        assert time.monotonic() < deadline, f"never: {what}"
        await pilot.pause(0.05)


async def acted(pilot) -> str:
    """The message line once the action (run in a thread) has said its result."""
    def message() -> str:
        return str(pilot.app.query_one("#message").render())

    await until(pilot, lambda: not message().endswith("…"), "the action's result")
    await pilot.pause()
    return message()


def project(d: DaemonProc | None, base: Path) -> tuple[Context, str, dict[str, str]]:
    """Three sessions of one project (the store of ``d`` when given): one whose
    conversation (not its title) speaks of kubernetes."""
    root = d.root if d is not None else base / "root"
    here = str(base / "proj")
    os.mkdir(here)
    ids = {
        "newest": write_session(root, here, "refactoring the parser", 20),
        "middle": write_session(root, here, "fix the flaky socket test", 10,
                                reply="the pods restart because kubernetes evicts them under memory pressure"),
        "oldest": write_session(root, here, "write the docs", 2),
    }
    sock = d.socket if d is not None else base / "none.sock"
    return Context(root=root, socket=sock, autostart=False), here, ids


def test_words_of_the_conversation_find_a_session_through_the_daemons_search(daemon_factory, short_tmp):
    """A word only in a reply (not in any title) finds its session once the
    typing rests: the daemon's ranked search, its snippet shown on the row."""
    d = daemon_factory().start()
    obj, here, ids = project(d, short_tmp)
    deadline = time.monotonic() + 60
    while b"kubernetes" not in d.cli("search", "kubernetes", "--cwd", here, check=False).stdout:  # indexed
        assert time.monotonic() < deadline, "the daemon never indexed the session"
        time.sleep(0.2)
    seen = {}

    async def type_(pilot):
        await pilot.press(*"kubernetes")
        # No title holds it: nothing until the search answers (which a loaded
        # machine may let come before this look: the filter rests 0.25 s).
        seen["at_once"] = [] if pilot.app.found else shown_ids(pilot.app)
        await until(pilot, lambda: pilot.app.found, "the search's answer")
        seen["found"] = shown_ids(pilot.app)
        seen["titles"] = table_column(pilot.app, "title")
        seen["preview"] = await previewed(pilot)

    run(picker(obj, here), type_)
    assert seen["at_once"] == []
    assert seen["found"] == [ids["middle"]]
    assert seen["titles"][0].startswith("fix the flaky socket test  ⌕ the pods restart")  # the snippet, dim
    assert seen["preview"].startswith("found: ") and "kubernetes" in seen["preview"].splitlines()[0]


def test_without_a_daemon_the_search_scans_the_files(short_tmp):
    """No daemon: the conversations are scanned as ``sessiond search`` scans
    them, and a title match stays ahead of a session found in the text."""
    obj, here, ids = project(None, short_tmp)
    write_session(obj.root, here, "memory pressure notes", 1)
    seen = {}

    async def type_(pilot):
        await pilot.press(*"pressure")
        seen["titles_only"] = [pilot.app.rows[i].title for i in pilot.app.shown]
        await until(pilot, lambda: pilot.app.found, "the scan's answer")
        seen["both"] = [pilot.app.rows[i].title for i in pilot.app.shown]

    run(picker(obj, here), type_)
    assert seen["titles_only"] == ["memory pressure notes"]
    assert seen["both"][0] == "memory pressure notes" and "fix the flaky socket test" in seen["both"]


def test_a_stale_search_answer_is_dropped(short_tmp):
    """An answer to a query the filter no longer holds changes nothing."""
    obj, here, ids = project(None, short_tmp)
    seen = {}

    async def type_(pilot):
        await pilot.press(*"docs")
        pilot.app._found("kubernetes", [(ids["middle"], "kubernetes evicts them")])
        seen["after_stale"] = shown_ids(pilot.app)
        pilot.app._found("docs", [(ids["middle"], "the docs say")])
        seen["after_fresh"] = shown_ids(pilot.app)

    run(picker(obj, here), type_)
    assert seen["after_stale"] == [ids["oldest"]]
    assert seen["after_fresh"] == [ids["oldest"], ids["middle"]]


def test_title_matches_rank_exact_then_prefix_then_typo(short_tmp):
    """``socket``: the title with the word itself first, then the one where it
    starts a longer word, then the one with a typo, whatever their age."""
    root = short_tmp / "root"
    here = str(short_tmp / "proj")
    os.mkdir(here)
    typo = write_session(root, here, "the sockte reconnects", 25)
    prefix = write_session(root, here, "sockets everywhere", 20)
    exact = write_session(root, here, "a socket leak", 5)
    write_session(root, here, "nothing related", 28)
    obj = Context(root=root, socket=short_tmp / "none.sock", autostart=False)
    seen = {}

    async def type_(pilot):
        await pilot.press(*"socket")
        seen["ranked"] = shown_ids(pilot.app)
        await pilot.press(*["backspace"] * 6, *"scket")  # a letter dropped: not "sockte", two edits away
        seen["dropped"] = shown_ids(pilot.app)

    run(picker(obj, here), type_)
    assert seen["ranked"] == [exact, prefix, typo]
    assert seen["dropped"] == [prefix, exact]  # only through typos now: the listing's order


def test_the_matcher_typing_on_keeps_what_a_fresh_filter_keeps():
    """Typing on filters only what the shorter query kept: the same answer as
    filtering the whole listing, at every step of a query with typos."""
    titles = ["refactoring the parser", "fix the flaky socket test", "socket", "the sockte test", "acde things",
              "rfctr notes", "tests of sockets", "abcd"]
    ids = [f"{i:08x}-id" for i in range(len(titles))]
    tags = ["wip", "", "wip", "", "", "", "done", ""]
    typed = Matcher(titles, ids, tags)
    for query in ("s", "so", "soc", "sock", "sockt", "sockte", "sockte ", "sockte t", "sockte te", "abcde", "sx", "sxc",
                  "sxck",  # three letters match as written, four with a typo: "sock"
                  "refa", "refac", "refact", "refactr", "refactrin", "rfctr", "rfctrn",
                  "#", "#w", "#wi #wip", "#wip s", "#wip sock"):
        assert typed.filter(query) == Matcher(titles, ids, tags).filter(query), query


def test_tag_key_tags_and_hash_filters_then_untags(daemon_factory, short_tmp):
    d = daemon_factory().start()
    obj, here, ids = project(d, short_tmp)
    seen = {}

    async def act(pilot):
        await pilot.press("tab", "down", "t")
        await pilot.pause()
        pilot.app.screen.query_one("Input").value = "urgent"
        await pilot.press("enter")
        await pilot.pause()
        seen["tags"] = table_column(pilot.app, "tag")
        seen["message"] = str(pilot.app.query_one("#message").render())
        await pilot.press("slash", *"#urg")
        seen["filtered"] = shown_ids(pilot.app)
        await pilot.press(*["backspace"] * 4, "tab")

    run(picker(obj, here), act)
    assert seen["tags"] == ["", "#urgent", ""]
    assert seen["message"] == f"tagged {ids['middle'][:8]} #urgent"
    assert seen["filtered"] == [ids["middle"]]
    listed = json.loads(d.cli("list", "--cwd", here, "--json").stdout)
    assert {s["sessionId"]: s["tag"] for s in listed}[ids["middle"]] == "urgent"

    async def untag(pilot):
        await pilot.press("tab", "down", "t")
        await pilot.pause()
        pilot.app.screen.query_one("Input").value = ""
        await pilot.press("enter")
        await pilot.pause()
        seen["message"] = str(pilot.app.query_one("#message").render())

    run(picker(obj, here), untag)
    assert seen["message"] == f"untagged {ids['middle'][:8]} (was #urgent)"
    listed = json.loads(d.cli("list", "--cwd", here, "--json").stdout)
    assert {s["sessionId"]: s["tag"] for s in listed}[ids["middle"]] in (None, "")


def test_fork_key_makes_a_fork_listed_under_its_origin(daemon_factory, short_tmp):
    d = daemon_factory().start()
    obj, here, ids = project(d, short_tmp)
    seen = {}

    async def act(pilot):
        await pilot.press("tab", "down", "f")
        seen["message"] = await acted(pilot)
        seen["titles"] = table_column(pilot.app, "title")
        seen["selected"] = pilot.app.selected().session.sessionId
        seen["ids"] = shown_ids(pilot.app)

    run(picker(obj, here), act)
    fork = seen["selected"]
    assert fork not in ids.values()
    assert seen["message"] == f"forked {ids['middle'][:8]} into {fork[:8]} (Enter resumes the fork)"
    assert seen["ids"] == [ids["newest"], ids["middle"], fork, ids["oldest"]]
    assert seen["titles"][2] == "  ⑂ fix the flaky socket test"
    path = main_path(d.root, here, fork)
    assert [e["forkedFrom"]["sessionId"] for e in read_entries(path)] == [ids["middle"]] * 2
    listed = json.loads(d.cli("list", "--cwd", here, "--json").stdout)
    assert {s["sessionId"]: s["forkedFrom"] for s in listed}[fork] == ids["middle"]


def test_forks_are_grouped_under_the_session_they_came_from(daemon_factory, short_tmp):
    """Forks made by ``sessiond fork`` (a fork of a fork too) are listed right
    under their origin, deeper for each generation, whatever their activity."""
    d = daemon_factory().start()
    obj, here, ids = project(d, short_tmp)
    first = d.cli("fork", ids["oldest"], "--cwd", here).stdout.decode().strip()
    second = d.cli("fork", first, "--cwd", here).stdout.decode().strip()
    seen = {}

    async def look(pilot):
        seen["ids"] = shown_ids(pilot.app)
        seen["titles"] = table_column(pilot.app, "title")

    run(picker(obj, here), look)
    assert seen["ids"] == [ids["newest"], ids["middle"], ids["oldest"], first, second]
    assert seen["titles"][2:] == ["write the docs", "  ⑂ write the docs", "    ⑂ write the docs"]


def test_export_key_writes_the_html_and_markdown_and_says_where(short_tmp, monkeypatch):
    obj, here, ids = project(None, short_tmp)
    out = short_tmp / "out"
    out.mkdir()
    monkeypatch.chdir(out)
    seen = {}

    async def act(pilot):
        await pilot.press("tab", "down", "e")
        seen["html"] = await acted(pilot)
        await pilot.press("E")
        seen["md"] = await acted(pilot)

    run(picker(obj, here), act)
    short = ids["middle"][:8]
    html, md = out / f"{short}.html", out / f"{short}.md"
    assert seen["html"] == f"exported {short} to {html} ({size(html.stat().st_size)})"
    assert "<html" in html.read_text() and "kubernetes" in html.read_text()
    assert "kubernetes" in md.read_text() and "<html" not in md.read_text()
    assert seen["md"] == f"exported {short} to {md} ({size(md.stat().st_size)})"


def test_trash_refuses_a_live_session_and_says_why(short_tmp):
    """A session Claude Code holds open for writing is not trashed (as ``rm``
    refuses it): the message line says why in one line, the file stays."""
    obj, here, ids = project(None, short_tmp)
    path = main_path(obj.root, here, ids["middle"])
    with held_open(path) as holder:
        seen = {}

        async def act(pilot):
            await pilot.press("tab", "down", "d")
            await pilot.pause()
            seen["asked"] = type(pilot.app.screen).__name__
            await pilot.press("y")
            await pilot.pause()
            seen["message"] = str(pilot.app.query_one("#message").render())
            seen["ids"] = shown_ids(pilot.app)

        run(picker(obj, here), act)
    assert seen["asked"] == "ConfirmScreen"
    assert seen["message"] == (f"not trashed: live: pid {holder.pid} holds it open for writing (Claude Code?); "
                               "--force trashes it anyway")
    assert ids["middle"] in seen["ids"] and path.exists()
    assert trash_mod.entries(obj.root) == []


def test_an_action_that_fails_says_so_in_one_line(short_tmp):
    """A fork with no daemon to write it (and none allowed to start) is
    refused in one line in the message line; the picker goes on."""
    obj, here, ids = project(None, short_tmp)
    seen = {}

    async def act(pilot):
        await pilot.press("tab", "f")
        seen["message"] = await acted(pilot)
        seen["ids"] = shown_ids(pilot.app)
        regions = {w: pilot.app.query_one(w).region for w in ("#message", "#status", "Footer")}
        seen["apart"] = all(a == b or not ra.overlaps(rb) for a, ra in regions.items() for b, rb in regions.items())
        seen["heights"] = [r.height for r in regions.values()]

    run(picker(obj, here), act)
    assert seen["apart"] and seen["heights"] == [1, 1, 1]  # each line on screen, none under another
    assert seen["message"].startswith("not forked: ") and "\n" not in seen["message"]
    assert "Traceback" not in seen["message"]
    assert seen["ids"] == [ids["newest"], ids["middle"], ids["oldest"]]


def test_all_lists_this_project_first_and_at_filters_by_project(short_tmp, monkeypatch):
    """``--all``: the current directory's project first (newest first within
    each part), then every other; ``@part`` keeps one project's."""
    obj, here, ids = project(None, short_tmp)
    monkeypatch.chdir(here)
    elsewhere = str(short_tmp / "elsewhere")
    os.mkdir(elsewhere)
    other = write_session(obj.root, elsewhere, "newer than all of them", 27)
    seen = {}

    async def look(pilot):
        seen["ids"] = shown_ids(pilot.app)
        seen["projects"] = table_column(pilot.app, "project")
        await pilot.press(*"@elsew")
        seen["filtered"] = shown_ids(pilot.app)

    from sessiond.client.cli.pick_cmds import StoreActions, whole_listing
    from sessiond.client.picker.app import PickerApp

    listing = whole_listing(obj, None, True)
    run(PickerApp(listing.rows, StoreActions(obj, None, True), show_project=True, scope=listing.scope), look)
    assert seen["ids"] == [ids["newest"], ids["middle"], ids["oldest"], other]
    assert seen["projects"][0].endswith("proj") and seen["projects"][3].endswith("elsewhere")
    assert seen["filtered"] == [other]


def test_the_first_screen_is_replaced_by_the_whole_listing(short_tmp):
    """The picker opens on the first page and takes the whole listing when it
    arrives (read in a thread), the cursor still on the session it was on."""
    import threading

    from sessiond.client.cli.pick_cmds import StoreActions, first_page, whole_listing
    from sessiond.client.picker.app import PickerApp

    obj, here, ids = project(None, short_tmp)
    first = first_page(obj, here, False)
    gate = threading.Event()  # the whole listing arrives once the cursor has moved
    seen = {}

    async def look(pilot):
        await pilot.press("down")
        seen["on"] = pilot.app.selected().session.sessionId
        seen["before"] = shown_ids(pilot.app)
        seen["loading"] = str(pilot.app.query_one("#status").render())
        gate.set()
        await until(pilot, lambda: not pilot.app._loading, "the whole listing")
        seen["ids"] = shown_ids(pilot.app)
        seen["after"] = pilot.app.selected().session.sessionId
        seen["status"] = str(pilot.app.query_one("#status").render())

    app = PickerApp(first.rows[:2], StoreActions(obj, here), show_project=False, scope=first.scope,
                    more=lambda: gate.wait(60) and whole_listing(obj, here, False))  # type: ignore[return-value]
    run(app, look)
    assert seen["before"] == [ids["newest"], ids["middle"]] and "2+ sessions" in seen["loading"]
    assert seen["on"] == ids["middle"] == seen["after"]
    assert seen["ids"] == [ids["newest"], ids["middle"], ids["oldest"]]
    assert seen["status"].startswith("3 sessions · project ")
