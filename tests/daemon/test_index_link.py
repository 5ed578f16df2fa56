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
