"""The daemon's side of the indexer (``daemon/index/link.py``) with a real
indexer process and a real index file: what a search that could not read the
index tells the indexer."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

import pytest

from sessiond.daemon.index.link import IndexLink
from sessiond.search import query
from sessiond.search.schema import INDEX_NAME


def half_made(index: Path) -> os.stat_result:
    """A new index as the indexer makes it, between SQLite's header (written
    when WAL mode is set) and its tables: a search that reads it then fails."""
    conn = sqlite3.connect(index)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()
    reader = query.open_read_only(index)
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such table"):  # what the search meets
            query.run(reader, index.parent, "anything")
    finally:
        reader.close()
    return os.stat(index)


@pytest.mark.timeout(120)
def test_a_search_reading_the_index_the_indexer_is_making_does_not_get_it_rebuilt(short_tmp):
    """Before the indexer says which file it writes, a search may read the one
    it is making: "no such table", which the search handler reports as damage.
    That file is not damaged: it is kept, not set aside and built again (which
    made every search meanwhile scan the files instead of reading the index)."""
    root = short_tmp / "root"
    root.mkdir(mode=0o700)
    index = root / INDEX_NAME
    st = half_made(index)

    async def run() -> tuple[str, int, tuple[int, int] | None]:
        link = IndexLink(asyncio.get_running_loop(), root, index, refresh=0)  # every question waits for its answer
        await link.start()
        try:
            assert link.state == "starting"  # nothing read from the indexer yet
            link.damaged((st.st_dev, st.st_ino), "no such table: docs")  # as handlers/search.py does on that error
            for _ in range(2):  # the second answer comes after the pass that would rebuild on the first report
                assert await link.caught_up(None, 60)
            return link.state, link.rebuilds, link.identity
        finally:
            await link.close()

    state, rebuilds, identity = asyncio.run(run())
    assert (state, rebuilds) == ("ok", 0)
    assert identity == (st.st_dev, st.st_ino)  # its tables were made in that very file, which it kept
    assert not [p.name for p in root.iterdir() if ".bad-" in p.name]


def _indexers_of_this_process() -> list[int]:
    """Pids of live search indexer processes this process started."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        if int(stat[1]) == os.getpid() and stat[0] != "Z" and b"sessiond.daemon.index.worker" in cmdline:
            found.append(int(entry))
    return found


@pytest.mark.timeout(120)
def test_the_indexer_starts_late_or_at_the_first_question_and_never_for_a_stop(short_tmp):
    """The indexer starts ``START_DELAY`` after the daemon serves, or at once
    for the first search (or reindex): a daemon stopped before either never
    starts it; a question asked before the delay starts it and is answered."""
    root = short_tmp / "root"
    root.mkdir(mode=0o700)

    async def run() -> tuple[bool, bool, bool]:
        loop = asyncio.get_running_loop()
        unasked = IndexLink(loop, root, root / INDEX_NAME, refresh=0)
        unasked.start_later(60)
        for _ in range(10):  # loop passes, the daemon serving meanwhile
            await asyncio.sleep(0)
        never = unasked.transport is None
        await unasked.close()
        asked = IndexLink(loop, root, root / INDEX_NAME, refresh=0)
        asked.start_later(60)
        try:
            answered = await asked.caught_up(None, 60)
            return never, answered, asked.status()["running"] is True
        finally:
            await asked.close()

    assert asyncio.run(run()) == (True, True, True)
    assert _indexers_of_this_process() == []


@pytest.mark.timeout(120)
def test_a_stop_during_the_indexers_first_start_leaves_no_indexer(short_tmp):
    """The stop comes while the first start is launching the process (its
    timer fired, the exec not yet answered): the stop waits for that start and
    ends the process it made, instead of leaving it running with no daemon."""
    root = short_tmp / "root"
    root.mkdir(mode=0o700)

    async def run() -> None:
        link = IndexLink(asyncio.get_running_loop(), root, root / INDEX_NAME, refresh=0)
        link.start_later(0)
        for _ in range(1000):  # to the pass that forks it: the start under way, its pipes not yet connected
            await asyncio.sleep(0)
            if link._first_start is not None and (_indexers_of_this_process() or link.transport is not None):
                break
        await link.close()
        if link._first_start is not None:  # a start the stop left behind has made its process by its end
            await link._first_start
        assert _indexers_of_this_process() == []

    asyncio.run(run())
    assert _indexers_of_this_process() == []
