"""One session, one file: upper-case and braced ids name the canonical session
(lower-case, no braces) on the daemon, the fallback and the readers."""

import json
import uuid

import pytest

from sessiond.client.fallback import direct_append
from sessiond.store.paths import check_session_id, is_session_id
from sessiond.wire import messages as m
from sessiond.wire.errors import SessiondError
from tests.helpers import line, main_path, read_entries, user

CWD = "/work/project"


def test_check_session_id_returns_the_canonical_form():
    sid = str(uuid.uuid4())
    assert check_session_id(sid.upper()) == sid
    assert check_session_id("{" + sid.upper() + "}") == sid
    assert is_session_id("{" + sid + "}")
    for bad in ["{" + sid, sid + "}", "{{" + sid + "}}", sid + "\n", "../" + sid]:
        with pytest.raises(SessiondError):
            check_session_id(bad)


def test_daemon_writes_every_spelling_of_an_id_to_one_file(daemon):
    sid = str(uuid.uuid4())
    spellings = [sid.upper(), "{" + sid + "}", sid, "{" + sid.upper() + "}"]
    with daemon.client() as c:
        for i, spelled in enumerate(spellings):
            r = c.call(m.Append(id=c.next_id(), session=spelled, cwd=CWD, entries=[line(user(f"q{i}"))], durability="written"))
            assert r.accepted == 1
        opened = c.call(m.Open(id=c.next_id(), session=sid.upper(), cwd=CWD))
        assert opened.session == sid
        for spelled in spellings:
            c.call(m.Close(id=c.next_id(), session=spelled))
    project = main_path(daemon.root, CWD, sid).parent
    assert sorted(p.name for p in project.iterdir()) == [f"{sid}.jsonl"]
    assert [e["message"]["content"] for e in read_entries(project / f"{sid}.jsonl")] == ["q0", "q1", "q2", "q3"]


def test_fallback_and_readers_use_the_canonical_file(daemon_factory):
    d = daemon_factory()  # not started: the CLI writes directly
    sid = str(uuid.uuid4())
    first = user("first")
    res = direct_append(d.root, CWD, sid.upper(), [line(first)])
    assert res.written == 1
    second = user("second", parentUuid=first["uuid"])
    d.cli("--no-autostart", "append", "--cwd", CWD, "--session", "{" + sid.upper() + "}", input=line(second) + b"\n")
    path = main_path(d.root, CWD, sid)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    assert len(read_entries(path)) == 2
    shown = json.loads(d.cli("--no-autostart", "show", sid.upper(), "--cwd", CWD, "--json").stdout)
    assert shown["sessionId"] == sid and len(shown["messages"]) == 2
    tailed = d.cli("--no-autostart", "tail", "{" + sid + "}", "--cwd", CWD, "--json").stdout
    assert tailed.count(b"\n") == 2
