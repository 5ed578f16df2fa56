"""Issue 30's "one voice", through the real CLI, against a real daemon and
with none: every command names a session by its title and a project by its
cwd, shows a time one way, takes durations one way (months and years too),
refuses a bad value in one ``sessiond: <what>: <why>`` line with exit 2 in
text and ``--json`` mode alike, says what to do when it finds nothing, and
names the command or option meant for a mistyped one."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sessiond.store.paths import project_dir
from sessiond.wire.durations import parse_duration
from tests.conftest import DaemonProc
from tests.helpers import assistant, line, main_path, user

CWD = "/home/dev/voice-app"
OTHER = "/home/dev/voice-other"
FOLDER = project_dir(Path("/"), CWD).name  # the project dir's encoded name, "-home-dev-voice-app"
MARCH = "2025-03-04T09:30:00.000Z"
TOKYO = {"TZ": "Asia/Tokyo"}  # UTC+9, no daylight saving


def seed(d: DaemonProc, cwd: str, title: str, stamp: str | None = None) -> str:
    """A session whose title is its first prompt; ``stamp``: an old
    conversation, its entries of that time and its file last written then
    (imported, as a copied-in old transcript is: the import keeps the mtime,
    which the daemon's catalog then knows), else one written now."""
    sid = str(uuid.uuid4())
    entries = [user(title, "u1", parentUuid=None, cwd=cwd, sessionId=sid),
               assistant("on it", "a1", parentUuid="u1", cwd=cwd, sessionId=sid)]
    for e in entries:
        e["timestamp"] = stamp or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    data = b"".join(line(e) + b"\n" for e in entries)
    if stamp is None:
        d.cli("append", "--cwd", cwd, "--session", sid, "--durability", "written", input=data)
        return sid
    source = d.base / f"{sid}.jsonl"
    source.write_bytes(data)
    t = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    os.utime(source, (t, t))
    d.cli("import", str(source))
    assert main_path(d.root, cwd, sid).stat().st_mtime == t
    return sid


@pytest.fixture(params=["daemon", "files"])
def through(request, daemon_factory):
    """(the daemon, how to run the CLI): against the running daemon, or with
    it stopped (``--no-autostart``: the files read and moved directly)."""
    d = daemon_factory().start()

    def cli(*args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
        if request.param == "files" and d.proc is not None and d.proc.poll() is None:
            d.stop()
        return d.cli("--no-autostart", *args, check=check, env=env)

    return d, cli


# -- bad values: one line, exit 2, text and --json alike -------------------------------------------

REFUSED = [
    (["list", "--limit", "x"], "sessiond: --limit: 'x' is not a valid integer range"),
    (["prune", "--older-than", "30", "--dry-run"], "sessiond: --older-than: not a duration: '30' (a number needs a unit"),
    (["prune", "--larger-than", "lots", "--dry-run"], "sessiond: --larger-than: not a size: 'lots'"),
    (["trash", "empty", "--older-than", "1q", "--dry-run"], "sessiond: --older-than: not a duration: '1q'"),
    (["du", "--all", "--cwd", CWD], "sessiond: --cwd and --all exclude each other"),
    (["search", "word", "--since", "30"], "sessiond: --since: '30' (a number needs a unit)"),
    (["usage", "--since", "2026"], "sessiond: --since: not a day: '2026'"),
    (["show", "abc"], "sessiond: session id prefix 'abc' is too short"),
]


@pytest.mark.parametrize("args, said", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_a_bad_value_is_one_line_and_exit_2_in_text_and_json(through, args, said):
    d, cli = through
    for mode in ([], ["--json"]):
        r = cli(*args, *mode, check=False)
        err = r.stderr.decode()
        assert r.returncode == 2 and r.stdout == b"", (mode, r.returncode, err)
        assert len(err.splitlines()) == 1 and err.startswith(said), (mode, err)


@pytest.mark.parametrize("args", [["search", "nothing-matches-this-zzq", "--all"], ["show", "0000aaaa"],
                                  ["rm", "0000aaaa"], ["restore", "0000aaaa"], ["list", "--cwd", "/nowhere/at/all"]],
                         ids=lambda a: " ".join(a))
def test_json_and_text_exit_alike(through, args):
    """A script reading --json sees the exit a person sees: no match is 1 in
    both (search's --json said 0), a missing session 1, an empty list 0."""
    d, cli = through
    seed(d, CWD, "something to search")
    text, js = cli(*args, check=False), cli(*args, "--json", check=False)
    assert text.returncode == js.returncode, (text.stderr, js.stderr)


def test_a_mistyped_command_or_option_names_the_one_meant(through):
    d, cli = through
    for args, said in ((["lsit"], "sessiond: lsit: no such command; did you mean: list"),
                       (["trash", "emty"], "sessiond: emty: no such command; did you mean: empty"),
                       (["list", "--lmit", "3"], "sessiond: --lmit: no such option; did you mean: --limit"),
                       (["zzqqxx"], "sessiond: zzqqxx: no such command; `sessiond --help` lists the commands")):
        r = cli(*args, check=False)
        assert r.returncode == 2 and r.stderr.decode() == said + "\n" and r.stdout == b"", (args, r.stderr)


# -- durations -------------------------------------------------------------------------------------

def test_one_duration_parser_with_months_and_years():
    assert parse_duration("45s") == 45 and parse_duration("1.5h") == 5400 and parse_duration("2w") == 14 * 86400
    assert parse_duration("3mo") == 90 * 86400 and parse_duration("1y") == 365 * 86400 and parse_duration(" 2 Y ") == 730 * 86400
    for bad, why in (("30", "needs a unit"), ("1x", "give e.g."), ("-1d", "give e.g."), ("mo", "give e.g."),
                     ("1e9y", "give e.g."), ("99999y", "a thousand years")):
        with pytest.raises(ValueError, match=why):
            parse_duration(bad)


def test_every_duration_option_takes_months_and_years(through):
    d, cli = through
    old = seed(d, CWD, "an old conversation", MARCH)
    new = seed(d, CWD, "a new conversation")
    # search while the daemon runs (its index has both; one stopped right after a write may not have it yet)
    hits = json.loads(d.cli("search", "conversation", "--cwd", CWD, "--since", "1mo", "--json").stdout)
    assert {h["sessionId"] for h in hits} == {new}, hits  # entries since a month ago: the new one's
    hits = json.loads(d.cli("search", "conversation", "--cwd", CWD, "--since", "3y", "--json").stdout)
    assert {h["sessionId"] for h in hits} == {old, new}, hits

    def pruned(age: str) -> set[str]:
        out = json.loads(cli("prune", "--cwd", CWD, "--older-than", age, "--dry-run", "--json").stdout)
        return {s["sessionId"] for s in out["sessions"]}

    assert pruned("3mo") == pruned("1y") == {old} and pruned("100y") == set() and new not in pruned("1d")
    assert cli("trash", "empty", "--older-than", "1y", "--dry-run", "--json").returncode == 0
    assert json.loads(cli("usage", "--cwd", CWD, "--since", "2y", "--until", "1mo", "--json").stdout)["report"] == "daily"


# -- titles, projects, dates -----------------------------------------------------------------------

def test_every_listing_names_sessions_by_title_and_projects_by_cwd(through):
    d, cli = through
    sid = seed(d, CWD, "voice parser work")
    seed(d, OTHER, "another thing")
    title, project = "“voice parser work”", f"({CWD})"
    outputs = {
        "du": cli("du", "--cwd", CWD).stdout.decode(),
        "du --all": cli("du", "--all").stdout.decode(),
        "prune --dry-run": cli("prune", "--cwd", CWD, "--older-than", "0s", "--dry-run").stdout.decode(),
        "rm": cli("rm", sid, "--cwd", CWD).stdout.decode(),
        "trash": cli("trash").stdout.decode(),
        "trash empty --dry-run": cli("trash", "empty", "--dry-run").stdout.decode(),
    }
    for what, out in outputs.items():
        row = next((r for r in out.splitlines() if sid in r), "")
        assert title in row, (what, out)
        assert FOLDER not in out, (what, out)  # never the encoded folder name
        assert CWD in row or what == "du", (what, out)  # du --cwd lists one project: its line above says it
    assert f"  {CWD}\n" in outputs["du"] and project in outputs["du --all"] and f"  {OTHER}\n" in outputs["du --all"]
    restored = cli("restore", sid).stdout.decode()
    assert restored.startswith(f"restored {sid}  {title}") and project in restored.splitlines()[0], restored


def test_every_listing_shows_a_time_the_same_way(through):
    """Recent: how long ago; older: the local date and time (TZ); --json: ISO-8601 with its zone."""
    d, cli = through
    old = seed(d, CWD, "from march", MARCH)
    new = seed(d, CWD, "from today")
    listed = cli("list", "--cwd", CWD, env={**TOKYO, "COLUMNS": "200"}).stdout.decode().splitlines()
    du = cli("du", "--cwd", CWD, env=TOKYO).stdout.decode().splitlines()
    prune = cli("prune", "--cwd", CWD, "--older-than", "0s", "--dry-run", env=TOKYO).stdout.decode().splitlines()
    for what, rows in (("list", listed), ("du", du), ("prune", prune)):
        old_row = next(r for r in rows if old[:8] in r)
        new_row = next(r for r in rows if new[:8] in r)
        assert "2025-03-04 18:30" in old_row, (what, old_row)
        assert "just now" in new_row or "m ago" in new_row, (what, new_row)
    js = json.loads(cli("du", "--cwd", CWD, "--json").stdout)
    stamp = next(s["lastWrite"] for s in js["sessions"] if s["sessionId"] == old)
    assert datetime.fromisoformat(stamp.replace("Z", "+00:00")) == datetime(2025, 3, 4, 9, 30, tzinfo=UTC), stamp
    assert stamp.endswith("Z")


# -- nothing to show -------------------------------------------------------------------------------

def test_nothing_here_says_what_all_would_show(through):
    d, cli = through
    seed(d, CWD, "one")
    seed(d, OTHER, "two")
    seed(d, OTHER, "three")
    empty = "/home/dev/nothing-here"
    for args, said in ((["list"], f"no sessions in {empty}; --all shows 3 sessions in 2 projects"),
                       (["du"], f"no sessions in {empty}; --all shows 3 sessions in 2 projects"),
                       (["prune", "--dry-run"], f"no sessions in {empty}; --all shows 3 sessions in 2 projects"),
                       (["search", "three"], f"no matches in {empty}; --all searches 3 sessions in 2 projects"),
                       (["secrets"], f"no transcripts in {empty}; --all scans 3 sessions in 2 projects")):
        r = cli(*args, "--cwd", empty, check=False)
        assert said in r.stderr.decode().splitlines(), (args, r.stderr)


def test_an_empty_store_points_at_the_sessions_not_imported(through, short_tmp):
    d, cli = through
    claude = short_tmp / "claude"
    for folder, n in (("-home-dev-a", 2), ("-home-dev-b", 1)):
        (claude / "projects" / folder).mkdir(parents=True)
        for _ in range(n):
            (claude / "projects" / folder / f"{uuid.uuid4()}.jsonl").write_bytes(line(user("hello")) + b"\n")
    env = {"CLAUDE_CONFIG_DIR": str(claude)}
    r = cli("list", "--cwd", CWD, env=env)
    assert r.stderr.decode() == (f"no sessions in {CWD}; {claude}/projects holds 3 sessions not imported yet: "
                                 "sessiond import\n"), r.stderr
    assert b"not imported yet" in cli("list", "--all", env=env).stderr
    bare = cli("list", "--all", env={"CLAUDE_CONFIG_DIR": str(short_tmp / "none")}).stderr.decode()
    assert bare.startswith("no sessions; the store is empty") and "sessiond import" in bare, bare


# -- status, completion ----------------------------------------------------------------------------

def test_status_shows_the_read_pool_memory_and_the_index(daemon: DaemonProc):
    seed(daemon, CWD, "index me")
    out = daemon.cli("--timeout", "2m", "status").stdout.decode()  # --timeout takes a duration too
    hook = subprocess.run([str(Path(sys.executable).parent / "sessiond-hook"), "--timeout", "1m", "status"],
                          env=daemon.env, capture_output=True, timeout=60)
    assert hook.returncode == 0 and hook.stdout.startswith(b"sessiond "), hook.stderr
    rows = {r[2:12].strip(): r[12:] for r in out.splitlines() if r.startswith("  ")}
    assert rows["reads"].split()[1:2] == ["threads,"] and "waiting" in rows["reads"], out
    assert " MB resident" in rows["memory"] and "held for dedup" in rows["memory"], out
    assert "up to date" in rows["index"] or "waiting to be indexed" in rows["index"], out


def _complete(d: DaemonProc, words: str) -> list[str]:
    env = {**d.env, "_SESSIOND_COMPLETE": "bash_complete", "COMP_WORDS": words,
           "COMP_CWORD": str(len(shlex.split(words)) - (0 if words.endswith(" ") else 1))}
    out = subprocess.run([sys.executable, "-m", "sessiond.client.cli"], env=env, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.decode().splitlines()


def test_bash_completion_shows_titles_where_there_is_a_choice(daemon: DaemonProc):
    a, b = seed(daemon, CWD, "first title"), seed(daemon, CWD, "second title")
    assert sorted(_complete(daemon, "sessiond show ")) == sorted([f"plain,{a}  first title", f"plain,{b}  second title"])
    assert _complete(daemon, f"sessiond show {a[:6]}") == [f"plain,{a}"]  # one candidate: the id alone, inserted whole
    daemon.cli("rm", a, b, "--cwd", CWD)
    assert sorted(_complete(daemon, "sessiond restore ")) == sorted([f"plain,{a}  first title", f"plain,{b}  second title"])
    commands = _complete(daemon, "sessiond sta")
    assert sorted(commands) == ["plain,start", "plain,status"], commands  # commands: names only, as before
