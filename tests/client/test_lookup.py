"""Finding a session by id: project dir, hash variants, git worktrees, all projects."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sessiond.client.lookup import find_project_dir, find_session, git_worktrees, hash_variant_dirs, listing_dirs
from sessiond.store.paths import MAX_SANITIZED, canonical_cwd, sanitize
from sessiond.wire.errors import SessiondError
from tests.store.listing.store import new_id, user_msg, write


def put_session(root: Path, cwd: str, sid: str | None = None, dir_name: str | None = None) -> tuple[str, Path]:
    sid = sid or new_id()
    proj = root / "projects" / (dir_name or sanitize(cwd))
    return sid, write(proj / f"{sid}.jsonl", [user_msg(sid, "hello", cwd=cwd)])


def git(*args: str, cwd: Path) -> str:
    out = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                         cwd=cwd, capture_output=True, check=True, timeout=30)
    return out.stdout.decode()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A real repository with one commit and a second worktree next to it."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    main = tmp_path / "src" / "app"
    main.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=main)
    git("commit", "-q", "--allow-empty", "-m", "init", cwd=main)
    wt = tmp_path / "src" / "app-feature"
    git("worktree", "add", "-q", "-b", "feature", str(wt), cwd=main)
    return canonical_cwd(str(main)), canonical_cwd(str(wt))


def test_found_in_the_project_dir_of_the_cwd(tmp_path):
    root, here = tmp_path / "root", str(tmp_path)
    sid, path = put_session(root, canonical_cwd(here))
    loc = find_session(root, sid, here)
    assert (loc.path, loc.found_via, loc.same_repo, loc.cwd) == (str(path), "project", True, canonical_cwd(here))
    assert loc.resume_hint() is None
    assert find_project_dir(root, here) == path.parent


def test_long_cwd_found_under_another_hash_suffix(tmp_path):
    deep = tmp_path / ("a" * 90) / ("b" * 90) / ("c" * 40)
    deep.mkdir(parents=True)
    here = canonical_cwd(str(deep))
    ours = sanitize(here)
    assert len(ours) > MAX_SANITIZED
    theirs = ours[:MAX_SANITIZED] + "-otherhash1"  # the same path hashed by another runtime
    root = tmp_path / "root"
    sid, path = put_session(root, here, dir_name=theirs)
    put_session(root, "/unrelated", dir_name=ours[:MAX_SANITIZED - 1] + "x-zz")  # other prefix
    assert hash_variant_dirs(root, ours) == [path.parent]
    loc = find_session(root, sid, str(deep), search_all=False)
    assert (loc.path, loc.found_via, loc.same_repo) == (str(path), "hash-prefix", True)
    assert find_project_dir(root, str(deep)) == path.parent
    # The exact dir wins once it exists.
    (root / "projects" / ours).mkdir()
    assert find_project_dir(root, str(deep)) == root / "projects" / ours


def test_short_names_have_no_hash_variants(tmp_path):
    root = tmp_path / "root"
    put_session(root, "/w/a", dir_name="-w-a-x")
    assert hash_variant_dirs(root, "-w-a") == []


def test_found_in_a_sibling_git_worktree(tmp_path, repo):
    main, wt = repo
    assert git_worktrees(main) == [main, wt]
    root = tmp_path / "root"
    sid, path = put_session(root, wt)
    loc = find_session(root, sid, main, search_all=False)
    assert (loc.path, loc.found_via, loc.same_repo, loc.cwd) == (str(path), "worktree", True, wt)
    assert loc.resume_hint() is None
    # And the other way round, from inside the worktree.
    sid2, path2 = put_session(root, main)
    loc = find_session(root, sid2, wt, search_all=False)
    assert (loc.path, loc.found_via) == (str(path2), "worktree")
    # Listing from the main checkout can take in the worktrees' sessions too.
    assert listing_dirs(root, main) == [path2.parent]
    assert listing_dirs(root, main, worktrees=True) == [path2.parent, path.parent]


def test_same_repository_subdirectory_found_in_all_projects(tmp_path, repo):
    main, _ = repo
    sub = Path(main) / "pkg"
    sub.mkdir()
    root = tmp_path / "root"
    sid, path = put_session(root, str(sub))
    assert find_session(root, sid, main, search_all=False) is None
    loc = find_session(root, sid, main)
    assert (loc.path, loc.found_via, loc.same_repo) == (str(path), "all-projects", True)


def test_other_repository_gets_a_cd_hint(tmp_path, repo):
    main, _ = repo
    other = tmp_path / "other place"
    other.mkdir()
    root = tmp_path / "root"
    sid, path = put_session(root, canonical_cwd(str(other)))
    loc = find_session(root, sid, main)
    assert (loc.path, loc.found_via, loc.same_repo) == (str(path), "all-projects", False)
    assert loc.resume_hint() == f"cd '{canonical_cwd(str(other))}' && sessiond resume {sid}"


def test_outside_any_repository_only_the_same_dir_is_the_same_project(tmp_path):
    here = tmp_path / "plain"
    here.mkdir()
    root = tmp_path / "root"
    sid, _ = put_session(root, canonical_cwd(str(here)), dir_name="renamed-by-hand")
    loc = find_session(root, sid, str(here))
    assert (loc.found_via, loc.same_repo) == ("all-projects", True)
    sid2, _ = put_session(root, "/somewhere/else")
    loc = find_session(root, sid2, str(here))
    assert loc.same_repo is False
    assert loc.resume_hint("claude") == f"cd /somewhere/else && claude resume {sid2}"


def test_without_a_cwd_every_project_is_searched(tmp_path):
    root = tmp_path / "root"
    sid, path = put_session(root, "/w/x")
    loc = find_session(root, sid)
    assert (loc.path, loc.found_via, loc.same_repo, loc.cwd) == (str(path), "all-projects", False, "/w/x")


def test_unknown_session_is_none(tmp_path):
    root = tmp_path / "root"
    put_session(root, "/w/x")
    assert find_session(root, new_id(), str(tmp_path)) is None
    assert find_session(tmp_path / "no-store", new_id()) is None


@pytest.mark.parametrize("bad", ["../../etc/passwd", "not-a-uuid", "", "6f9619ff-8b86-4011-b42d-00c04fc964ff/../x",
                                 "6f9619ff-8b86-4011-b42d-00c04fc964f", "*", "6f9619ff-8b86-4011-b42d-00c04fc964ff.jsonl"])
def test_ids_that_are_not_uuids_are_refused(tmp_path, bad):
    with pytest.raises(SessiondError) as err:
        find_session(tmp_path / "root", bad, str(tmp_path))
    assert err.value.code == "bad_request"


def test_relative_cwd_is_refused(tmp_path):
    with pytest.raises(SessiondError) as err:
        find_session(tmp_path, new_id(), "relative/dir")
    assert err.value.code == "bad_request"


def test_git_that_fails_or_hangs_means_no_worktrees(tmp_path):
    assert git_worktrees(str(tmp_path)) == []  # not a repository
    assert git_worktrees(str(tmp_path / "missing")) == []
    assert git_worktrees(str(tmp_path), timeout=1e-6) == []  # timed out
