"""``import`` takes a transcript whatever its file name (issue 29).

A shared ``chat.jsonl`` or an Entire checkpoint ``full.jsonl`` is the session
its entries name, imported as ``<id>.jsonl`` into the project its cwd names;
a second file of the same session (a later checkpoint, redacted differently)
is merged into it by uuid, never over it; and the command ``show`` suggests
for the file before it is imported works as printed.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid

from sessiond.store.paths import project_dir
from tests.conftest import CORPUS

CHECKPOINT = CORPUS / "entireio__cli__1e-868c83dbb7-0-full.jsonl"
SID = "a318ad73-17a2-4575-845d-8952a1e5958b"
RECORDED_CWD = "/Users/soph/Work/entire/devenv/cli"


def _json(r: subprocess.CompletedProcess) -> dict:
    return json.loads(r.stdout)


def test_a_checkpoint_named_full_jsonl_is_the_session_its_entries_name(daemon, short_tmp):
    src = short_tmp / "checkpoints" / "full.jsonl"
    src.parent.mkdir()
    src.write_bytes(CHECKPOINT.read_bytes())
    out = _json(daemon.cli("import", str(src), "--json"))
    assert [(s["session"], s["status"]) for s in out["sessions"]] == [(SID, "imported")] and out["skipped"] == []
    stored = project_dir(daemon.root, RECORDED_CWD) / f"{SID}.jsonl"
    assert stored.read_bytes() == CHECKPOINT.read_bytes()
    again = _json(daemon.cli("import", str(src), "--json"))
    assert again["counts"]["unchanged"] == 1


def test_two_files_of_one_session_are_merged_by_uuid(daemon, short_tmp):
    first = CHECKPOINT.read_bytes()
    lines = first.rstrip(b"\n").split(b"\n")
    # A later checkpoint of the same session: an early line redacted differently
    # (same uuid, other bytes), and two entries the first one did not have yet.
    later = list(lines)
    obj = json.loads(later[3])
    assert obj.get("uuid")
    obj["cwd"] = obj["cwd"] + "-REDACTED"
    later[3] = json.dumps(obj).encode()
    last = json.loads(next(raw for raw in reversed(lines) if b'"uuid"' in raw))
    added = []
    for i, text in enumerate(("one more thing", "sure")):
        u = str(uuid.uuid4())
        added.append({"parentUuid": last["uuid"], "isSidechain": False, "type": "user" if i == 0 else "assistant",
                      "message": {"role": "user" if i == 0 else "assistant", "content": text}, "uuid": u,
                      "timestamp": f"2026-02-01T00:00:0{i}.000Z", "sessionId": SID, "cwd": RECORDED_CWD})
        last = added[-1]
    added_lines = [json.dumps(e).encode() for e in added]
    a = short_tmp / "a" / "full.jsonl"
    b = short_tmp / "b" / "chat.jsonl"
    for p, body in ((a, first), (b, b"\n".join(later + added_lines) + b"\n")):
        p.parent.mkdir()
        p.write_bytes(body)
    out = _json(daemon.cli("import", str(a), str(b), "--json"))
    assert [(s["session"], s["status"]) for s in out["sessions"]] == [(SID, "imported")]
    assert [f["status"] for f in out["sessions"][0]["files"]] == ["imported", "merged"]
    stored = project_dir(daemon.root, RECORDED_CWD) / f"{SID}.jsonl"
    body = stored.read_bytes()
    sep = b"" if first.endswith(b"\n") else b"\n"
    assert body == first + sep + b"\n".join(added_lines) + b"\n"  # the store's lines as they were, the new ones after
    assert _json(daemon.cli("import", str(b), "--json"))["counts"]["unchanged"] == 1  # merged once
    shown = _json(daemon.cli("show", SID, "--cwd", RECORDED_CWD, "--json"))
    assert shown["chain"][-2:] == [e["uuid"] for e in added]


def test_what_show_suggests_for_a_chat_jsonl_works(daemon, short_tmp):
    here = short_tmp / "proj"
    here.mkdir()
    sid = str(uuid.uuid4())
    entries = [{"parentUuid": None, "isSidechain": False, "type": "user", "message": {"role": "user", "content": "hi"},
                "uuid": "u1", "timestamp": "2026-01-01T00:00:00.000Z", "sessionId": sid, "cwd": str(here)},
               {"parentUuid": "u1", "isSidechain": False, "type": "assistant",
                "message": {"role": "assistant", "id": "m1", "content": [{"type": "text", "text": "hello"}]},
                "uuid": "a1", "timestamp": "2026-01-01T00:00:01.000Z", "sessionId": sid, "cwd": str(here)}]
    shared = short_tmp / "chat.jsonl"
    shared.write_text("".join(json.dumps(e) + "\n" for e in entries))
    shown = daemon.cli("show", str(shared), "--no-pager").stdout.decode().splitlines()
    suggestion = shown[-1].removeprefix("to resume it: ")
    assert suggestion == f"sessiond import {shared} && cd {here} && sessiond resume {sid}", shown[-1]
    cli = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "sessiond.client.cli"))
    r = subprocess.run(["bash", "-c", suggestion.replace("sessiond ", cli + " ") + " --json"], cwd=short_tmp,
                       env={**os.environ, **daemon.env}, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    resumed = json.loads(r.stdout.decode().splitlines()[-1])
    assert resumed["sessionId"] == sid and resumed["chain"] == ["u1", "a1"]


def test_a_session_file_named_by_an_id_in_another_form_is_imported_by_its_canonical_name(daemon, short_tmp):
    """``ABC….jsonl`` and ``{abc…}.jsonl`` (an id any command accepts, in
    another form) are imported as ``abc….jsonl`` with their subagent dirs: the
    name every command finds a session by. Kept as they were, such sessions were
    listed but no command reached them, and once pruned not even restore."""
    upper, braced = "AAAAAAAA-2222-4333-8444-555555555555", "{bbbbbbbb-2222-4333-8444-555555555555}"
    project = short_tmp / "cc" / "projects" / "-tmp-proj"
    (project / upper / "subagents").mkdir(parents=True)
    files = {}
    for name in (upper, braced):
        sid = name.strip("{}").lower()
        entry = {"type": "user", "uuid": str(uuid.uuid4()), "parentUuid": None, "sessionId": sid, "cwd": "/tmp/proj",
                 "message": {"role": "user", "content": f"hello from {name}"}, "timestamp": "2025-01-01T00:00:00Z"}
        files[sid] = json.dumps(entry).encode() + b"\n"
        (project / f"{name}.jsonl").write_bytes(files[sid])
    agent = b'{"type":"user","uuid":"s1","isSidechain":true,"sessionId":"aaaaaaaa-2222-4333-8444-555555555555"}\n'
    (project / upper / "subagents" / "agent-x1.jsonl").write_bytes(agent)
    out = _json(daemon.cli("import", str(short_tmp / "cc"), "--json"))
    assert sorted((s["session"], s["status"]) for s in out["sessions"]) == [(sid, "imported") for sid in sorted(files)]
    stored = daemon.root / "projects" / "-tmp-proj"
    assert sorted(p.name for p in stored.iterdir()) == sorted([*(f"{sid}.jsonl" for sid in files), upper.lower()])
    assert (stored / upper.lower() / "subagents" / "agent-x1.jsonl").read_bytes() == agent
    for sid, data in files.items():
        assert (stored / f"{sid}.jsonl").read_bytes() == data
        assert "hello from" in daemon.cli("show", sid[:8], "--cwd", "/tmp/proj").stdout.decode()
    daemon.cli("rm", upper.lower(), "--cwd", "/tmp/proj")
    restored = _json(daemon.cli("restore", upper.lower(), "--json"))
    assert restored["session"] == upper.lower() and restored["state"] == "restored"  # done: not "restoring"
    assert (stored / f"{upper.lower()}.jsonl").read_bytes() == files[upper.lower()]


def test_a_dir_import_says_why_a_file_was_skipped_and_how_to_take_it(daemon, short_tmp):
    """A transcript in a projects dir whose name is no session id is not taken
    by a dir import (its name is not a session's); it is said so, with the way
    to take it (name the file), not called unreadable."""
    project = short_tmp / "cc" / "projects" / "-tmp-proj"
    project.mkdir(parents=True)
    (project / "full.jsonl").write_bytes(CHECKPOINT.read_bytes())
    r = daemon.cli("import", str(short_tmp / "cc"), check=False)
    err = r.stderr.decode()
    assert r.returncode == 1 and "unreadable:" not in err and "Traceback" not in err
    assert f"skipped: {project / 'full.jsonl'}: not named <session id>.jsonl (name the file itself" in err
    took = _json(daemon.cli("import", str(project / "full.jsonl"), "--json"))
    assert [(s["session"], s["status"]) for s in took["sessions"]] == [(SID, "imported")]
