"""What a newcomer's first commands say: ``show`` ends with the command that
resumes the session, a torn file names ``sessiond repair``, ``check`` of a file
that is no transcript says so (not BAD, as if it were a damaged one), and
``import`` of a transcript copied outside any project dir puts it in the
project its entries record, not in one named after the folder."""

from __future__ import annotations

import json
import shutil
import uuid

from tests.conftest import DaemonProc
from tests.helpers import assistant, line, main_path, user

CWD = "/home/dev/hint-project"


def conversation(daemon: DaemonProc, cwd: str = CWD) -> str:
    sid = str(uuid.uuid4())
    entries = [user("why is the build red", "u1", parentUuid=None, cwd=cwd, sessionId=sid),
               assistant("a flaky test", "a1", parentUuid="u1", cwd=cwd, sessionId=sid)]
    daemon.cli("append", "--cwd", cwd, "--session", sid, "--durability", "written",
               input=b"".join(line(e) + b"\n" for e in entries))
    return sid


def test_show_ends_with_the_command_that_resumes_it(daemon: DaemonProc, short_tmp):
    sid = conversation(daemon)
    here = daemon.cli("show", sid, "--cwd", CWD, "--no-pager").stdout.decode().rstrip("\n").splitlines()
    assert here[-1] == f"to resume it: sessiond resume {sid}", here[-3:]
    elsewhere = daemon.cli("show", sid, "--cwd", "/home/dev/other", "--no-pager").stdout.decode().splitlines()
    assert elsewhere[-1] == f"to resume it: cd {CWD} && sessiond resume {sid}"
    outside = short_tmp / f"{sid}.jsonl"  # a copy outside the store: resume needs it imported first
    shutil.copy(main_path(daemon.root, CWD, sid), outside)
    copied = daemon.cli("show", str(outside), "--no-pager").stdout.decode().splitlines()
    # Imported, it lands in the project its cwd names; resume finds it from there (issue 29: the
    # suggestion must work, and `sessiond resume` refuses another project's session from here).
    assert copied[-1] == f"to resume it: sessiond import {outside} && cd {CWD} && sessiond resume {sid}"
    assert "to resume" not in daemon.cli("show", sid, "--cwd", CWD, "--json").stdout.decode()  # --json unchanged


def test_show_of_a_torn_file_names_sessiond_repair(daemon: DaemonProc):
    sid = conversation(daemon)
    path = main_path(daemon.root, CWD, sid)
    with open(path, "ab") as f:
        f.write(b'{"type":"user","uuid":"u2","mess')  # a writer died mid-line
    r = daemon.cli("show", sid, "--cwd", CWD, "--no-pager", check=False)
    err = r.stderr.decode()
    assert r.returncode == 1 and b"a flaky test" in r.stdout
    assert f"`sessiond repair {sid}` moves it to a .torn file" in err and err.count("\n") == 1, err
    daemon.cli("repair", sid)  # ... and that command does it
    assert daemon.cli("show", sid, "--cwd", CWD, "--no-pager").returncode == 0


def test_check_of_a_file_that_is_no_transcript_says_so(daemon: DaemonProc, short_tmp):
    empty = short_tmp / "empty.jsonl"
    empty.write_bytes(b"")
    r = daemon.cli("check", "/etc/passwd", str(empty), check=False)
    out = r.stdout.decode()
    assert r.returncode == 1 and "BAD" not in out, out
    assert "NOT  /etc/passwd: not a transcript (none of its" in out
    assert f"NOT  {empty}: not a transcript (empty)" in out
    assert out.splitlines()[-1] == "2 files checked, 0 unhealthy, 2 not transcripts, 0 with warnings"


def test_import_of_a_file_outside_any_project_dir_uses_its_recorded_cwd(daemon: DaemonProc, short_tmp):
    sid = str(uuid.uuid4())
    torn = short_tmp / "torn"
    torn.mkdir()
    lines = [user("recovered work", "u1", parentUuid=None, cwd=CWD, sessionId=sid),
             assistant("yes", "a1", parentUuid="u1", cwd=CWD, sessionId=sid)]
    (torn / f"{sid}.jsonl").write_bytes(b"".join(line(e) + b"\n" for e in lines))
    daemon.cli("import", str(torn / f"{sid}.jsonl"))
    projects = sorted(p.name for p in (daemon.root / "projects").iterdir())
    assert projects == ["-home-dev-hint-project"], projects  # not "torn"
    assert json.loads(daemon.cli("list", "--cwd", CWD, "--json").stdout)[0]["sessionId"] == sid
    anonymous = torn / f"{uuid.uuid4()}.jsonl"
    anonymous.write_bytes(line({"type": "user", "uuid": "u9", "message": {"role": "user", "content": "hi"}}) + b"\n")
    r = daemon.cli("import", str(anonymous), check=False)
    assert r.returncode == 1 and b"is not in a project dir and records no cwd" in r.stderr and b"Traceback" not in r.stderr
