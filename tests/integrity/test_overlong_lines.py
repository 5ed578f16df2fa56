"""A transcript with a line longer than the shared cap (``linecap.MAX_LINE``)
in the middle, written by another program (or damaged): every reader of the
daemon and the CLI passes over it and sees the lines around it (listing,
show, resume, search, watch), and the daemon's memory does not grow by the
line."""

from __future__ import annotations

import json
import uuid

import pytest

from sessiond.store.linecap import MAX_LINE
from sessiond.store.paths import project_dir
from tests.adversarial.attacks import MiB, peak_rss
from tests.helpers import CliProcess

pytestmark = pytest.mark.timeout(600)
CWD = "/work/overlong"


def entry(kind: str, text: str, parent: str | None, sid: str, **extra) -> dict:
    return {"type": kind, "uuid": str(uuid.uuid4()), "parentUuid": parent, "sessionId": sid, "cwd": CWD,
            "timestamp": "2026-11-30T10:00:00.000Z", "message": {"role": kind, "content": text}, **extra}


def test_every_reader_passes_over_a_line_over_the_cap(daemon):
    sid = str(uuid.uuid4())
    first = entry("user", "alpha aardvark question", None, sid)
    answer = entry("assistant", "beta badger answer", first["uuid"], sid)
    after = entry("user", "omega okapi question", answer["uuid"], sid)
    title = {"type": "custom-title", "customTitle": "Overlong line session", "sessionId": sid}
    path = project_dir(daemon.root, CWD) / f"{sid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = peak_rss(daemon.pid)
    head = json.dumps(entry("user", "", answer["uuid"], sid))[:-1].encode()  # an entry whose text never ends
    with open(path, "wb") as f:
        for e in (first, answer):
            f.write(json.dumps(e).encode() + b"\n")
        f.write(head)
        block = b"z" * MiB
        for _ in range(MAX_LINE // MiB + 1):
            f.write(block)
        f.write(b'"}\n')
        for e in (after, title):
            f.write(json.dumps(e).encode() + b"\n")
    listed = json.loads(daemon.cli("list", "--cwd", CWD, "--json").stdout)
    (row,) = [s for s in listed["sessions"] if s["sessionId"] == sid] if isinstance(listed, dict) else \
        [s for s in listed if s["sessionId"] == sid]
    assert row.get("customTitle") == "Overlong line session" or row.get("title") == "Overlong line session", row

    shown = daemon.cli("show", sid, "--cwd", CWD, "--json", "--no-pager", check=False)
    assert "alpha aardvark" in shown.stdout.decode() and "omega okapi" in shown.stdout.decode()
    assert shown.returncode == 1 and "1 line skipped (line 3)" in shown.stderr.decode()  # as any damaged line

    hits = json.loads(daemon.cli("search", "okapi", "--cwd", CWD, "--json").stdout)
    assert [h["sessionId"] for h in hits] == [sid]
    assert json.loads(daemon.cli("search", "aardvark", "--cwd", CWD, "--json").stdout)[0]["sessionId"] == sid

    with CliProcess("watch", sid, "--cwd", CWD, "--json", "-n", "3", env=daemon.env) as watch:
        texts = [json.loads(watch.line())["message"]["content"] for _ in range(3)]
    assert texts == ["alpha aardvark question", "beta badger answer", "omega okapi question"]

    resumed = daemon.cli("resume", sid, "--cwd", CWD, "--json").stdout.decode()
    assert "omega okapi" in resumed

    grown = peak_rss(daemon.pid) - fresh
    assert grown < 32 * MiB, f"the daemon's peak RSS grew {grown / MiB:.0f} MiB for a {MAX_LINE / MiB:.0f}+ MiB line"
