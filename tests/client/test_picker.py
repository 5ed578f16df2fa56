"""The picker (``sessiond pick``) driven through Textual's headless pilot on a
real store: real transcript files in a temp root, a real daemon where the
path needs one (rename and trash go through it when it runs). The actions are
the commands' own (``pick_cmds.StoreActions``), so their effects are checked on
the files. Without a terminal, ``sessiond`` alone prints its usage and exits 2."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessiond.client.cli import Context
from sessiond.client.cli.pick_cmds import StoreActions, picker_rows
from sessiond.client.cli.session_list import find_sessions
from sessiond.client.picker.app import Choice, PickerApp
from sessiond.store import trash as trash_mod
from tests.conftest import DaemonProc, run_cli
from tests.helpers import assistant, line, main_path, read_entries, user

pytestmark = pytest.mark.timeout(120)


def write_session(root: Path, cwd: str, title: str, day: int, *, reply: str = "sure", mtime_day: int | None = None) -> str:
    """A two-message session whose entries are dated 2026-01-``day``; its file's
    mtime is ``mtime_day`` (default the same day): activity is the entries' time."""
    sid = str(uuid.uuid4())
    path = main_path(root, cwd, sid)
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = f"2026-01-{day:02d}T10:00:00.000Z"
    first = user(title, sessionId=sid, cwd=cwd, timestamp=stamp, parentUuid=None)
    second = assistant(reply, sessionId=sid, cwd=cwd, timestamp=stamp, parentUuid=first["uuid"])
    path.write_bytes(line(first) + b"\n" + line(second) + b"\n")
    when = 1767261600 + 86400 * ((mtime_day or day) - 1)  # 2026-01-01T10:00Z + days
    os.utime(path, (when, when))
    return sid


@pytest.fixture
def store(short_tmp: Path):
    """A store of one project (``here``) with three sessions, and another project with one."""
    root = short_tmp / "root"
    here = str(short_tmp / "proj")
    os.mkdir(here)
    ids = {
        "newest": write_session(root, here, "refactoring the parser [bold red]loud[/]", 20,
                                reply="Here is the [link=http://x]plan[/link]"),
        "middle": write_session(root, here, "fix the flaky socket test", 10),
        # the newest file (a copy made later) holds the oldest activity: the order is the entries'
        "oldest": write_session(root, here, "write the docs", 2, mtime_day=24),
        "other": write_session(root, str(short_tmp), "elsewhere entirely", 25),
    }
    obj = Context(root=root, socket=short_tmp / "run" / "none.sock", autostart=False)
    return obj, here, ids


def picker(obj: Context, cwd: str, all_projects: bool = False) -> PickerApp:
    rows = picker_rows(find_sessions(obj, None if all_projects else cwd, all_projects), show_project=all_projects)
    return PickerApp(rows, StoreActions(obj, cwd), show_project=all_projects, scope="test")


def run(app: PickerApp, steps, size=(140, 30)):
    """Run ``app`` headless and ``steps(pilot)`` in it; what the app returned."""
    async def go():
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await steps(pilot)
            await app.workers.wait_for_complete()
            await pilot.pause()
        return app.return_value

    return asyncio.run(go())


def shown_ids(app: PickerApp) -> list[str]:
    return [app.rows[i].session.sessionId for i in app.shown]


def table_column(app: PickerApp, key: str) -> list[str]:
    """One column's text over the rows the filter keeps, as the list shows them."""
    return app.column(key.upper())


def preview_text(app: PickerApp) -> str:
    return str(app.query_one("#preview").render())


async def previewed(pilot) -> str:
    """The preview once the highlighted session's file has been read into it
    (read once the cursor rests: a timer, then a worker)."""
    import time

    deadline = time.monotonic() + 60
    while "loading…" in preview_text(pilot.app) or pilot.app._preview_timer is not None:
        assert time.monotonic() < deadline, "the preview never came"
        await pilot.pause(0.05)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    return preview_text(pilot.app)


def test_an_answer_that_comes_as_the_picker_exits_changes_nothing(store):
    """A search's answer, a preview or the full listing arrives from its thread
    (``call_from_thread``), or a timer fires, after the picker's screen is gone
    (the person pressed Enter meanwhile): it finds nothing to update and raises
    nothing. It raised NoMatches on the filter, seen once in the suite under load."""
    obj, here, ids = store

    async def leave(pilot):
        await pilot.press("q")

    app = picker(obj, here)
    assert run(app, leave) is None
    row = app.rows[0]

    async def late():  # what the threads and timers hand the app after it exited
        app._found("parser", [])
        app._start_search("parser", "parser")
        app._show_preview(ids["newest"], "text")
        app._preview_rested(row)

    asyncio.run(late())


def test_lists_the_projects_sessions_newest_activity_first(store):
    obj, here, ids = store
    seen = {}

    async def look(pilot):
        seen["ids"] = shown_ids(pilot.app)
        seen["short"] = table_column(pilot.app, "id")
        seen["titles"] = table_column(pilot.app, "title")
        seen["msgs"] = table_column(pilot.app, "msgs")
        await pilot.press("q")

    app = picker(obj, here)
    assert run(app, look) is None
    assert seen["ids"] == [ids["newest"], ids["middle"], ids["oldest"]]
    assert seen["short"] == [ids[k][:8] for k in ("newest", "middle", "oldest")]
    assert seen["titles"][1] == "fix the flaky socket test"
    assert seen["titles"][0] == "refactoring the parser [bold red]loud[/]"  # markup is text
    assert seen["msgs"] == ["2", "2", "2"]


def test_all_shows_every_project_with_a_project_column(store):
    obj, here, ids = store
    seen = {}

    async def look(pilot):
        seen["ids"] = shown_ids(pilot.app)
        seen["projects"] = table_column(pilot.app, "project")

    run(picker(obj, here, all_projects=True), look)
    assert seen["ids"] == [ids["other"], ids["newest"], ids["middle"], ids["oldest"]]
    assert seen["projects"][1].endswith("proj")


def test_typing_filters_by_title_with_typos_and_by_id_prefix(store):
    obj, here, ids = store
    seen = {}

    async def type_(pilot):
        await pilot.press(*"SOCKET")
        seen["socket"] = shown_ids(pilot.app)
        await pilot.press(*["backspace"] * 6, *"refactr")  # still being typed, and a typo
        seen["typo"] = shown_ids(pilot.app)
        await pilot.press(*["backspace"] * 7, *"flakey")
        seen["flakey"] = shown_ids(pilot.app)
        await pilot.press(*["backspace"] * 6, *ids["oldest"][:6])
        seen["prefix"] = shown_ids(pilot.app)
        await pilot.press(*["backspace"] * 6, *"zzzz")
        seen["none"] = shown_ids(pilot.app)
        seen["preview"] = preview_text(pilot.app)
        await pilot.press("escape")

    assert run(picker(obj, here), type_) is None
    assert seen["socket"] == [ids["middle"]]
    assert seen["typo"] == [ids["newest"]]
    assert seen["flakey"] == [ids["middle"]]
    assert seen["prefix"] == [ids["oldest"]]
    assert seen["none"] == [] and "no session matches" in seen["preview"]


def test_the_preview_shows_the_conversation_as_plain_text(store):
    obj, here, ids = store
    seen = {}

    async def look(pilot):
        seen["first"] = await previewed(pilot)
        await pilot.press("down")
        seen["second"] = await previewed(pilot)

    run(picker(obj, here), look)
    # show's rendering; the markup in the transcript is shown as typed, not obeyed
    assert "refactoring the parser [bold red]loud[/]" in seen["first"]
    assert "Here is the [link=http://x]plan[/link]" in seen["first"]
    assert "fix the flaky socket test" in seen["second"] and "refactoring" not in seen["second"]


def test_enter_chooses_resume_and_s_chooses_show(store):
    obj, here, ids = store

    async def enter(pilot):
        await pilot.press(*"docs", "enter")

    async def show(pilot):
        await pilot.press("tab", "down", "s")

    assert run(picker(obj, here), enter) == Choice("resume", ids["oldest"])
    assert run(picker(obj, here), show) == Choice("show", ids["middle"])


def rename_and_trash(obj: Context, here: str, ids: dict):
    """Rename the middle session, then trash the newest (answering no first, then yes)."""
    seen = {}

    async def act(pilot):
        await pilot.press("tab", "down", "r")
        await pilot.pause()
        field = pilot.app.screen.query_one("Input")
        field.value = "a better [b]title[/b]"
        await pilot.press("enter")
        await pilot.pause()
        seen["titles"] = table_column(pilot.app, "title")
        await pilot.press("up", "d", "n")
        await pilot.pause()
        seen["after_no"] = shown_ids(pilot.app)
        await pilot.press("d", "y")
        await pilot.pause()
        seen["after_yes"] = shown_ids(pilot.app)
        await pilot.press("q")

    assert run(picker(obj, here), act) is None
    return seen


def test_rename_and_trash_change_the_files(store):
    obj, here, ids = store
    seen = rename_and_trash(obj, here, ids)
    assert seen["titles"][1] == "a better [b]title[/b]"
    entries = read_entries(main_path(obj.root, here, ids["middle"]))
    assert {"type": "custom-title", "customTitle": "a better [b]title[/b]", "sessionId": ids["middle"]} in entries
    assert seen["after_no"] == [ids["newest"], ids["middle"], ids["oldest"]]
    assert seen["after_yes"] == [ids["middle"], ids["oldest"]]
    assert not main_path(obj.root, here, ids["newest"]).exists()
    assert [e.session for e in trash_mod.entries(obj.root)] == [ids["newest"]]
    # list (from the files) agrees: the new title, the trashed one gone
    listed = json.loads(run_cli("--root", str(obj.root), "--socket", str(obj.socket), "list", "--cwd", here, "--json").stdout)
    assert [(s["sessionId"], s["title"]) for s in listed][:1] == [(ids["middle"], "a better [b]title[/b]")]


def test_rename_and_trash_go_through_a_running_daemon(daemon_factory, short_tmp):
    d: DaemonProc = daemon_factory().start()
    here = str(short_tmp / "proj")
    os.mkdir(here)
    ids = {"newest": write_session(d.root, here, "refactoring the parser", 20),
           "middle": write_session(d.root, here, "fix the flaky socket test", 10),
           "oldest": write_session(d.root, here, "write the docs", 2)}
    obj = Context(root=d.root, socket=d.socket, autostart=False)
    seen = rename_and_trash(obj, here, ids)
    assert seen["after_yes"] == [ids["middle"], ids["oldest"]]
    listed = json.loads(d.cli("list", "--cwd", here, "--json").stdout)  # the daemon's catalog knows both
    assert [(s["sessionId"], s["title"]) for s in listed][:1] == [(ids["middle"], "a better [b]title[/b]")]
    assert ids["newest"] not in {s["sessionId"] for s in listed}


def test_without_a_terminal_sessiond_alone_prints_usage_and_exits_2(short_tmp):
    env = {**os.environ, "SESSIOND_ROOT": str(short_tmp), "SESSIOND_SOCKET": str(short_tmp / "s.sock")}
    bare = run_cli(env=env, check=False)
    assert bare.returncode == 2 and bare.stdout == b""
    assert bare.stderr.startswith(b"Usage: sessiond [OPTIONS] [COMMAND]") and b"  pick " in bare.stderr
    assert run_cli("--help", env=env).stdout.startswith(b"Usage: sessiond")
    pick = run_cli("pick", env=env, check=False)
    assert pick.returncode == 2 and b"pick needs a terminal" in pick.stderr


def in_pty(args: list[str], env: dict, cwd: str, keys: bytes, when: bytes) -> tuple[int, bytes]:
    """Run the CLI on a real pty (140x30) in ``cwd``; once ``when`` has been
    painted, type ``keys``, again every 2 s until it exits (keys sent before the
    app reads its input are taken for the start of a terminal's reply).
    (exit status, all it wrote)."""
    import fcntl
    import pty
    import select
    import struct
    import subprocess
    import sys
    import termios
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 140, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", *args], stdin=slave, stdout=slave,
                            stderr=slave, env=env, cwd=cwd, close_fds=True)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + 90
    last = 0.0
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    out += os.read(master, 65536)
                except OSError:  # EIO: the other side closed
                    break
            if when in out and time.monotonic() - last > 2:
                os.write(master, keys)
                last = time.monotonic()
        while select.select([master], [], [], 0.5)[0]:  # what it wrote after leaving the screen
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        return proc.wait(timeout=max(1.0, deadline - time.monotonic())), bytes(out)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()


def test_sessiond_alone_on_a_terminal_opens_the_picker(store):
    obj, here, ids = store
    env = {**os.environ, "SESSIOND_ROOT": str(obj.root), "SESSIOND_SOCKET": str(obj.socket), "TERM": "xterm-256color"}
    status, out = in_pty([], env, here, b"\x1b", b"refactoring the parser")
    assert status == 0, out[-2000:]
    assert ids["newest"][:8].encode() in out


def test_pick_print_prints_the_resume_line_of_the_chosen_session(store):
    """``pick --print``: Enter leaves the picker and prints the command line
    that resumes the highlighted session (here the one the filter kept)."""
    obj, here, ids = store
    env = {**os.environ, "SESSIOND_ROOT": str(obj.root), "SESSIOND_SOCKET": str(obj.socket), "TERM": "xterm-256color"}
    status, out = in_pty(["pick", "--print"], env, here, b"docs\r", b"refactoring the parser")
    assert status == 0, out[-2000:]
    assert f"sessiond resume {ids['oldest']}".encode() in out


def test_moving_down_reaches_every_session_of_a_long_list(short_tmp):
    """The list renders only the lines on screen: paging down still reaches
    the oldest of hundreds of sessions, and the cursor stays on screen."""
    from sessiond.client.picker.app import SessionList

    n = 230
    root = short_tmp / "root"
    here = str(short_tmp / "proj")
    os.mkdir(here)
    ids = [write_session(root, here, f"session number {i}", 1 + i % 28) for i in range(n)]
    obj = Context(root=root, socket=short_tmp / "none.sock", autostart=False)
    seen = {}

    async def page(pilot):
        seen["count"] = pilot.app.query_one(SessionList).count
        await pilot.press(*["pagedown"] * (n // 10 + 2))
        await pilot.pause()
        listing = pilot.app.query_one(SessionList)
        seen["last"] = pilot.app.selected().session.sessionId
        seen["cursor"], seen["top"], seen["height"] = listing.cursor, listing.scroll_offset.y, listing.size.height

    run(picker(obj, here), page)
    assert seen["count"] == n
    assert seen["cursor"] == n - 1 and seen["top"] <= n - 1 < seen["top"] + seen["height"]
    oldest = [sid for i, sid in enumerate(ids) if 1 + i % 28 == 1]
    assert seen["last"] in oldest


def test_no_command_but_pick_imports_textual():
    """Every command module imported (what ``--help`` and completion do)
    leaves Textual unimported: only running ``pick`` pays for it."""
    import subprocess
    import sys

    code = ("import sys, click; from sessiond.client.cli.group import cli; ctx = click.Context(cli); "
            "[cli.get_command(ctx, n) for n in cli.list_commands(ctx)]; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'sessiond') and 'picker' in m or m == 'textual'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=60).stdout
    assert out == b"[]\n"


def test_a_project_without_sessions_opens_on_every_project(store, short_tmp):
    obj, here, ids = store
    empty = short_tmp / "empty"
    empty.mkdir()
    env = {**os.environ, "SESSIOND_ROOT": str(obj.root), "SESSIOND_SOCKET": str(obj.socket), "TERM": "xterm-256color"}
    status, out = in_pty(["pick", "--print"], env, str(empty), b"elsewhere\r", b"refactoring the parser")
    assert status == 0, out[-2000:]
    assert f"sessiond resume {ids['other']}".encode() in out


@contextlib.contextmanager
def held_open(path: Path) -> Iterator[subprocess.Popen]:
    """Another process of this user holding ``path`` open for writing (as
    Claude Code holds the transcript it writes), until the block ends."""
    with subprocess.Popen([sys.executable, "-c", "import os, sys; fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND); "
                           "print('held', flush=True); sys.stdin.read()", str(path)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
            yield holder
        finally:
            holder.kill()
            holder.wait(timeout=10)


def test_a_session_another_process_writes_is_marked_live(store):
    """A session a process of this user holds open for writing (Claude Code
    writing it right now) is marked live with that process's pid, as ``list`` does."""
    obj, here, ids = store
    with held_open(main_path(obj.store_root(), here, ids["middle"])) as holder:
        seen = {}

        async def look(pilot):
            seen["titles"] = dict(zip(shown_ids(pilot.app), table_column(pilot.app, "title")))
            await pilot.press("down")
            seen["preview"] = await previewed(pilot)

        run(picker(obj, here), look)
    titles = seen["titles"]
    assert titles[ids["middle"]] == "● fix the flaky socket test"
    assert not titles[ids["newest"]].startswith("●") and not titles[ids["oldest"]].startswith("●")
    assert f"live: pid {holder.pid} writes this session right now" in seen["preview"]


def test_the_preview_starts_with_the_sessions_tokens_and_cost(short_tmp):
    """The highlighted session's tokens and cost head the preview: the figures
    ``sessiond usage session`` reports for it (the corpus session of two
    models and a subagent), as ``show``'s header words them."""
    from sessiond.store.spend import charges, prices, reports
    from tests.spend.tree import build

    root = short_tmp / "root"
    projects = build(root)
    sid = "a7da6a22-facc-4fcd-8bab-f83c87862004"
    row = next(r for r in reports.sessions(charges.load(projects).charges, reports.Pricer(prices.Prices.load()), None)
               if r.key == sid)
    assert (row.input_tokens, row.output_tokens, row.cache_read_tokens, row.cache_creation_tokens) \
        == (3119, 32270, 8629528, 216690) and f"{row.cost:.2f}" == "6.21"
    obj = Context(root=root, socket=short_tmp / "run" / "none.sock", autostart=False)
    seen = {}

    async def look(pilot):
        for key in sid[:8]:
            await pilot.press(key)
        seen["preview"] = (await previewed(pilot)).splitlines()
        seen["ids"] = shown_ids(pilot.app)

    run(picker(obj, str(short_tmp), all_projects=True), look)
    assert seen["ids"] == [sid]
    assert seen["preview"][0] == "tokens 3.1k in · 32.3k out · 8.6M cache read · 217k cache write · $6.21"
    assert re.match(r"… \d+ earlier lines", seen["preview"][1])  # first though the conversation's head is cut
