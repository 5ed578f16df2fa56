"""The sums the daemon keeps, against figures this test computes itself from
real corpus files with ``json.loads``: days in the CLI's time zone (a
45-minute offset, not the daemon's zone), sessions with their subagents,
several models, a response written as several lines counted once, 5-hour
blocks; the same from the files with no daemon. Then the sums follow a session
appended to after the start and a file another writer appends to, are the
daemon's own (its answers read no transcript: the process reads a few frames'
bytes, not the store's), and ``reindex`` rebuilds them from the files."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from tests.spend.test_rules import responses
from tests.spend.tree import CORPUS

CLI_ZONE = "Asia/Kathmandu"  # +05:45: a day starts at a quarter hour in UTC
DAEMON_ZONE = "America/Los_Angeles"
FILES = {  # corpus file -> where Claude Code keeps it
    "entireio__cli__d5-99f72ee73a-0-full.jsonl": "-entireio-cli/d5-99f72ee73a-0-full.jsonl",
    "kfischer-okarin__scripts-and-tools__b3edadab-bca0-4054-9b41-f7ffa6941260.jsonl":
        "-kfischer-okarin-scripts-and-tools/b3edadab-bca0-4054-9b41-f7ffa6941260.jsonl",
    "kfischer-okarin__scripts-and-tools__agent-a434715.jsonl":
        "-kfischer-okarin-scripts-and-tools/b3edadab-bca0-4054-9b41-f7ffa6941260/subagents/agent-a434715.jsonl",
    "blackgirlbytes__planetfall-seed-signalkit__84-da75cf4015-2-full.jsonl":
        "-blackgirlbytes-planetfall-seed-signalkit/84-da75cf4015-2-full.jsonl",
}
HOUR = 3_600_000


def lay_out(root: Path) -> None:
    for name, where in FILES.items():
        dest = root / "projects" / where
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CORPUS / name, dest)


def expected() -> dict:
    """Independently: per day (in CLI_ZONE), per session and per block, the
    four token counts, from every distinct response of the files."""
    found = []  # (ms, session, model, tokens)
    for name, where in FILES.items():
        session = where.split("/")[1].removesuffix(".jsonl")
        for r in responses(CORPUS / name).values():
            ms = int(datetime.fromisoformat(r["ts"]).timestamp() * 1000)
            found.append((ms, session, r["model"], r["tokens"]))
    days: dict[str, list[int]] = {}
    daemons_days = {datetime.fromtimestamp(f[0] / 1000, ZoneInfo(DAEMON_ZONE)).date().isoformat() for f in found}
    models: dict[str, set[str]] = {}
    sessions: dict[str, list[int]] = {}
    for ms, session, model, tokens in found:
        day = datetime.fromtimestamp(ms / 1000, ZoneInfo(CLI_ZONE)).date().isoformat()
        for into, key in ((days, day), (sessions, session)):
            into.setdefault(key, [0, 0, 0, 0])
            into[key] = [a + b for a, b in zip(into[key], tokens, strict=True)]
        models.setdefault(day, set()).add(model)
    blocks: list[list[int]] = []  # [start, entries, total tokens]
    last = None
    for ms, _, _, tokens in sorted(found, key=lambda f: f[0]):
        if blocks and ms - blocks[-1][0] <= 5 * HOUR and ms - last <= 5 * HOUR:
            blocks[-1][1] += 1
            blocks[-1][2] += sum(tokens)
        else:
            blocks.append([ms - ms % HOUR, 1, sum(tokens)])
        last = ms
    return {"daemon's days": daemons_days, "days": days, "models": models, "sessions": sessions, "blocks": blocks}


def tokens(row: dict) -> list[int]:
    return [row["inputTokens"], row["outputTokens"], row["cacheCreationTokens"], row["cacheReadTokens"]]


def usage(daemon, report: str, *args: str, **env: str) -> tuple[dict, str]:
    done = daemon.cli("usage", report, "--all", "--json", *args, env={"TZ": CLI_ZONE, **env})
    return json.loads(done.stdout), done.stderr.decode()


def check(daemon, want: dict, **env: str) -> str:
    """Every report equals ``want``; the reports' source."""
    daily, _ = usage(daemon, "daily", **env)
    assert {r["key"]: tokens(r) for r in daily["rows"]} == want["days"]
    assert {r["key"]: set(r["models"]) for r in daily["rows"]} == want["models"]
    assert len({m for ms in want["models"].values() for m in ms}) >= 3
    session, _ = usage(daemon, "session", **env)
    assert {r["key"]: tokens(r) for r in session["rows"]} == want["sessions"]
    blocks, _ = usage(daemon, "blocks", **env)
    from sessiond.store.spend.reports import iso_ms

    assert [[b["startTime"], b["entries"], b["totalTokens"]] for b in blocks["blocks"] if not b["isGap"]] == \
        [[iso_ms(s), n, t] for s, n, t in want["blocks"]]
    return {daily["source"], session["source"], blocks["source"]}.pop()


def read_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


@pytest.mark.timeout(240)
def test_the_kept_sums_are_the_files_figures_in_the_users_zone(daemon_factory, monkeypatch):
    want = expected()
    assert len(want["days"]) >= 2
    assert set(want["days"]) != set(want["daemon's days"])  # the zone matters
    daemon = daemon_factory()
    lay_out(daemon.root)
    # No daemon: computed from the files, said once on stderr, not in the JSON.
    out, err = usage(daemon, "daily", SESSIOND_SOCKET=str(daemon.root / "none.sock"))
    assert out["source"] == "files" and err.count("\n") == 1 and "computed from the transcript files" in err
    assert check(daemon, want, SESSIOND_SOCKET=str(daemon.root / "none.sock")) == "files"
    monkeypatch.setenv("TZ", DAEMON_ZONE)  # the daemon's own zone is another
    daemon.start()
    assert check(daemon, want) == "daemon"
    _, err = usage(daemon, "daily")
    assert err == ""


def response(n: int, session: str, cwd: str, ts: str, tokens: int) -> dict:
    return {"type": "assistant", "uuid": str(uuid.uuid4()), "parentUuid": None, "sessionId": session, "cwd": cwd,
            "timestamp": ts, "version": "2.1.0", "requestId": f"req_kept_{n}",
            "message": {"id": f"msg_kept_{n}", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
                        "content": [{"type": "text", "text": "hi"}],
                        "usage": {"input_tokens": tokens, "output_tokens": 10, "cache_creation_input_tokens": 0,
                                  "cache_read_input_tokens": 0}}}


def line(entry: dict) -> bytes:
    return json.dumps(entry, separators=(",", ":")).encode() + b"\n"


def total_input(daemon, **env: str) -> int:
    out, _ = usage(daemon, "daily", **env)
    return out["totals"]["inputTokens"]


@pytest.mark.timeout(240)
def test_the_sums_follow_writes_are_the_daemons_own_and_reindex_rebuilds_them(daemon_factory):
    daemon = daemon_factory()
    lay_out(daemon.root)
    daemon.start()
    files_env = {"SESSIOND_SOCKET": str(daemon.root / "none.sock")}
    start = total_input(daemon)
    cwd, session = "/work/kept", str(uuid.uuid4())
    daemon.cli("append", "--cwd", cwd, "--session", session, "--durability", "written",
               input=line(response(1, session, cwd, "2026-11-02T15:00:00.000Z", 1000)))
    assert total_input(daemon) == start + 1000  # (a new session: the next answer's re-stat reads it)

    # Appended to after the book read it: the written line goes into the sums as it is.
    one = response(2, session, cwd, "2026-11-02T16:00:00.000Z", 2000)
    again = {**one, "uuid": str(uuid.uuid4())}  # the same response's next content block: counted once
    daemon.cli("append", "--cwd", cwd, "--session", session, "--durability", "written", input=line(one) + line(again))
    pid = daemon.pid
    before = read_bytes(pid)
    for _ in range(3):
        for report in ("daily", "monthly", "session", "blocks"):
            usage(daemon, report)
    assert total_input(daemon) == start + 3000
    read = read_bytes(pid) - before
    tree = sum(p.stat().st_size for p in (daemon.root / "projects").rglob("*.jsonl"))
    assert read < tree // 20, (read, tree)  # the answers read frames, not transcripts

    # reindex: rebuilt from the files, the same figures.
    kept = [usage(daemon, report)[0] for report in ("daily", "session", "blocks")]
    daemon.cli("reindex", "--all")
    assert [usage(daemon, report)[0] for report in ("daily", "session", "blocks")] == kept
    assert total_input(daemon, **files_env) == start + 3000

    # Another writer (Claude Code) appends to a transcript: followed.
    foreign = daemon.root / "projects" / FILES["kfischer-okarin__scripts-and-tools__b3edadab-bca0-4054-9b41-f7ffa6941260.jsonl"]
    big = response(3, foreign.stem, "/kfischer", "2026-11-03T15:00:00.000Z", 500)
    big["message"]["content"] = [{"type": "text", "text": "x" * (3 << 19)}]  # a line over a MiB
    with open(foreign, "ab") as f:
        f.write(line(big))
    settled(daemon, start + 3500)
    assert total_input(daemon, **files_env) == start + 3500

    # One whose last line has no newline: the appended line makes another line
    # of it, which ccusage (and the files) no longer count: nor does the daemon.
    torn = daemon.root / "projects" / FILES["entireio__cli__d5-99f72ee73a-0-full.jsonl"]
    assert not torn.read_bytes().endswith(b"\n")
    with open(torn, "ab") as f:
        f.write(line(response(4, torn.stem, "/entireio", "2026-11-03T16:00:00.000Z", 400)))
    assert total_input(daemon, **files_env) == start + 3500
    for _ in range(3):  # after the follower's look and the re-stats that follow answers (RESTAT_AFTER)
        time.sleep(1.5)
        assert total_input(daemon) == start + 3500


def settled(daemon, want: int, timeout: float = 20) -> None:
    """The daemon's total input reaches ``want`` (a foreign write shows once
    the follower or the next re-stat has read it)."""
    deadline = time.monotonic() + timeout
    while total_input(daemon) != want and time.monotonic() < deadline:
        time.sleep(0.2)
    assert total_input(daemon) == want
