"""Where secrets stop, end to end on real daemons and real files: export
redacts by default (all formats), ``sessiond secrets`` lists them without
their values, ``secrets --redact`` replaces a session's files through the
trash (the original kept byte for byte, the daemon writing the new file after)
and refuses a live session."""

from __future__ import annotations

import json
import uuid

from sessiond.secrets import fingerprint
from tests.helpers import assistant, line, main_path, read_entries, user
from tests.secrets.fakes import fakes

CWD = "/work/project"


def _secrets():
    f = fakes(7)
    return f[3].value, f[12].value  # a GitHub token, a Stripe live key


def _session(d, sid: str | None = None) -> tuple[str, str, str]:
    sid = sid or str(uuid.uuid4())
    github, stripe = _secrets()
    entries = [
        user(f"deploy with GITHUB_TOKEN={github}", timestamp="2026-01-01T10:00:00.000Z"),
        {**assistant("", timestamp="2026-01-01T10:00:01.000Z"), "message": {"role": "assistant", "id": "msg_1", "content": [
            {"type": "thinking", "thinking": "the user gave a token", "signature": "EqQBCkYIBxgCKkB" + "x" * 40},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "cat .env"}}]}},
        user("", timestamp="2026-01-01T10:00:02.000Z", message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": f"DEBUG=1\nSTRIPE_KEY={stripe}\nPORT=80\n"}]}),
        assistant("Both keys are now in this transcript; rotate them.", timestamp="2026-01-01T10:00:03.000Z"),
    ]
    parent = None
    for e in entries:
        e["parentUuid"], parent = parent, e["uuid"]
    d.cli("--no-autostart", "append", "--cwd", CWD, "--session", sid, input=b"\n".join(line(e) for e in entries))
    return sid, github, stripe


def test_export_redacts_every_format_by_default(daemon_factory):
    d = daemon_factory().start()
    sid, github, stripe = _session(d)
    original = main_path(d.root, CWD, sid).read_bytes()
    for fmt in ("markdown", "html", "jsonl"):
        r = d.cli("export", sid, "--cwd", CWD, "--format", fmt)
        out = r.stdout.decode()
        assert github not in out and stripe not in out, fmt
        assert f"[REDACTED:github-token:{fingerprint(github)}]" in out
        assert f"[REDACTED:stripe-secret-key:{fingerprint(stripe)}]" in out
        assert b"redacted 2 secrets (--no-redact keeps them)" in r.stderr
    lines = d.cli("export", sid, "--cwd", CWD, "--format", "jsonl").stdout.splitlines()
    before = [json.loads(x) for x in original.splitlines()]
    after = [json.loads(x) for x in lines]  # every line still JSON
    assert [e["uuid"] for e in after] == [e["uuid"] for e in before]
    assert [e.get("parentUuid") for e in after] == [e.get("parentUuid") for e in before]
    assert after[1]["message"]["content"][0]["signature"] == before[1]["message"]["content"][0]["signature"]
    assert d.cli("export", sid, "--cwd", CWD, "--format", "jsonl", "--no-redact").stdout == original
    assert github in d.cli("export", sid, "--cwd", CWD, "--no-redact").stdout.decode()


def test_secrets_lists_where_they_are_never_their_values(daemon_factory):
    d = daemon_factory().start()
    sid, github, stripe = _session(d)
    clean = str(uuid.uuid4())
    d.cli("--no-autostart", "append", "--cwd", CWD, "--session", clean, input=line(user("nothing to see")))
    r = d.cli("secrets", "--cwd", CWD, "--json", check=False)
    assert r.returncode == 1  # secrets found
    report = json.loads(r.stdout)
    assert github not in r.stdout.decode() + r.stderr.decode() and stripe not in r.stdout.decode()
    assert {(f["session"], f["line"], f["kind"], f["fingerprint"]) for f in report["findings"]} == {
        (sid, 1, "github-token", fingerprint(github)), (sid, 3, "stripe-secret-key", fingerprint(stripe))}
    assert report["files"] == 2 and report["bytes"] > 0
    human = d.cli("secrets", "--all", check=False)
    assert human.returncode == 1 and f"{sid}  line 1  github-token  {fingerprint(github)}" in human.stdout.decode()
    assert github not in human.stdout.decode() + human.stderr.decode()
    assert d.cli("secrets", clean, "--cwd", CWD).returncode == 0  # one session, none in it
    short = str(uuid.uuid4())  # a key in a prompt short enough to be the whole title the report names it by
    d.cli("--no-autostart", "append", "--cwd", CWD, "--session", short, input=line(user(f"use {github}")))
    titled = d.cli("secrets", short, "--cwd", CWD, check=False)
    assert titled.returncode == 1 and github not in titled.stdout.decode() + titled.stderr.decode()
    assert f"“use [REDACTED:github-token:{fingerprint(github)}]”" in titled.stdout.decode()
    outside = d.root.parent / "elsewhere.jsonl"  # any transcript by its path, read only
    outside.write_bytes(main_path(d.root, CWD, sid).read_bytes())
    r = d.cli("secrets", str(outside), "--json", check=False)
    assert r.returncode == 1 and len(json.loads(r.stdout)["findings"]) == 2
    assert outside.read_bytes() == main_path(d.root, CWD, sid).read_bytes()


def test_redact_goes_through_the_trash_and_the_daemon_writes_the_new_file(daemon_factory):
    d = daemon_factory().start()
    sid, github, stripe = _session(d)
    path = main_path(d.root, CWD, sid)
    original = path.read_bytes()
    r = d.cli("secrets", "--redact", sid, "--cwd", CWD, "--json")
    done = json.loads(r.stdout)
    assert done["secrets"] == 2 and done["entry"].endswith(f"{sid}+redacted")
    now = path.read_bytes()
    assert github.encode() not in now and stripe.encode() not in now
    assert [json.loads(x)["uuid"] for x in now.splitlines()] == [json.loads(x)["uuid"] for x in original.splitlines()]
    kept = d.root / ".trash" / done["entry"] / "files" / path.relative_to(d.root)
    assert kept.read_bytes() == original  # the original, whole, until the trash is emptied
    listed = json.loads(d.cli("trash", "--json").stdout)
    assert [e["reason"] for e in listed if e["session"] == sid] == ["redact"]
    # The session goes on: the daemon appends to the redacted file, not to the trashed one.
    d.cli("--no-autostart", "append", "--cwd", CWD, "--session", sid,
          input=line(user("after the redaction", parentUuid=json.loads(now.splitlines()[-1])["uuid"])))
    d.cli("flush")
    assert read_entries(path)[-1]["message"]["content"] == "after the redaction"
    assert kept.read_bytes() == original
    assert d.cli("secrets", sid, "--cwd", CWD).returncode == 0
    assert "rotate them" in d.cli("show", sid, "--cwd", CWD).stdout.decode()
    refused = d.cli("restore", sid, check=False)  # nothing is put back over the redacted file
    assert refused.returncode == 1 and b"Traceback" not in refused.stderr
    assert b"after the redaction" in path.read_bytes() and github.encode() not in path.read_bytes()
    d.cli("trash", "empty", "--yes")
    assert not kept.exists() and b"after the redaction" in path.read_bytes()


def test_redact_refuses_a_live_session(daemon_factory):
    d = daemon_factory().start()
    sid, github, _ = _session(d)
    path = main_path(d.root, CWD, sid)
    before = path.read_bytes()
    with d.client() as client, client.session(sid, CWD) as s:
        s.append(user("still working", parentUuid=None))
        r = d.cli("secrets", "--redact", sid, "--cwd", CWD, check=False)
        assert r.returncode != 0 and b"is live" in r.stderr and b"Traceback" not in r.stderr
    assert github.encode() in path.read_bytes() and path.read_bytes().startswith(before)
    assert not (d.root / ".trash").exists() or not any((d.root / ".trash").glob(f"*{sid}+redacted"))


def test_redact_without_a_daemon_and_nothing_to_redact(daemon_factory):
    d = daemon_factory().start()
    sid, github, _ = _session(d)
    clean = str(uuid.uuid4())
    d.cli("--no-autostart", "append", "--cwd", CWD, "--session", clean, input=line(user("nothing to see")))
    d.stop()
    path = main_path(d.root, CWD, sid)
    r = d.cli("--no-autostart", "secrets", "--redact", sid, "--cwd", CWD)
    assert b"redacted 2 secrets in 1 file" in r.stderr and github.encode() not in path.read_bytes()
    clean_path = main_path(d.root, CWD, clean)
    data = clean_path.read_bytes()
    r = d.cli("--no-autostart", "secrets", "--redact", clean, "--cwd", CWD)
    assert b"nothing rewritten" in r.stderr and clean_path.read_bytes() == data
    bad = d.cli("--no-autostart", "secrets", "--redact", "--all", check=False)
    assert bad.returncode == 2 and b"Traceback" not in bad.stderr


def test_a_redacted_entry_names_only_the_sessions_transcripts():
    """A ``+redacted`` manifest read back from the trash is untrusted like any
    other: an item that is not the session's main or agent transcript is refused."""
    import pytest

    from sessiond.store.trash import BadManifest, check_entry
    from sessiond.wire.records import TrashedItem, TrashEntry

    sid, other = str(uuid.uuid4()), str(uuid.uuid4())
    name = f"20260101T000000000000Z-{sid}+redacted"

    def entry(*rels: str) -> TrashEntry:
        return TrashEntry(name=name, session=sid, project="-p", trashedAt="2026-01-01T00:00:00Z", reason="redact",
                          bytes=1, files=len(rels), state="trashed",
                          items=[TrashedItem(path=r, raw=None, kind="file", bytes=1, files=1) for r in rels])

    check_entry(entry(f"projects/-p/{sid}.jsonl", f"projects/-p/{sid}/subagents/agent-a1.jsonl"), name)
    for bad in (f"projects/-p/{other}.jsonl", f"projects/-p/{sid}/tool-results/x.txt", f"projects/../{sid}.jsonl",
                f"projects/-p/{sid}.jsonl.torn"):
        with pytest.raises(BadManifest):
            check_entry(entry(bad), name)
