"""The daemon's spend book on real files, in this process: the write observer
only queues (nothing is parsed on the event loop's append path), the queue is
bounded (what overflows it is read from the file by the next answer's
re-stat), and the sums the book keeps equal the report computed from the files
after every kind of change: appends, a copy of a response in another file that
sorts before it (ccusage's dedup keeps the first file's), a file removed."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from sessiond.daemon import spend
from sessiond.daemon.spend import SpendBook
from sessiond.store.spend import charges, reports
from tests.spend.tree import build

TZ = ZoneInfo("Asia/Kolkata")  # +05:30


def entry(n: int, session: str, tokens: int, ts: str = "2026-03-01T10:00:00.000Z", mid: str | None = None) -> bytes:
    e = {"type": "assistant", "timestamp": ts, "sessionId": session, "requestId": f"r{n}", "version": "2.0.1",
         "message": {"id": mid or f"m{n}", "model": "claude-opus-4-6",
                     "usage": {"input_tokens": tokens, "output_tokens": 1}}}
    return json.dumps(e, separators=(",", ":")).encode()


def files_report(root: Path, kind: str):
    ledger = charges.load(root / "projects", progress=kind == "daily")
    return reports.report(kind, ledger.charges, reports.Pricer(SpendBook(root).prices), TZ, "tz", "daemon",
                          now_ms=int(time.time() * 1000))


def book_report(book: SpendBook, kind: str):
    return book.answer(kind, None, None, None, TZ, "tz", False)


def same(book: SpendBook, root: Path) -> None:
    for kind in ("daily", "monthly", "session", "blocks"):
        mine, theirs = book_report(book, kind), files_report(root, kind)
        if kind == "blocks":  # (is_active depends on now: none of these is recent)
            assert mine.blocks == theirs.blocks
        else:
            assert (mine.rows, mine.totals, mine.responses) == (theirs.rows, theirs.totals, theirs.responses), kind


def append(book: SpendBook, path: Path, lines: list[bytes]) -> None:
    """Append as the daemon's writer does, and tell the observer."""
    with open(path, "ab") as f:
        f.write(b"".join(line + b"\n" for line in lines))
    book.written(path, lines, path.stat().st_size)


@pytest.mark.timeout(120)
def test_the_observer_queues_and_the_queue_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(spend, "MAX_PENDING", 50)
    path = tmp_path / "projects" / "p" / "s.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(entry(0, "s", 5) + b"\n")
    book = SpendBook(tmp_path)
    assert book_report(book, "daily").totals.input_tokens == 5
    append(book, path, [entry(1, "s", 7)])
    assert book.responses == 1 and len(book._pending) == 1  # queued, not parsed
    assert book_report(book, "daily").totals.input_tokens == 12  # an answer drains it first
    for n in range(2, 80):  # past the bound: the rest is dropped from the queue
        append(book, path, [entry(n, "s", 1)])
    assert len(book._pending) == 50 and book.responses == 2
    assert book_report(book, "daily").totals.input_tokens == 12 + 78  # the re-stat read what was dropped
    same(book, tmp_path)


@pytest.mark.timeout(120)
def test_the_kept_sums_equal_the_files_after_every_change(tmp_path):
    build(tmp_path)
    book = SpendBook(tmp_path)
    same(book, tmp_path)
    projects = tmp_path / "projects"
    target = projects / "-zz-late" / "late.jsonl"  # sorts after every corpus project
    target.parent.mkdir()
    target.write_bytes(entry(1, "late", 100) + b"\n")
    book.revalidate(None)
    same(book, tmp_path)
    # the same response in two lines (content blocks), then a larger copy, then a new one
    append(book, target, [entry(2, "late", 50), entry(2, "late", 50), entry(2, "late", 60)])
    append(book, target, [entry(3, "late", 9, ts="2026-03-01T18:30:00.000Z")])
    same(book, tmp_path)
    # a copy of response 3 (a fork) in a file that sorts first: ccusage counts it there (its session)
    early = projects / "-aa-early" / "early.jsonl"
    early.parent.mkdir()
    early.write_bytes(entry(3, "early", 9, ts="2026-03-01T18:30:00.000Z") + b"\n")
    book.revalidate(None)
    same(book, tmp_path)
    assert {r.key for r in book_report(book, "session").rows} >= {"early", "late"}
    session = {r.key: r for r in book_report(book, "session").rows}
    assert session["early"].input_tokens == 9 and session["late"].input_tokens == 100 + 60
    shutil.rmtree(early.parent)
    book.gone(early)
    book.drain()
    same(book, tmp_path)
    assert {r.key: r.input_tokens for r in book_report(book, "session").rows}["late"] == 100 + 60 + 9
    book.forget()
    same(book, tmp_path)
