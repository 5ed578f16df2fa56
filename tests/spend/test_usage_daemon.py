"""``sessiond usage`` answered by a real daemon from the figures it keeps: the
same report as computed from the files, kept current by the daemon's own
appends (a response written as several lines counted once), by a foreign
writer's lines, by a removed file, and rebuilt by ``reindex``; ``--prices``
still reads the files, and says so."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from tests.spend.tree import build

REPORTS = ("daily", "monthly", "session", "blocks")


def usage(daemon, *args: str) -> dict:
    done = daemon.cli("usage", *args, "--all", "--json", "--timezone", "America/New_York")
    return json.loads(done.stdout)


def eventually(daemon, report: str, ok, timeout: float = 20.0) -> dict:
    """The report once ``ok`` holds of it: a write no observer reported shows
    after the book's next re-stat (``RESTAT_AFTER``); the follower usually tells sooner."""
    deadline = time.monotonic() + timeout
    while True:
        got = usage(daemon, report)
        if ok(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def figures(report: dict) -> list:
    """What must be equal between two answers: every row (or block) but where it came from."""
    return report["blocks"] if report["report"] == "blocks" else [report["rows"], report["totals"]]


def response(n: int, session: str, cwd: str, ts: str, tokens: int) -> dict:
    return {"type": "assistant", "uuid": str(uuid.uuid4()), "parentUuid": None, "sessionId": session, "cwd": cwd,
            "timestamp": ts, "version": "2.1.0", "requestId": f"req_new_{n}",
            "message": {"id": f"msg_new_{n}", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
                        "content": [{"type": "text", "text": "hi"}],
                        "usage": {"input_tokens": tokens, "output_tokens": 10, "cache_creation_input_tokens": 0,
                                  "cache_read_input_tokens": 0}}}


@pytest.mark.timeout(240)
def test_the_daemon_answers_what_the_files_say_and_keeps_it_current(daemon_factory, tmp_path):
    daemon = daemon_factory()
    build(daemon.root)
    daemon.start()
    for report in REPORTS:
        mine = usage(daemon, report)
        assert mine["source"] == "daemon", report
        files = json.loads(daemon.cli("usage", report, "--all", "--json", "--timezone", "America/New_York",
                                      "--prices", str(Path(__file__).resolve().parents[2] / "sessiond/store/spend/prices.json")).stdout)
        assert files["source"] == "files"
        assert figures(mine) == figures(files), report

    scoped = json.loads(daemon.cli("usage", "session", "--cwd", "/kfischer-okarin-scripts-and-tools", "--json").stdout)
    assert scoped["source"] == "daemon"
    assert {r["project"] for r in scoped["rows"]} == {"-kfischer-okarin-scripts-and-tools"}
    every = usage(daemon, "session")
    assert scoped["rows"] == [r for r in every["rows"] if r["project"] == "-kfischer-okarin-scripts-and-tools"]

    before = usage(daemon, "daily")["totals"]
    cwd = "/work/usage-test"
    session = str(uuid.uuid4())
    one = response(1, session, cwd, "2026-11-02T15:00:00.000Z", 1000)
    again = {**one, "uuid": str(uuid.uuid4())}  # the same response's second content block
    two = response(2, session, cwd, "2026-11-02T15:01:00.000Z", 500)
    lines = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in (one, again, two)).encode()  # as Claude Code writes
    daemon.cli("append", "--cwd", cwd, "--session", session, "--durability", "written", input=lines)
    after = usage(daemon, "daily")
    assert after["source"] == "daemon"
    assert after["totals"]["inputTokens"] == before["inputTokens"] + 1500
    assert after["totals"]["outputTokens"] == before["outputTokens"] + 20
    day = next(r for r in after["rows"] if r["key"] == "2026-11-02")
    assert day["inputTokens"] == 1500 and day["responses"] == 2

    # A foreign writer (Claude Code itself) appends to a transcript the daemon never wrote.
    foreign = next((daemon.root / "projects" / "-dagster-io-erk").glob("*.jsonl"))
    with open(foreign, "a") as f:
        f.write(json.dumps(response(3, foreign.stem, "/erk", "2026-11-03T15:00:00.000Z", 7000), separators=(",", ":")) + "\n")
    want = before["inputTokens"] + 1500 + 7000
    after = eventually(daemon, "daily", lambda r: r["totals"]["inputTokens"] == want)
    assert after["totals"]["inputTokens"] == want

    # A removed transcript leaves the figures.
    gone = usage(daemon, "session")
    row = next(r for r in gone["rows"] if r["key"] == foreign.stem)
    foreign.unlink()
    left = eventually(daemon, "session", lambda r: foreign.stem not in {r["key"] for r in r["rows"]})
    assert foreign.stem not in {r["key"] for r in left["rows"]}
    assert left["totals"]["totalTokens"] == gone["totals"]["totalTokens"] - row["totalTokens"]

    # reindex rebuilds from the files: the same figures.
    daemon.cli("reindex", "--all")
    assert figures(usage(daemon, "session")) == figures(left)


def test_bad_requests_are_typed_errors(daemon):
    from sessiond.wire import messages as m
    from sessiond.wire.errors import RemoteError

    with daemon.client() as c:
        for req in (m.Spend(id=c.next_id(), all=True, timezone="Nowhere/Else"),
                    m.Spend(id=c.next_id(), all=True, since="2025-13-45")):
            with pytest.raises(RemoteError) as err:
                c.call(req)
            assert err.value.code == "bad_request"
        assert c.call(m.Spend(id=c.next_id(), all=True)).spend.rows == []


@pytest.mark.parametrize("tz", ["Nowhere/Else", "EST5EDT4,M3.2.0,M11.1.0", "UTC"])
def test_a_local_zone_the_daemon_does_not_know_is_its_own(daemon, tz):
    """The CLI sends its zone's name (``TZ``) without looking it up: a name
    that is no zone (a typo, a POSIX rule) counts days in the daemon's own
    zone, as when no name is found, and is not an error."""
    done = daemon.cli("usage", "daily", "--all", "--json", env={"TZ": tz})
    out = json.loads(done.stdout)
    assert out["source"] == "daemon" and done.stderr == b""
    assert out["timezone"] == ("UTC" if tz == "UTC" else "local")


def test_a_project_with_no_sessions_is_answered_by_the_daemon_not_blamed_on_it(daemon):
    """``usage`` for a directory the root holds no project of: the daemon
    answers (nothing), and nothing on stderr says no daemon serves the root
    while one does."""
    done = daemon.cli("usage", "daily", "--cwd", "/work/never-used", "--json")
    out = json.loads(done.stdout)
    assert out["source"] == "daemon" and out["rows"] == [] and done.stderr == b"", done.stderr
    text = daemon.cli("usage", "--cwd", "/work/never-used")
    assert b"no daemon serves" not in text.stderr, text.stderr
