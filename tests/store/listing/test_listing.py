"""Two-phase listing: stat and sort everything, lite-read only the page."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from sessiond.store.listing import ListStats, list_all_sessions, list_sessions, project_dirs, session_candidates
from sessiond.store.lite import default_opener
from sessiond.wire.errors import SessiondError

from .store import BASE_MTIME, dump, meta, user_msg, write

N = 10_000


def sid_of(i: int) -> str:
    return f"00000000-0000-4000-8000-{i:012d}"


class CountingOpener:
    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, path: str) -> int:
        self.paths.append(path)
        return default_opener(path)


@pytest.fixture(scope="module")
def big_project(tmp_path_factory):
    """10,000 small sessions, mtime i seconds after BASE (so session N-1 is the
    newest), under five newer files that are not sessions. On tmpfs when there
    is one: creating 10,000 files on a busy disk can take seconds."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        base = Path(tempfile.mkdtemp(prefix="sessiond-list-", dir=shm))
    else:
        base = tmp_path_factory.mktemp("big")
    try:
        yield _fill_big_project(base / "projects" / "-w-big")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _fill_big_project(proj: Path) -> Path:
    proj.mkdir(parents=True)
    template = dump([user_msg("@SID@", "prompt @I@"), meta("last-prompt", "lastPrompt", "last @I@", "@SID@")])
    for i in range(N):
        sid = sid_of(i)
        path = os.path.join(proj, f"{sid}.jsonl")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, template.replace(b"@SID@", sid.encode()).replace(b"@I@", b"%d" % i))
        os.close(fd)
        os.utime(path, (BASE_MTIME + i, BASE_MTIME + i))
    top = BASE_MTIME + N + 100
    decoys = {
        "sidechain": dump([user_msg(sid_of(N + 1), "Warmup", side=True, agentId="a1")]),
        "team": dump([user_msg(sid_of(N + 2), "You are bob", teamName="t", agentName="bob")]),
        "empty": b"",
        "metadata-only": dump([{"type": "summary", "summary": "lonely", "leafUuid": "x"}]),
        "torn": b'{"type":"user","message":{"role":"user","content":"to',
    }
    for k, data in enumerate(decoys.values()):
        write(proj / f"{sid_of(N + 1 + k)}.jsonl", data, mtime=top + k)
    # Not candidates at all: wrong names, a directory, an agent file.
    write(proj / "agent-a1.jsonl", dump([user_msg(sid_of(1), "agent", side=True)]), mtime=top + 50)
    write(proj / "notes.txt", b"x", mtime=top + 50)
    (proj / f"{sid_of(1)}").mkdir()
    return proj


def test_limit_20_over_10000_files_reads_about_20(big_project):
    stats, opener = ListStats(), CountingOpener()
    page = list_sessions(big_project, limit=20, stats=stats, opener=opener)
    assert [s.sessionId for s in page] == [sid_of(i) for i in range(N - 1, N - 21, -1)]
    assert page[0].firstPrompt == f"prompt {N - 1}" and page[0].lastPrompt == f"last {N - 1}"
    assert stats.files_seen == N + 5
    # The empty file is known from its stat; the other four non-sessions are read
    # and skipped, and the page is still full.
    assert stats.files_read == len(opener.paths) == 24
    # (A file of only a torn line has no entry at all: empty.)
    assert stats.skipped == {"empty": 2, "sidechain": 1, "team": 1, "metadata-only": 1}


def test_offset_counts_sessions_not_files(big_project):
    stats = ListStats()
    page = list_sessions(big_project, limit=20, offset=40, stats=stats)
    assert [s.sessionId for s in page] == [sid_of(i) for i in range(N - 41, N - 61, -1)]
    assert stats.files_read == 4 + 60


def test_past_the_end_is_empty(big_project):
    stats = ListStats()
    assert list_sessions(big_project, limit=20, offset=N + 5, stats=stats) == []
    assert stats.files_read == N + 4
    assert list_sessions(big_project, limit=0) == []


@pytest.fixture
def small_project(tmp_path):
    """23 sessions with mtime ties (three per second) and sidechain files among them."""
    proj = tmp_path / "projects" / "-w-p"
    for i in range(23):
        write(proj / f"{sid_of(i)}.jsonl", [user_msg(sid_of(i), f"p{i}")], mtime=BASE_MTIME + i // 3)
    for i in range(0, 23, 4):
        write(proj / f"{sid_of(100 + i)}.jsonl", [user_msg(sid_of(100 + i), "w", side=True)], mtime=BASE_MTIME + i // 3)
    return proj


def test_no_limit_reads_everything_once_and_sorts_by_mtime(small_project):
    stats, calls = ListStats(), []
    everything = list_sessions(small_project, stats=stats, progress=lambda done, total: calls.append((done, total)))
    assert stats.files_read == 29  # no stat pass: every candidate is read once
    # Newest first; equal mtimes fall back to the path, so the order is stable.
    assert [s.sessionId for s in everything] == [sid_of(i) for i in (21, 22, 18, 19, 20, 15, 16, 17, 12, 13, 14,
                                                                     9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1, 2)]
    assert calls[-1] == (29, 29)
    assert [s.sessionId for s in list_sessions(small_project, offset=21)] == [sid_of(1), sid_of(2)]


def test_pages_join_into_the_full_list(small_project):
    full = [s.sessionId for s in list_sessions(small_project)]
    for size in (1, 4, 5, 23, 50):
        pages = []
        for offset in range(0, 30, size):
            pages += [s.sessionId for s in list_sessions(small_project, limit=size, offset=offset)]
        assert pages == full, size
    stats = ListStats()
    assert [s.sessionId for s in list_sessions(small_project, limit=3, offset=20, stats=stats)] == full[20:]


def test_files_that_vanish_or_fail_between_the_phases_are_skipped(tmp_path):
    proj = tmp_path / "projects" / "-w-v"
    for i in range(6):
        write(proj / f"{sid_of(i)}.jsonl", [user_msg(sid_of(i), f"p{i}")], mtime=BASE_MTIME + i)
    gone = str(proj / f"{sid_of(5)}.jsonl")
    locked = str(proj / f"{sid_of(4)}.jsonl")

    def opener(path: str) -> int:
        if path == gone:
            os.unlink(path)
        if path == locked:
            raise PermissionError(path)
        return default_opener(path)

    stats = ListStats()
    page = list_sessions(proj, limit=3, stats=stats, opener=opener)
    assert [s.sessionId for s in page] == [sid_of(3), sid_of(2), sid_of(1)]
    assert stats.errors == 2


def test_all_projects_are_one_mtime_order(tmp_path):
    root = tmp_path / "root"
    for i in range(9):
        proj = root / "projects" / f"-w-p{i % 3}"
        write(proj / f"{sid_of(i)}.jsonl", [user_msg(sid_of(i), f"p{i}", cwd=f"/w/p{i % 3}")], mtime=BASE_MTIME + i)
    write(root / "projects" / "stray.jsonl", b"not a project dir")
    assert len(project_dirs(root)) == 3
    stats = ListStats()
    page = list_all_sessions(root, limit=4, offset=1, stats=stats)
    assert [(s.sessionId, s.cwd) for s in page] == [(sid_of(i), f"/w/p{i % 3}") for i in (7, 6, 5, 4)]
    assert stats.dirs == 3 and stats.files_read == 5
    assert list_all_sessions(tmp_path / "nowhere") == []


def test_missing_project_dir_lists_nothing(tmp_path):
    assert list_sessions(tmp_path / "absent") == []
    assert list_sessions(tmp_path / "absent", limit=5) == []
    assert session_candidates([tmp_path / "absent"]) == []


@pytest.mark.parametrize("kw", [{"limit": -1}, {"offset": -1}])
def test_negative_limit_or_offset_is_a_bad_request(tmp_path, kw):
    with pytest.raises(SessiondError) as err:
        list_sessions(tmp_path, **kw)
    assert err.value.code == "bad_request"
