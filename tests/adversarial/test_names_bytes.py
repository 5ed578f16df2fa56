"""File and directory names that are not UTF-8, made with bytes paths in a real
store under a real daemon: listed, searched, imported, measured, checked and
shown like any other name; escaped in human output; in ``--json`` each byte that
is not UTF-8 is the escape ``\\udcXX`` (``json.loads`` then ``os.fsencode``
gives the name back). Never an ``io_error``, a refused answer, a traceback, or
an indexer that restarts.

The CLI runs with a strict UTF-8 stdout (``PYTHONIOENCODING=utf-8``, what a
UTF-8 locale gives): a C locale's stdout writes surrogates back as the raw
bytes and would hide a name that cannot be printed.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessiond.wire import messages as m
from sessiond.wire.framing import encode
from tests.conftest import DaemonProc, short_dir, stopped_after
from tests.helpers import CliProcess, line, user, wait_until

from .attacks import raw_conn, read_answers

STRICT = {"PYTHONIOENCODING": "utf-8"}
SID = str(uuid.UUID(int=0xB17E5))
PROJECT = b"-proj\xff"


def write(path: bytes, *entries: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"".join(line(e) + b"\n" for e in entries))


def plant(projects: bytes) -> None:
    """A session in a project dir that is not UTF-8, an agent file that is not
    either, and a ``.jsonl`` whose name is not a session id (nor UTF-8)."""
    d = projects + b"/" + PROJECT
    write(d + b"/" + SID.encode() + b".jsonl", {**user("needle alpha"), "sessionId": SID, "cwd": "/proj"})
    write(d + b"/" + SID.encode() + b"/subagents/agent-\xfe.jsonl", {**user("needle beta"), "sessionId": SID})
    write(d + b"/\xff.jsonl", user("needle gamma"))


@pytest.fixture(scope="module")
def store() -> Iterator[DaemonProc]:
    with short_dir() as base, stopped_after(DaemonProc(base)) as d:
        plant(os.fsencode(d.root) + b"/projects")
        yield d.start()


def cli(d: DaemonProc, *args: str, ok: bool = True) -> bytes:
    p = d.cli(*args, env=STRICT, check=False, timeout=60)
    assert b"Traceback" not in p.stderr, p.stderr.decode(errors="replace")
    if ok:
        assert p.returncode == 0, (args, p.stderr.decode(errors="replace"))
    return p.stdout


def main_file(root: Path) -> bytes:
    return os.fsencode(root) + b"/projects/" + PROJECT + b"/" + SID.encode() + b".jsonl"


def test_the_daemon_lists_them_over_the_wire(store: DaemonProc) -> None:
    s = raw_conn(store.socket)
    try:
        s.sendall(encode(m.List(id=1, all=True)) + encode(m.Usage(id=2, all=True)))
        listed, usage = sorted(read_answers(s, 2), key=lambda a: a.id)
    finally:
        s.close()
    assert isinstance(listed, m.Listed), listed
    assert [os.fsencode(i.path) for i in listed.sessions] == [main_file(store.root)]
    assert isinstance(usage, m.UsageResult), usage
    assert [os.fsencode(p.project) for p in usage.usage.projects] == [PROJECT]


def test_list_shows_them(store: DaemonProc) -> None:
    assert SID[:8].encode() in cli(store, "list", "--all")
    (info,) = json.loads(cli(store, "list", "--all", "--json"))
    assert os.fsencode(info["path"]) == main_file(store.root)


def test_search_finds_text_in_them_and_the_indexer_keeps_running(store: DaemonProc) -> None:
    def found() -> list[dict]:
        return json.loads(cli(store, "search", "beta", "--all", "--json", ok=False))  # none yet: exit 1

    wait_until(lambda: found() != [], "the agent file's line in the index", timeout=30)
    (hit,) = found()
    assert os.fsencode(hit["project"]) == PROJECT
    assert os.fsencode(hit["file"]).endswith(b"/subagents/agent-\xfe.jsonl")
    human = cli(store, "search", "beta", "--all")
    assert b"/proj \xc2\xb7" in human and b"subagent \\xfe" in human  # the project by its cwd, as every command names it
    with store.client() as c:
        index = c.status().index
    assert index is not None and index["running"] and index["restarts"] == 0, index
    assert "Traceback" not in store.log_text()


def test_du_check_and_show_take_them(store: DaemonProc) -> None:
    usage = json.loads(cli(store, "du", "--all", "--json"))
    assert [os.fsencode(p["project"]) for p in usage["projects"]] == [PROJECT]
    assert b"(/proj)" in cli(store, "du", "--all")  # the project by its cwd (--json keeps the dir's name's bytes)
    path = os.fsdecode(main_file(store.root))
    agent = os.fsdecode(main_file(store.root)[:-6] + b"/subagents/agent-\xfe.jsonl")
    assert b"1 line" in cli(store, "check", path)
    assert b"needle alpha" in cli(store, "show", path)
    assert b"needle beta" in cli(store, "show", agent)
    assert b"needle alpha" in cli(store, "show", SID)
    for fmt in ("markdown", "html"):  # the subagent's name is in the document, escaped
        assert b"agent" in cli(store, "export", "--format", fmt, SID)


def test_import_copies_them_byte_for_byte(store: DaemonProc, short_tmp: Path) -> None:
    src = os.fsencode(short_tmp) + b"/src"
    sid = str(uuid.uuid4())
    d = src + b"/-elsewhere\xfa"
    write(d + b"/" + sid.encode() + b".jsonl", {**user("imported one"), "sessionId": sid, "cwd": "/x"})
    write(d + b"/" + sid.encode() + b"/subagents/agent-\xfb\xfc.jsonl", {**user("imported two"), "sessionId": sid})
    (report,) = json.loads(cli(store, "import", "--json", os.fsdecode(src)))["sessions"]
    assert os.fsencode(report["project"]) == b"-elsewhere\xfa"
    assert {f["status"] for f in report["files"]} == {"imported"}
    dest = os.fsencode(store.root) + b"/projects/-elsewhere\xfa/" + sid.encode()
    with open(d + b"/" + sid.encode() + b"/subagents/agent-\xfb\xfc.jsonl", "rb") as a, \
            open(dest + b"/subagents/agent-\xfb\xfc.jsonl", "rb") as b:
        assert a.read() == b.read()
    listed = json.loads(cli(store, "list", "--all", "--json"))
    assert dest + b".jsonl" in [os.fsencode(i["path"]) for i in listed]


def test_a_jsonl_not_named_for_a_session_is_passed_over_as_any_other(store: DaemonProc) -> None:
    """``\\xff.jsonl`` is no session id: not listed, as ``notes.jsonl`` is not,
    and its presence changes nothing else; named by its path it is shown and
    checked like any transcript."""
    listed = json.loads(cli(store, "list", "--all", "--json"))
    assert all(not os.fsencode(i["path"]).endswith(b"/\xff.jsonl") for i in listed)
    assert main_file(store.root) in [os.fsencode(i["path"]) for i in listed]
    odd = os.fsdecode(os.fsencode(store.root) + b"/projects/" + PROJECT + b"/\xff.jsonl")
    assert b"needle gamma" in cli(store, "show", odd)
    assert b"1 line" in cli(store, "check", odd)


def test_watch_streams_a_new_agent_file_named_in_bytes(store: DaemonProc) -> None:
    """The daemon pushes the agent file's lines (``Entries.file`` not UTF-8) and
    ``watch --agents --json`` tags them with that name escaped."""
    sid = str(uuid.uuid4())
    d = os.fsencode(store.root) + b"/projects/" + PROJECT
    write(d + b"/" + sid.encode() + b".jsonl", {**user("watched"), "sessionId": sid, "cwd": "/proj"})
    main = d + b"/" + sid.encode() + b".jsonl"
    with CliProcess("watch", "--agents", "--json", "-n", "0", os.fsdecode(main), env={**store.env, **STRICT}) as w:
        for tick in range(60):  # until one is streamed: the subscription is on (it starts at the end)
            with open(main, "ab") as f:
                f.write(line(user(f"tick {tick}")) + b"\n")
            try:
                w.line(timeout=0.5)
                break
            except AssertionError:
                continue
        write(d + b"/" + sid.encode() + b"/subagents/agent-\xfd.jsonl", user("from the agent"))
        while (pushed := json.loads(w.line()))["message"]["content"].startswith("tick"):
            pass
    assert pushed["message"]["content"] == "from the agent"
    assert os.fsencode(pushed["sessiondFile"]) == sid.encode() + b"/subagents/agent-\xfd.jsonl"
