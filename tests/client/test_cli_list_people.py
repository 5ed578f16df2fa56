"""``list`` as a person wants it (issue 30): most recently active first by the
entries' own time, and that time shown; an 8-character id every command takes;
the title in the terminal's width; a message count for every session, big ones
too; tags shown and filtered; long output through the pager. Through a real
daemon and, with it stopped, from the files."""

from __future__ import annotations

import json
import os
import sys
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from tests.conftest import DaemonProc
from tests.helpers import assistant, in_terminal, line, main_path, user

ENV = {"TZ": "UTC", "COLUMNS": "120"}


def session(daemon: DaemonProc, cwd: str, title: str, stamps: list[str], *, body: str = "on it") -> str:
    """A conversation whose entries carry ``stamps`` (user, assistant, ...),
    written through the daemon now."""
    sid = str(uuid.uuid4())
    entries, parent = [], None
    for i, stamp in enumerate(stamps):
        uid = f"e{i}"
        e = (user(title, uid, parentUuid=parent) if i % 2 == 0 else assistant(body, uid, parentUuid=parent))
        e["timestamp"], e["cwd"] = stamp, cwd
        entries.append(e)
        parent = uid
    daemon.cli("append", "--cwd", cwd, "--session", sid, "--durability", "written",
               input=b"".join(line(e) + b"\n" for e in entries))
    return sid


def set_mtime(daemon: DaemonProc, cwd: str, sid: str, iso: str) -> None:
    t = datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    os.utime(main_path(daemon.root, cwd, sid), (t, t))


def cli(daemon: DaemonProc, through: str, *args: str, env: dict | None = None, check: bool = True):
    return daemon.cli("--no-autostart", *args, env={**ENV, **(env or {})}, check=check)


@pytest.mark.parametrize("through", ["daemon", "files"])
def test_the_most_recently_active_session_comes_first_and_shows_its_time(daemon: DaemonProc, through):
    """A copied-in old conversation (mtime today, entries from March) comes
    after one active in June, whose file is older: the order and the ACTIVE
    column are both the entries' time, not the mtime."""
    cwd = f"/home/dev/active-{through}"
    june = session(daemon, cwd, "active in june", ["2025-06-01T08:00:00.000Z", "2025-06-01T08:05:00.000Z"])
    set_mtime(daemon, cwd, june, "2025-06-02T00:00:00.000Z")
    march = session(daemon, cwd, "copied in today", ["2025-03-04T09:00:00.000Z", "2025-03-04T09:30:00.000Z"])
    if through == "files":
        daemon.stop()
    listed = json.loads(cli(daemon, through, "list", "--cwd", cwd, "--json").stdout)
    assert [s["sessionId"] for s in listed] == [june, march]
    page = json.loads(cli(daemon, through, "list", "--cwd", cwd, "--json", "--limit", "1").stdout)
    assert [s["sessionId"] for s in page] == [june]
    page2 = json.loads(cli(daemon, through, "list", "--cwd", cwd, "--json", "--limit", "1", "--offset", "1").stdout)
    assert [s["sessionId"] for s in page2] == [march]
    rows = cli(daemon, through, "list", "--cwd", cwd).stdout.decode().splitlines()
    assert "ACTIVE" in rows[0].split()
    at = rows[0].index("ACTIVE")
    assert rows[1].startswith("active in june") and rows[1][at:].startswith("2025-06-01 08:05"), rows
    assert rows[2].startswith("copied in today") and rows[2][at:].startswith("2025-03-04 09:30"), rows


@pytest.mark.parametrize("through", ["daemon", "files"])
def test_a_short_id_that_show_takes_and_the_title_in_the_width(daemon: DaemonProc, through):
    cwd = f"/home/dev/short-{through}"
    title = "Refactor the listing for people now"  # 35 characters: cut at 25 with the 36-character id
    sid = session(daemon, cwd, title, ["2025-06-01T08:00:00.000Z", "2025-06-01T08:05:00.000Z"])
    if through == "files":
        daemon.stop()
    rows = cli(daemon, through, "list", "--cwd", cwd).stdout.decode().splitlines()
    assert rows[1].startswith(title + "  "), rows  # whole in 120 columns: the id no longer takes 36 of them
    assert rows[1].split()[-1] == sid[:8] and sid not in rows[1]
    shown = cli(daemon, through, "show", "--no-pager", sid[:8]).stdout.decode()
    assert title in shown
    assert json.loads(cli(daemon, through, "list", "--cwd", cwd, "--json").stdout)[0]["sessionId"] == sid  # whole in JSON


@pytest.mark.parametrize("through", ["daemon", "files"])
def test_a_big_session_without_claude_codes_count_has_its_messages_counted(daemon: DaemonProc, through):
    """Past the 64 KB head window with no ``turn_duration`` in the tail, the
    lite read cannot say: the file is counted, for the page."""
    cwd = f"/home/dev/big-{through}"
    stamps = [f"2025-06-01T08:0{i}:00.000Z" for i in range(5)]
    sid = session(daemon, cwd, "big one", stamps, body="x" * 40_000)
    assert main_path(daemon.root, cwd, sid).stat().st_size > 64 * 1024
    if through == "files":
        daemon.stop()
    listed = json.loads(cli(daemon, through, "list", "--cwd", cwd, "--json").stdout)
    assert listed[0]["messageCount"] == 5
    rows = cli(daemon, through, "list", "--cwd", cwd).stdout.decode().splitlines()
    assert rows[1].split()[2] == "5", rows  # "big one" then MSGS


@pytest.mark.parametrize("through", ["daemon", "files"])
def test_tags_are_shown_and_filter(daemon: DaemonProc, through):
    cwd = f"/home/dev/tagged-{through}"
    kept = session(daemon, cwd, "tagged one", ["2025-06-01T08:00:00.000Z", "2025-06-01T08:05:00.000Z"])
    other = session(daemon, cwd, "plain one", ["2025-06-02T08:00:00.000Z", "2025-06-02T08:05:00.000Z"])
    daemon.cli("tag", kept, "review")
    if through == "files":
        daemon.stop()
    rows = cli(daemon, through, "list", "--cwd", cwd).stdout.decode().splitlines()
    assert "TAG" in rows[0].split()
    at = rows[0].index("TAG")
    assert [r[at:].split()[0] for r in rows[1:]] == [other[:8], "review"] or \
        [r[at:at + 6] for r in rows[1:]] == ["      ", "review"], rows
    only = json.loads(cli(daemon, through, "list", "--cwd", cwd, "--tag", "review", "--json").stdout)
    assert [(s["sessionId"], s["tag"]) for s in only] == [(kept, "review")]
    people = cli(daemon, through, "list", "--cwd", cwd, "--tag", "review").stdout.decode().splitlines()
    assert len(people) == 2 and people[1].startswith("tagged one")
    assert json.loads(cli(daemon, through, "list", "--cwd", cwd, "--tag", "review", "--limit", "1", "--json").stdout)[0]["sessionId"] == kept
    none = cli(daemon, through, "list", "--cwd", cwd, "--tag", "nothing")
    assert none.stdout == b"" and b"tagged nothing" in none.stderr


def pager(short_tmp: Path) -> tuple[str, Path]:
    """A $PAGER that keeps what it was given."""
    got = short_tmp / "paged.txt"
    script = short_tmp / "pager.py"
    script.write_text(f"import sys\nopen({str(got)!r}, 'wb').write(sys.stdin.buffer.read())\n")
    return f"{sys.executable} {script}", got


def test_a_long_list_goes_through_the_pager_on_a_terminal(daemon: DaemonProc, short_tmp):
    cwd = "/home/dev/paged"
    sids = [session(daemon, cwd, f"conversation {i}", [f"2025-06-0{i + 1}T08:00:00.000Z"]) for i in range(8)]
    cmd, got = pager(short_tmp)
    env = {**daemon.env, "PAGER": cmd, "TERM": "xterm", "TZ": "UTC"}
    status, out = in_terminal(["list", "--cwd", cwd], env, rows=5)
    assert status == 0 and got.exists(), out[-500:]
    paged = got.read_text().splitlines()
    assert paged[0].startswith("TITLE") and len(paged) == 9 and paged[1].startswith("conversation 7")
    assert paged[1].rstrip().endswith(sids[7][:8])
    got.unlink()
    for args in (["--no-pager"], ["--json"]):
        status, out = in_terminal(["list", "--cwd", cwd, *args], env, rows=5)
        assert status == 0 and not got.exists() and b"conversation 7" in out, args
    status, out = in_terminal(["list", "--cwd", cwd], env, rows=40)  # fits the screen: not paged
    assert status == 0 and not got.exists() and b"conversation 7" in out


@pytest.mark.parametrize("through", ["daemon", "files"])
def test_a_fork_says_where_it_came_from(daemon: DaemonProc, through):
    cwd = f"/home/dev/forked-{through}"
    origin = session(daemon, cwd, "the original", ["2025-06-01T08:00:00.000Z", "2025-06-01T08:05:00.000Z"])
    fork = daemon.cli("fork", origin, "--cwd", cwd).stdout.decode().strip()
    again = json.loads(daemon.cli("fork", fork, "--cwd", cwd, "--json").stdout)["sessionId"]  # a fork of the fork
    if through == "files":
        daemon.stop()
    listed = {s["sessionId"]: s for s in json.loads(cli(daemon, through, "list", "--cwd", cwd, "--json").stdout)}
    assert {sid: s["forkedFrom"] for sid, s in listed.items()} == {origin: None, fork: origin, again: fork}
    rows = cli(daemon, through, "list", "--cwd", cwd).stdout.decode().splitlines()
    assert "FORK" in rows[0].split()
    row = {r.split()[-1]: r for r in rows[1:]}
    assert f"⑂ {origin[:8]}" in row[fork[:8]] and f"⑂ {fork[:8]}" in row[again[:8]]
    assert "⑂" not in row[origin[:8]]


PRICES = Path(__file__).resolve().parents[2] / "sessiond/store/spend/prices.json"


def response(n: int, sid: str, cwd: str, model: str, inp: int, out: int, parent: str | None) -> dict:
    return {"type": "assistant", "uuid": f"r{n}-{uuid.uuid4()}", "parentUuid": parent, "sessionId": sid, "cwd": cwd,
            "timestamp": f"2025-06-01T08:0{n}:00.000Z", "version": "2.1.0", "requestId": f"req_list_{sid}_{n}",
            "message": {"id": f"msg_list_{sid}_{n}", "role": "assistant", "model": model,
                        "content": [{"type": "text", "text": "done"}],
                        "usage": {"input_tokens": inp, "output_tokens": out, "cache_creation_input_tokens": 0,
                                  "cache_read_input_tokens": 0}}}


@pytest.mark.parametrize("through", ["daemon", "files"])
def test_tokens_and_cost_per_session_by_the_usage_rules(daemon: DaemonProc, through):
    """Two priced responses (one written as two lines, counted once) and one of
    a model no price table knows: its tokens counted, its cost not, and said."""
    cwd = f"/home/dev/spend-{through}"
    sid, idle = str(uuid.uuid4()), session(daemon, cwd, "no responses", ["2025-05-01T08:00:00.000Z"])
    first = response(1, sid, cwd, "claude-sonnet-4-5-20250929", 100_000, 10_000, "u0")
    twice = {**first, "uuid": str(uuid.uuid4()), "parentUuid": first["uuid"]}  # the same response's second block
    second = response(2, sid, cwd, "claude-sonnet-4-5-20250929", 200_000, 10_000, twice["uuid"])
    odd = response(3, sid, cwd, "claude-imaginary-9", 5_000, 1_000, second["uuid"])
    prompt = user("spend some tokens", "u0", parentUuid=None) | {"timestamp": "2025-06-01T08:00:00.000Z", "cwd": cwd}
    daemon.cli("append", "--cwd", cwd, "--session", sid, "--durability", "written",
               input=b"".join(line(e) + b"\n" for e in (prompt, first, twice, second, odd)))
    if through == "files":
        daemon.stop()
    rate = json.loads(PRICES.read_text())["models"]["claude-sonnet-4-5-20250929"]
    cost = 300_000 * rate["input"] + 20_000 * rate["output"]
    listed = {s["sessionId"]: s for s in json.loads(cli(daemon, through, "list", "--cwd", cwd, "--json").stdout)}
    got = listed[sid]
    assert got["tokens"] == 300_000 + 20_000 + 6_000
    assert got["costUSD"] == pytest.approx(cost) and got["unpricedModels"] == ["claude-imaginary-9"]
    assert (listed[idle]["tokens"], listed[idle]["costUSD"], listed[idle]["unpricedModels"]) == (0, 0.0, [])
    rows = cli(daemon, through, "list", "--cwd", cwd).stdout.decode().splitlines()
    assert rows[0].split()[5:7] == ["TOKENS", "COST"], rows[0]
    row = next(r for r in rows if r.startswith("spend some tokens"))
    assert f" 326k  ${cost:.2f}? " in row, row
