"""The CLI contract: autostart, status/stop never autostart, errors are one line."""

import json
import uuid

from tests.conftest import DaemonProc, run_cli
from tests.helpers import assistant, line, main_path, read_entries, user

CWD = "/work/project"


def test_status_and_stop_never_start_a_daemon(daemon_factory):
    d: DaemonProc = daemon_factory()
    st = d.cli("status", check=False)
    assert st.returncode == 1 and b"not running" in st.stderr and b"Traceback" not in st.stderr
    js = d.cli("status", "--json", check=False)
    assert js.returncode == 1 and json.loads(js.stdout)["running"] is False
    stop = d.cli("stop", check=False)
    assert stop.returncode == 0 and b"no daemon running" in stop.stderr
    assert not d.socket.exists()


def test_append_autostarts_the_daemon_and_status_reports_it(daemon_factory):
    d: DaemonProc = daemon_factory()
    sid = str(uuid.uuid4())
    entries = [user("hi"), assistant("hello")]
    out = d.cli("append", "--cwd", CWD, "--session", sid, "--durability", "written", "--json",
                input=b"".join(line(e) + b"\n" for e in entries))
    assert json.loads(out.stdout) == {"session": sid, "accepted": 2, "duplicates": 0, "skipped": 0}
    assert read_entries(main_path(d.root, CWD, sid)) == entries
    st = json.loads(d.cli("status", "--json").stdout)
    for key in ("pid", "root", "socket", "uptime", "sessions", "queuedEntries"):
        assert key in st
    assert st["root"] == str(d.root) and st["socket"] == str(d.socket)
    human = d.cli("status").stdout.decode()
    assert f"pid {st['pid']}" in human and "sessions" in human
    assert d.cli("stop").returncode == 0


def test_append_reports_bad_lines_and_bad_arguments_in_one_line(daemon):
    sid = str(uuid.uuid4())
    good = user("ok")
    out = daemon.cli("append", "--cwd", CWD, "--session", sid, "--durability", "written",
                     input=line(good) + b"\nnot json\n[1,2]\n\n", check=False)
    assert out.returncode == 1  # the good entry is written, the skipped lines make the exit non-zero
    assert out.stderr.count(b"\n") == 1
    assert out.stderr.startswith(b"sessiond: 2 lines skipped (lines 2, 3) of stdin: not one JSON object each (line 2: ")
    assert b"1 entry accepted" in out.stdout and b"2 invalid lines skipped" in out.stdout
    assert read_entries(main_path(daemon.root, CWD, sid)) == [good]
    for args in (["--cwd", "", "--session", sid], ["--cwd", CWD, "--session", "nope"]):  # a relative cwd is taken from here
        bad = daemon.cli("append", *args, input=line(good), check=False)
        assert bad.returncode == 1
        assert bad.stderr.count(b"\n") == 1 and bad.stderr.startswith(b"sessiond: ")
    missing = daemon.cli("append", "--cwd", CWD, "--session", sid, "/nonexistent/file", check=False)
    assert missing.returncode == 2 and b"Traceback" not in missing.stderr


def test_record_writes_the_parent_links_and_the_envelope(daemon, tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/feature-x\n")
    sid = str(uuid.uuid4())
    msgs = [
        {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "run both"}},
        {"type": "assistant", "uuid": "a1", "message": {"id": "msg_1", "content": [{"type": "tool_use", "id": "tA"}]}},
        {"type": "assistant", "uuid": "a2", "message": {"id": "msg_1", "content": [{"type": "tool_use", "id": "tB"}]}},
        {"type": "user", "uuid": "rB", "sourceToolAssistantUUID": "a2", "message": {"content": [{"type": "tool_result", "tool_use_id": "tB"}]}},
        {"type": "user", "uuid": "rA", "sourceToolAssistantUUID": "a1", "message": {"content": [{"type": "tool_result", "tool_use_id": "tA"}]}},
    ]
    out = daemon.cli("record", "--cwd", str(repo), "--session", sid, "--json", input=b"".join(line(x) + b"\n" for x in msgs))
    res = json.loads(out.stdout)
    # the tip: rA answered an earlier call than the tip a2 and left it where it was (rB moved it)
    assert res["recorded"] == 5 and res["last"] == "rB"
    more = [{"type": "assistant", "uuid": "a3", "message": {"content": [{"type": "text", "text": "done"}]}}]
    daemon.cli("record", "--cwd", str(repo), "--session", sid, input=line(more[0]))
    # the same messages again: nothing new
    again = json.loads(daemon.cli("record", "--cwd", str(repo), "--session", sid, "--json", input=line(msgs[0])).stdout)
    assert again["recorded"] == 0 and again["duplicates"] == 1
    daemon.cli("flush")
    entries = read_entries(main_path(daemon.root, str(repo), sid))
    parents = {e["uuid"]: e["parentUuid"] for e in entries}
    assert parents == {"u1": None, "a1": "u1", "a2": "a1", "rB": "a2", "rA": "a1", "a3": "rA"}
    first = entries[0]
    assert list(first)[:7] == ["parentUuid", "isSidechain", "userType", "cwd", "sessionId", "version", "gitBranch"]
    assert first["sessionId"] == sid and first["cwd"] == str(repo) and first["gitBranch"] == "feature-x"
    assert first["isSidechain"] is False and first["timestamp"].endswith("Z")


def test_flush_command(daemon):
    out = daemon.cli("flush", "--durable", "--json")
    assert json.loads(out.stdout) == {"files": 0, "durable": True}


def test_unknown_command_and_help_do_not_trace(daemon_factory):
    r = run_cli("frobnicate", check=False)
    assert r.returncode == 2 and b"Traceback" not in r.stderr
    assert run_cli("--help").returncode == 0


def test_long_listings_show_progress_only_on_a_terminal(daemon_factory, short_tmp):
    import shlex
    import shutil
    import subprocess
    import sys

    import pytest

    if not shutil.which("script"):
        pytest.skip("script(1) not installed")
    d = daemon_factory()  # not started: the listing reads the files itself
    project = d.root / "projects" / "-big"
    project.mkdir(parents=True)
    for i in range(2100):
        sid = str(uuid.uuid4())
        (project / f"{sid}.jsonl").write_bytes(line(user(f"p{i}")) + b"\n")
    cmd = [sys.executable, "-m", "sessiond.client.cli", "list", "--all", "--no-pager"]  # 2100 rows on a terminal: paged otherwise
    piped = d.cli("list", "--all")
    assert b"reading sessions" not in piped.stderr and piped.stdout.count(b"\n") == 2101  # with the header row
    tty = subprocess.run(["script", "-qec", shlex.join(cmd), "/dev/null"], env=d.env, capture_output=True, timeout=60)
    assert b"reading sessions" in tty.stdout and b"2100/2100" in tty.stdout


def test_serve_takes_root_and_socket_after_the_command_too(short_tmp):
    import os
    import subprocess
    import sys

    from sessiond.client.autostart import socket_answers
    from tests.helpers import wait_until

    sock = short_tmp / "run" / "x.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIOND_")}
    p = subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", "serve", "--root", str(short_tmp / "r"), "--socket", str(sock)],
                         env=env, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: socket_answers(sock) or p.poll() is not None, "the daemon")
        st = json.loads(run_cli("--socket", str(sock), "status", "--json", env=env).stdout)
        assert st["root"] == str(short_tmp / "r") and st["socket"] == str(sock)
    finally:
        p.terminate()
        assert p.wait(timeout=30) == 0
