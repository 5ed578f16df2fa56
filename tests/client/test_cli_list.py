"""``list`` for a person: a header row, a message count, the entries' own
times (an old session copied in today does not say "just now"), columns that
fit the terminal (the title is cut, never the id), the project with ``--all``."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from tests.conftest import DaemonProc
from tests.helpers import assistant, line, main_path, user

CWD = "/home/dev/listing-project"
OTHER = "/home/dev/another-project"
LONG = "Please refactor the whole parser module so that every error path is typed and tested " * 3


def old_session(daemon: DaemonProc, cwd: str, title: str) -> str:
    """A 2025 conversation, written today (its mtime is now)."""
    sid = str(uuid.uuid4())
    stamp = {"u1": "2025-03-02T10:00:00.000Z", "a1": "2025-03-02T10:01:00.000Z", "u2": "2025-03-04T09:30:00.000Z"}
    entries = [user(title, "u1", parentUuid=None), assistant("on it", "a1", parentUuid="u1"), user("and tests", "u2", parentUuid="a1")]
    for e in entries:
        e["timestamp"] = stamp[e["uuid"]]
        e["cwd"] = cwd
    daemon.cli("append", "--cwd", cwd, "--session", sid, "--durability", "written",
               input=b"".join(line(e) + b"\n" for e in entries))
    return sid


@pytest.mark.parametrize("through", ["daemon", "files"])
def test_list_has_a_header_counts_and_the_entries_own_times(daemon: DaemonProc, through):
    sid = old_session(daemon, CWD, "fix the parser")
    env = {"TZ": "UTC", "COLUMNS": "160"}
    if through == "files":
        daemon.stop()
    args = ["--no-autostart", "list", "--cwd", CWD]
    rows = daemon.cli(*args, env=env).stdout.decode().splitlines()
    assert rows[0].split() == ["TITLE", "MSGS", "CREATED", "ACTIVE", "SIZE", "TOKENS", "COST", "BRANCH", "ID"]
    assert rows[1].split()[:3] == ["fix", "the", "parser"] and rows[1].endswith(sid[:8])
    cells = rows[1].split()
    assert cells[3] == "3" and cells[4:8] == ["2025-03-02", "10:00", "2025-03-04", "09:30"], rows[1]
    assert "just now" not in rows[1] and "ago" not in rows[1]
    js = json.loads(daemon.cli(*args, "--json", env=env).stdout)
    assert js[0]["lastEntryAt"] == "2025-03-04T09:30:00.000Z" and js[0]["messageCount"] == 3
    assert js[0]["createdAt"] == "2025-03-02T10:00:00.000Z"  # --json stays ISO-8601 UTC
    tokyo = daemon.cli(*args, env={**env, "TZ": "Asia/Tokyo"}).stdout.decode().splitlines()[1].split()
    assert tokyo[4:8] == ["2025-03-02", "19:00", "2025-03-04", "18:30"]


@pytest.mark.parametrize("columns", [60, 80, 120, 200])
def test_list_fits_the_terminal_by_cutting_titles_not_the_table(daemon: DaemonProc, columns):
    sids = [old_session(daemon, CWD, LONG), old_session(daemon, OTHER, "short one")]
    for args in (["list", "--cwd", CWD], ["list", "--all"]):
        rows = daemon.cli(*args, env={"COLUMNS": str(columns), "TZ": "UTC"}).stdout.decode().splitlines()
        assert rows[0].startswith("TITLE")
        assert all(len(r) <= columns for r in rows), (columns, [len(r) for r in rows])
        assert any(r.endswith(sids[0][:8]) and "…" in r for r in rows)  # the long title cut, the id whole
        if args[-1] == "--all" and columns >= 160:
            assert "PROJECT" in rows[0] and any("~" in r or "/home/dev/another-project" in r for r in rows)
    piped = daemon.cli("list", "--cwd", CWD, env={"COLUMNS": "", "TZ": "UTC"}).stdout.decode().splitlines()
    title = json.loads(daemon.cli("list", "--cwd", CWD, "--json").stdout)[0]["title"]
    assert len(title) > 150 and piped[1].startswith(title + " ")  # into another program: whole rows

    wide = daemon.cli("list", "--all", env={"COLUMNS": "220", "TZ": "UTC", "HOME": "/home/dev"}).stdout.decode().splitlines()
    assert "PROJECT" in wide[0]
    assert any("~/another-project" in r and r.endswith(sids[1][:8]) for r in wide), wide


def test_list_of_a_session_written_by_another_program_keeps_its_times(daemon: DaemonProc):
    """The catalog re-reads a file another writer changed: ACTIVE follows."""
    sid = old_session(daemon, CWD, "foreign")
    path = main_path(daemon.root, CWD, sid)
    later = assistant("written by hand", "a9", parentUuid="u2") | {"timestamp": "2025-05-01T12:00:00.000Z"}
    with open(path, "ab") as f:
        f.write(line(later) + b"\n")
    row = daemon.cli("list", "--cwd", CWD, env={"TZ": "UTC", "COLUMNS": "200"}).stdout.decode().splitlines()[1]
    assert "2025-05-01 12:00" in row


def _cells(text: str) -> int:
    """Terminal cells as a terminal draws them (wcwidth's rule for these titles)."""
    import unicodedata

    return sum(0 if unicodedata.combining(c) or unicodedata.category(c) in ("Mn", "Me", "Cf")
               else 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in text)


CJK = ["修复解析器中的错误并添加测试用例以覆盖所有边界情况和异常路径", "日本語のタイトルをテストする：かなカナ漢字まじり文",
       "emoji 🎉🚀 party with é́ combining marks", "short"]


@pytest.mark.parametrize("columns", [70, 100])
def test_list_aligns_wide_titles_by_terminal_cells(daemon: DaemonProc, columns):
    """A Chinese or Japanese character takes 2 cells: the columns after the
    title start at one cell in every row, no row passes the terminal, and a cut
    never splits a wide character."""
    sids = [old_session(daemon, CWD, t) for t in CJK]
    rows = daemon.cli("list", "--cwd", CWD, env={"COLUMNS": str(columns), "TZ": "UTC"}).stdout.decode().splitlines()
    assert all(_cells(r) <= columns for r in rows), [(_cells(r), r) for r in rows]
    at = {_cells(r[: r.index(sid[:8])]) for r in rows[1:] for sid in sids if sid[:8] in r}
    assert len(at) == 1 and _cells(rows[0][: rows[0].index("ID")]) in at, rows  # the ID column lines up
    msgs = {_cells(r[: r.index("  3  ")]) for r in rows[1:]}
    assert len(msgs) == 1, rows  # and so does every column before it
    cut = [r for r in rows if "…" in r]
    assert cut and all("\ufffd" not in r for r in rows)
    assert any(r.startswith("修复解析器") for r in cut) and any(r.startswith("日本語") for r in cut)


def test_list_refuses_cwd_with_all_and_takes_a_relative_cwd_like_append(daemon: DaemonProc, short_tmp):
    r = daemon.cli("list", "--all", "--cwd", CWD, check=False)
    assert r.returncode == 2 and r.stdout == b"" and b"--cwd and --all exclude each other" in r.stderr, r.stderr
    (short_tmp / "proj").mkdir()
    sid = str(uuid.uuid4())

    def cli(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sessiond.client.cli", *args], cwd=short_tmp, env=daemon.env,
                              input=input, capture_output=True, timeout=60, check=True)

    cli("append", "--cwd", "proj", "--session", sid, "--durability", "written", input=line(user("relative")) + b"\n")
    listed = json.loads(cli("list", "--cwd", "proj", "--json").stdout)
    assert [s["sessionId"] for s in listed] == [sid]
    assert main_path(daemon.root, str(short_tmp / "proj"), sid).exists()


def test_piped_list_cuts_no_branch_or_project(daemon: DaemonProc):
    branch = "feature/a-very-long-branch-name-that-is-longer-than-twenty"
    deep = "/home/dev/" + "/".join(["nested-directory"] * 4) + "/project"
    sid = str(uuid.uuid4())
    daemon.cli("append", "--cwd", deep, "--session", sid, "--durability", "written",
               input=line(user("branchy", cwd=deep, gitBranch=branch)) + b"\n")
    piped = daemon.cli("list", "--all", env={"COLUMNS": ""}).stdout.decode()
    assert branch in piped and deep in piped, piped
    narrow = daemon.cli("list", "--all", env={"COLUMNS": "200"}).stdout.decode()
    assert branch not in narrow and "…" in narrow  # a terminal still gets the table that fits


@pytest.mark.parametrize("command", [["list"], ["search", "anything"], ["reindex"], ["du"], ["prune", "--dry-run"]])
def test_every_command_of_a_scope_refuses_cwd_with_all(daemon: DaemonProc, command):
    """--cwd and --all name two scopes: refused alike by every command that takes
    both, not --cwd silently dropped (search, reindex, du and prune did)."""
    r = daemon.cli(*command, "--all", "--cwd", CWD, check=False)
    assert r.returncode == 2 and r.stdout == b"", r
    assert r.stderr.decode() == "sessiond: --cwd and --all exclude each other: --all means every project, --cwd one\n"
