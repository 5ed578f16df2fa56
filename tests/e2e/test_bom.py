"""A transcript that starts with a UTF-8 BOM (saved by a Windows editor, or made
by PowerShell's ``>``) reads as if it had none, in every reader: resume, show,
fork, tail, list (the daemon's catalog and the CLI's own read), search (the
index fed by the follower, and the CLI's scan), check/repair, import (also a
flat agent file, whose first line names its session), the daemon's own scan
of a file it appends to, and append's input. Each test fails with the reader's
BOM handling taken out (``entries.readable_copy``, ``appending.entry_line``)."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from sessiond.client.resume.pipeline import load_transcript
from sessiond.store.bom import BOM
from sessiond.store.paths import project_dir
from tests.conftest import CORPUS, DaemonProc
from tests.helpers import assistant, line, read_entries, user, wait_until

pytestmark = pytest.mark.timeout(120)

CWD = "/work/bommed"


@pytest.fixture
def daemon(shared_daemon: DaemonProc) -> DaemonProc:
    return shared_daemon


def _entries(sid: str, cwd: str = CWD) -> list[dict]:
    common = {"sessionId": sid, "cwd": cwd, "isSidechain": False, "userType": "external"}
    first = user("Fix the ocelot parser", str(uuid.uuid4()), parentUuid=None, timestamp="2026-03-01T10:00:00.000Z", **common)
    second = assistant("The ocelot parser is fixed", str(uuid.uuid4()), parentUuid=first["uuid"],
                       timestamp="2026-03-01T10:00:05.000Z", **common)
    return [first, second]


def _bommed(entries: list[dict]) -> bytes:
    return BOM + b"".join(line(e) + b"\n" for e in entries)


def _write_session(d: DaemonProc, cwd: str = CWD) -> tuple[str, Path, list[dict]]:
    sid = str(uuid.uuid4())
    entries = _entries(sid, cwd)
    path = project_dir(d.root, cwd) / f"{sid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_bommed(entries))
    return sid, path, entries


def _offline(d: DaemonProc) -> dict[str, str]:
    """The environment of a CLI that finds no daemon and reads the files itself."""
    return {"SESSIOND_SOCKET": str(d.base / "none.sock"), "SESSIOND_NO_AUTOSTART": "1"}


def test_show_resume_fork_and_tail_keep_the_first_line(daemon):
    sid, path, entries = _write_session(daemon)
    shown = json.loads(daemon.cli("show", sid, "--cwd", CWD, "--json").stdout)
    assert shown["chain"] == [e["uuid"] for e in entries]
    assert shown["skippedLines"] == 0
    assert shown["messages"][0]["message"]["content"] == "Fix the ocelot parser"
    assert shown["interruption"] == "none"
    resumed = json.loads(daemon.cli("resume", sid, "--cwd", CWD, "--json").stdout)
    assert resumed["chain"] == shown["chain"]
    fork = daemon.cli("fork", sid, "--cwd", CWD).stdout.decode().split()[-1]
    forked = json.loads(daemon.cli("show", fork, "--cwd", CWD, "--json").stdout)
    assert [m["message"]["content"] for m in forked["messages"]][0] == "Fix the ocelot parser"
    tail = daemon.cli("tail", "-n", "5", sid, "--cwd", CWD, "--json").stdout.splitlines()
    assert [json.loads(t)["uuid"] for t in tail][0] == entries[0]["uuid"]


def test_list_takes_title_cwd_and_count_from_the_bom_line(daemon):
    sid, path, entries = _write_session(daemon, "/work/bommed-list")
    for env in ({}, _offline(daemon)):  # the daemon's catalog (it followed the file in), then the CLI's own read
        def listed():
            rows = json.loads(daemon.cli("list", "--cwd", "/work/bommed-list", "--json", env=env).stdout)  # noqa: B023 (called within this iteration)
            return [r for r in rows if r["sessionId"] == sid]
        wait_until(lambda: listed() and listed()[0]["title"] == "Fix the ocelot parser", f"the title listed ({env or 'daemon'})")
        row = listed()[0]
        assert row["cwd"] == "/work/bommed-list"
        assert row["messageCount"] == 2
        assert row["createdAt"].startswith("2026-03-01T10:00:00")


def test_search_finds_the_words_of_the_bom_line(daemon):
    sid, path, entries = _write_session(daemon, "/work/bommed-search")

    def hits(env=None):
        out = daemon.cli("search", "ocelot", "--cwd", "/work/bommed-search", "--role", "user", "--json", check=False, env=env)
        return [h["sessionId"] for h in json.loads(out.stdout or b"[]")]

    wait_until(lambda: hits() == [sid], "the first prompt indexed (the follower saw the file)", timeout=30)
    assert hits(_offline(daemon)) == [sid]  # the CLI's read of the same index
    shutil.rmtree(daemon.base / "offline-root", ignore_errors=True)
    bare = daemon.base / "offline-root"  # no index at all: the CLI scans the files
    shutil.copytree(daemon.root / "projects", bare / "projects")
    out = daemon.cli("search", "ocelot", "--cwd", "/work/bommed-search", "--role", "user", "--json",
                     env={**_offline(daemon), "SESSIOND_ROOT": str(bare)})
    assert [h["sessionId"] for h in json.loads(out.stdout)] == [sid]


def test_check_calls_a_bom_file_healthy_and_repair_leaves_it(daemon):
    sid, path, entries = _write_session(daemon)
    out = daemon.cli("check", str(path), "--json")
    (report,) = json.loads(out.stdout)["files"]
    assert report["unparseableLines"] == [] and report["danglingParents"] == []
    assert report["verdict"] == "ok"
    before = path.read_bytes()
    daemon.cli("repair", str(path))
    assert path.read_bytes() == before


def test_the_daemon_reads_a_bom_file_it_appends_to(daemon):
    sid, path, entries = _write_session(daemon)
    again = line(entries[0]) + b"\n"  # already in the file: the dedup scan must know the BOM line
    more = user("and the lynx parser", str(uuid.uuid4()), parentUuid=entries[1]["uuid"], sessionId=sid, cwd=CWD)
    daemon.cli("append", "--cwd", CWD, "--session", sid, "--durability", "written", "-", input=again + line(more) + b"\n")
    data = path.read_bytes()
    assert data.startswith(BOM)  # the file is the user's: never rewritten
    assert [e["uuid"] for e in (json.loads(x) for x in data[len(BOM):].splitlines())] == [entries[0]["uuid"], entries[1]["uuid"], more["uuid"]]


def test_append_of_a_file_saved_with_a_bom_sends_every_line(daemon, short_tmp):
    sid = str(uuid.uuid4())
    src = short_tmp / "from-powershell.jsonl"
    src.write_bytes(_bommed(_entries(sid)))
    out = daemon.cli("append", "--cwd", CWD, "--session", sid, "--durability", "written", str(src))
    assert out.returncode == 0 and b"skipped" not in out.stderr
    stored = project_dir(daemon.root, CWD) / f"{sid}.jsonl"
    assert not stored.read_bytes().startswith(BOM)  # nothing of the BOM reaches the store
    assert [e["message"]["content"] for e in read_entries(stored)][0] == "Fix the ocelot parser"


def test_import_brings_a_bom_session_and_a_bom_flat_agent_file(daemon, short_tmp):
    sid = str(uuid.uuid4())
    src = short_tmp / "src" / "projects" / "-work-bommed-import"
    src.mkdir(parents=True)
    (src / f"{sid}.jsonl").write_bytes(_bommed(_entries(sid, "/work/bommed-import")))
    agent = {"type": "user", "isSidechain": True, "agentId": "a1b2c3", "sessionId": sid, "uuid": str(uuid.uuid4()),
             "parentUuid": None, "cwd": "/work/bommed-import", "message": {"role": "user", "content": "look around"},
             "timestamp": "2026-03-01T10:00:01.000Z"}
    (src / "agent-a1b2c3.jsonl").write_bytes(BOM + line(agent) + b"\n")  # Claude Code 2.0.x: beside its session
    daemon.cli("import", str(src.parent))
    store = daemon.root / "projects" / "-work-bommed-import"
    assert (store / f"{sid}.jsonl").read_bytes() == (src / f"{sid}.jsonl").read_bytes()  # byte for byte
    rows = json.loads(daemon.cli("list", "--cwd", "/work/bommed-import", "--json").stdout)
    assert [(r["sessionId"], r["title"]) for r in rows] == [(sid, "Fix the ocelot parser")]
    assert (store / "agent-a1b2c3.jsonl").exists()
    daemon.cli("rm", sid, "--cwd", "/work/bommed-import")
    assert not (store / "agent-a1b2c3.jsonl").exists()  # the flat agent file went with its session: its first line was read


@pytest.mark.parametrize("src", sorted(CORPUS.glob("*.jsonl")), ids=lambda p: p.name[:48])
def test_every_corpus_file_resumes_the_same_with_a_bom(src, short_tmp):
    """The pure loader over each real transcript, BOM or none: the same result."""
    plain = short_tmp / src.name
    bommed = short_tmp / "bom" / src.name
    bommed.parent.mkdir()
    shutil.copyfile(src, plain)
    bommed.write_bytes(BOM + src.read_bytes())
    a, b = load_transcript(plain), load_transcript(bommed)
    assert (b.chain, b.messages, b.interruption, b.bridges, b.repairs, b.skippedLines, b.metadata) == \
           (a.chain, a.messages, a.interruption, a.bridges, a.repairs, a.skippedLines, a.metadata)
    assert os.path.basename(b.path) == os.path.basename(a.path)
