"""The search index is a cache that can be lost under a running daemon:
deleted, truncated, its header or its pages overwritten, replaced by another
database or by a FIFO. A search still finds what the files hold (from a
rebuilt index, or by scanning them, and says so), ``status`` says what
searches do, and once rebuilt the index answers again. Hostile things at the
index's paths when the daemon starts are set aside, and a CLI without a
daemon scans past a damaged index."""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from pathlib import Path

import pytest

from sessiond.search.schema import INDEX_NAME
from sessiond.wire import messages as m
from tests.helpers import assistant, line, user, wait_until

CWD = "/work/lost-index"
WORD = "okapi"


@pytest.fixture
def sd(fresh_config, daemon_factory):
    return daemon_factory().start()


def fill(d, sid: str) -> None:
    """One session whose known text is the word ``okapi``, and enough other
    entries that the index has pages between its first and its last."""
    with d.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written",
                        entries=[line(user(f"where does the {WORD} live?", cwd=CWD))]
                        + [line(assistant(f"filler {i} " + " ".join(f"w{i}x{k}" for k in range(30)), cwd=CWD))
                           for i in range(150)]))


def search(d, *args: str) -> tuple[list[dict], str]:
    r = d.cli("search", WORD, "--cwd", CWD, "--json", *args, check=False, timeout=60)
    assert b"Traceback" not in r.stderr, r.stderr
    return json.loads(r.stdout or b"[]"), r.stderr.decode()


def index_status(d) -> dict:
    return json.loads(d.cli("status", "--json").stdout)["index"]


def indexed(d, sid: str) -> None:
    """Wait until the search is answered from the index (no note) and finds ``sid``."""
    def found() -> bool:
        hits, err = search(d)
        return [h["sessionId"] for h in hits] == [sid] and err == ""

    wait_until(found, "the search to be answered from the index", timeout=30)
    assert index_status(d)["state"] == "ok"


def checkpoint(index: Path) -> None:
    """What an auto-checkpoint does in a long-running daemon: every page in
    the index file itself, the WAL emptied, so what is done to the file is
    what a reader sees (not the pages the WAL still holds)."""
    conn = sqlite3.connect(index)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0
    finally:
        conn.close()


def damage(index: Path, kind: str) -> None:
    checkpoint(index)
    if kind == "unlink":
        index.unlink()
    elif kind == "truncate":
        os.truncate(index, 0)
    elif kind == "header":
        with open(index, "r+b") as f:
            f.write(os.urandom(100))
    elif kind == "middle":
        size = index.stat().st_size
        assert size >= 4 * 4096
        with open(index, "r+b") as f:  # every page but the first (the header) and the last
            f.seek(4096)
            f.write(os.urandom(size - 2 * 4096))
    elif kind == "other-db":
        other = index.with_name("other.sqlite3")
        conn = sqlite3.connect(other)
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("INSERT INTO notes VALUES ('not an index')")
        conn.commit()
        conn.close()
        os.replace(other, index)
    elif kind == "fifo":
        index.unlink()
        os.mkfifo(index)
    else:
        raise AssertionError(kind)


KINDS = ["unlink", "truncate", "header", "middle", "other-db", "fifo"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", KINDS)
def test_a_lost_index_never_answers_no_matches_and_is_rebuilt(sd, kind):
    sid = str(uuid.uuid4())
    fill(sd, sid)
    indexed(sd, sid)
    index = sd.root / INDEX_NAME
    damage(index, kind)

    hits, err = search(sd)
    assert [h["sessionId"] for h in hits] == [sid], (hits, err)
    assert "search index" in err and ("scanned the files" in err or "rebuilt" in err), err  # and says why
    st = index_status(sd)
    assert st["state"] in ("ok", "rebuilding", "scanning") and st["rebuilds"] >= 0
    wait_until(lambda: index_status(sd)["rebuilds"] >= 1, "status to count the rebuild", timeout=30)
    human = sd.cli("status").stdout.decode()
    assert "  index     " in human and "rebuilt 1 time since start" in human

    indexed(sd, sid)  # the rebuilt index answers again, without a note
    assert (sd.root / INDEX_NAME).is_file() and not (sd.root / INDEX_NAME).is_symlink()
    aside = sorted(p.name for p in sd.root.iterdir() if ".bad-" in p.name)
    kept = [n for n in aside if n.startswith(INDEX_NAME + ".bad-")]
    if kind in ("truncate", "header", "middle", "other-db", "fifo"):  # what was at the path is kept, renamed
        assert len(kept) == 1, aside
    if kind == "other-db":
        conn = sqlite3.connect(sd.root / kept[0])  # as it was: no WAL of the old index replayed into it
        assert conn.execute("SELECT text FROM notes").fetchall() == [("not an index",)]
        conn.close()
    assert sd.proc.poll() is None


@pytest.mark.timeout(120)
def test_hostile_index_paths_at_start_are_set_aside_never_followed(fresh_config, daemon_factory, short_tmp):
    d = daemon_factory()
    d.root.mkdir(parents=True, exist_ok=True)
    outside = short_tmp / "outside.txt"
    outside.write_bytes(b"not to be written")
    index = d.root / INDEX_NAME
    os.mkfifo(index)  # SQLite would block on it forever
    os.symlink(outside, f"{index}-wal")  # SQLite would write the WAL there
    os.mkdir(f"{index}-shm")
    d.start()
    try:
        sid = str(uuid.uuid4())
        fill(d, sid)
        indexed(d, sid)
        assert index.is_file() and not index.is_symlink()
        assert outside.read_bytes() == b"not to be written"
        aside = {p.name for p in d.root.iterdir() if ".bad-" in p.name}
        assert len(aside) == 3, aside  # the FIFO, the symlink and the dir, renamed
        assert "set aside" in d.log_text()
    finally:
        assert d.stop() == 0


@pytest.mark.timeout(120)
def test_without_a_daemon_a_fifo_at_the_index_path_is_scanned_past(fresh_config, daemon_factory):
    """SQLite would block forever opening it; the other kinds of damage were
    already scanned past (SQLite says so: test_search.py)."""
    d = daemon_factory().start()
    sid = str(uuid.uuid4())
    fill(d, sid)
    indexed(d, sid)
    assert d.stop() == 0
    damage(d.root / INDEX_NAME, "fifo")
    r = d.cli("--no-autostart", "search", WORD, "--cwd", CWD, "--json", check=False, timeout=60)
    assert b"Traceback" not in r.stderr
    assert [h["sessionId"] for h in json.loads(r.stdout)] == [sid]
    assert b"is unusable (.sessiond-search.sqlite3 is a FIFO): scanned the files" in r.stderr, r.stderr


@pytest.mark.timeout(120)
def test_an_index_that_cannot_be_written_is_scanned_past_until_it_can(sd):
    """The disk full for the indexer (its largest file size capped below what
    it must write): searches scan the files, status says so, and once it can
    write again (retried every few seconds) the index answers again."""
    import resource

    first = str(uuid.uuid4())
    fill(sd, first)
    indexed(sd, first)
    checkpoint(sd.root / INDEX_NAME)  # the WAL empty: the next commit must write past the cap
    pid = index_status(sd)["pid"]
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
    try:
        late = str(uuid.uuid4())
        fill(sd, late)
        r = sd.cli("search", WORD, "--cwd", CWD, "--json", check=False, timeout=60)
        assert sorted(h["sessionId"] for h in json.loads(r.stdout)) == sorted([first, late]), r.stderr
        assert b"scanned the files" in r.stderr and b"cannot be written" in r.stderr, r.stderr
        st = index_status(sd)
        assert st["state"] == "scanning" and "cannot be written" in st["reason"], st
        assert "searches scan the files" in sd.cli("status").stdout.decode()
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    def from_the_index() -> bool:
        hits, err = search(sd)
        return sorted(h["sessionId"] for h in hits) == sorted([first, late]) and err == ""

    wait_until(from_the_index, "the index to be written again", timeout=30)
    assert index_status(sd)["pid"] == pid  # the same indexer: it recovered by itself, no crash and restart
    assert index_status(sd)["state"] == "ok" and index_status(sd)["rebuilds"] == 0
