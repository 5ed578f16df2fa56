"""``Adopt`` takes a session's main transcript, ``<root>/projects/<project>/<sid>.jsonl``,
and refuses every other file with a typed error, so the daemon never appends to
a spool file, a trashed copy, a subagent dir or a file nobody lists or resumes."""

from __future__ import annotations

import os
import uuid as uuidlib
from pathlib import Path

import pytest

from sessiond.store.paths import projects_dir
from sessiond.store.spoolfile import SPOOL_DIR
from sessiond.store.trash import TRASH_DIR
from sessiond.wire import messages as m
from sessiond.wire.errors import RemoteError
from tests.conftest import DaemonProc
from tests.helpers import line, read_entries, user

CWD = "/work/adopt-project"


def _transcript(path: Path) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = line(user("kept as it is")) + b"\n"
    path.write_bytes(data)
    return data


def _adopt(d: DaemonProc, sid: str, path: Path | str):
    with d.client() as c:
        return c.call(m.Adopt(id=c.next_id(), session=sid, path=str(path)))


def _places(root: Path, sid: str) -> dict[str, Path]:
    """Files named ``<sid>.jsonl`` inside the root that are no session's transcript."""
    name = f"{sid}.jsonl"
    return {
        "spool": root / SPOOL_DIR / name,
        "trash": root / TRASH_DIR / f"20260101T000000Z-{sid}" / "files" / "projects" / "-p" / name,
        "projects itself": projects_dir(root) / name,
        "subagent dir": projects_dir(root) / "-p" / sid / "subagents" / name,
        "deeper project": projects_dir(root) / "-p" / "nested" / name,
        "root itself": root / name,
    }


@pytest.mark.parametrize("place", list(_places(Path("/r"), "x")))
def test_a_file_that_is_no_main_transcript_is_refused(shared_daemon, place):
    sid = str(uuidlib.uuid4())
    path = _places(shared_daemon.root, sid)[place]
    data = _transcript(path)
    with pytest.raises(RemoteError) as err:
        _adopt(shared_daemon, sid, path)
    assert err.value.code == "bad_request"
    assert "is not a session transcript of the store" in str(err.value)
    with shared_daemon.client() as c:  # nothing appended to it, and the daemon serves on
        c.flush()
    assert path.read_bytes() == data


def test_a_project_dir_linked_into_the_trash_is_refused(shared_daemon):
    sid = str(uuidlib.uuid4())
    trashed = _places(shared_daemon.root, sid)["trash"]
    data = _transcript(trashed)
    link = projects_dir(shared_daemon.root) / f"-linked-{sid[:8]}"
    link.parent.mkdir(exist_ok=True, mode=0o700)  # a worker's first test: no session made projects/ yet
    os.symlink(trashed.parent, link)
    with pytest.raises(RemoteError) as err:
        _adopt(shared_daemon, sid, link / trashed.name)
    assert err.value.code == "bad_request"
    assert trashed.read_bytes() == data


@pytest.mark.parametrize("how", ["outside the root", "dot-dot", "another session's name", "relative"])
def test_a_path_that_names_another_file_is_refused(shared_daemon, short_tmp, how):
    sid = str(uuidlib.uuid4())
    project = projects_dir(shared_daemon.root) / "-p"
    path = {
        "outside the root": short_tmp / "elsewhere" / f"{sid}.jsonl",
        "dot-dot": project / ".." / ".." / SPOOL_DIR / f"{sid}.jsonl",
        "another session's name": project / f"{uuidlib.uuid4()}.jsonl",
        "relative": Path("projects") / "-p" / f"{sid}.jsonl",
    }[how]
    _transcript(path if path.is_absolute() else shared_daemon.root / path)
    with pytest.raises(RemoteError) as err:
        _adopt(shared_daemon, sid, path)
    assert err.value.code in ("bad_request", "permission_denied")


def test_a_main_transcript_in_any_project_dir_is_adopted(shared_daemon):
    """The positive case: a project dir the daemon would not have made from this
    cwd (a hash variant, another tool's) is where later appends go."""
    sid = str(uuidlib.uuid4())
    path = projects_dir(shared_daemon.root) / f"-work-adopt-project-{sid[:6]}" / f"{sid}.jsonl"
    _transcript(path)
    with shared_daemon.client() as c:
        got = c.call(m.Adopt(id=c.next_id(), session=sid, path=str(path)))
        assert got.path == str(path)
        more = user("appended after the adopt")
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(more)], durability="written"))
        c.call(m.Close(id=c.next_id(), session=sid))
    assert more["uuid"] in [e.get("uuid") for e in read_entries(path)]
