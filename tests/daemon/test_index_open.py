"""The indexer's open of its index file (``daemon/index/store.open_index``),
on real files: whatever unusable thing is at the path is renamed aside, never
deleted and never followed, and a working index is made in its place."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sessiond.daemon.index.store import open_index
from sessiond.search.schema import INDEX_NAME


def opened(path: Path) -> str | None:
    conn, fd, replaced = open_index(path)
    try:
        conn.execute("SELECT count(*) FROM files").fetchone()
    finally:
        conn.close()
        os.close(fd)
    assert path.is_file() and not path.is_symlink()
    return replaced


def set_aside(path: Path) -> list[Path]:
    return sorted(p for p in path.parent.iterdir() if p.name.startswith(path.name) and ".bad-" in p.name)


@pytest.mark.parametrize("head", [b"garbage " * 512, b"SQLite format 3\x00" + os.urandom(8192)])
def test_a_file_that_is_not_an_index_is_kept_aside(tmp_path, head):
    path = tmp_path / INDEX_NAME
    path.write_bytes(head)
    assert opened(path) is not None
    [aside] = set_aside(path)
    assert aside.read_bytes() == head  # someone's bytes, as they were


def test_a_symlink_at_the_index_or_its_wal_is_never_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep me")
    path = tmp_path / INDEX_NAME
    os.symlink(target, path)
    os.symlink(target, f"{path}-wal")
    assert opened(path) is not None
    assert target.read_bytes() == b"keep me"
    assert all(p.is_symlink() for p in set_aside(path)) and len(set_aside(path)) == 2

