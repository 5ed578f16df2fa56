"""The click-free fast path (``sessiond/client/cli/fastpath.py``) against the click CLI.

Every case runs the installed ``sessiond`` console script (what a hook or a
prompt runs) under ``python -X importtime``, and the same arguments through
the click group called directly in another process; stdout, stderr (the
import-time lines taken out) and the exit code must be equal, and the fast
run must not have imported click. Command lines the fast path declines must
reach click (it shows in the imports) and so read the same too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import DaemonProc
from tests.helpers import assistant, line, user, wait_until

SCRIPT = Path(sys.executable).parent / "sessiond"
CLICK = "import sys; from sessiond.client.cli import cli; cli(sys.argv[1:], prog_name='sessiond')"
CWD = "/work/fastpath-project"
IMPORT_LINE = re.compile(rb"^import time: .*\n", re.MULTILINE)


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, imported: set[str] | None = None) -> None:
        self.out, self.err, self.code = proc.stdout, proc.stderr, proc.returncode
        self.imported = imported

    def outcome(self) -> tuple[bytes, bytes, int]:
        return self.out, self.err, self.code


def fast(args, env, input: bytes | None = None) -> Run:
    assert SCRIPT.exists(), f"no console script at {SCRIPT} (pip install -e . first)"
    proc = subprocess.run([sys.executable, "-X", "importtime", str(SCRIPT), *args], input=input, env=env,
                          capture_output=True, timeout=60)
    imported = {m.group(1).decode() for m in re.finditer(rb"^import time:[^|]*\|[^|]*\| *(\S+)", proc.stderr, re.MULTILINE)}
    run = Run(proc, imported)
    run.err = IMPORT_LINE.sub(b"", proc.stderr)
    return run


def slow(args, env, input: bytes | None = None) -> Run:
    return Run(subprocess.run([sys.executable, "-c", CLICK, *args], input=input, env=env, capture_output=True, timeout=60))


def imports_click(run: Run) -> bool:
    assert run.imported, "no import-time lines: the run did not start the interpreter as expected"
    return any(m == "click" or m.startswith("click.") for m in run.imported)


def same(args, env, input: bytes | None = None, *, sessions: tuple[str, str] | None = None) -> tuple[Run, Run]:
    """Both paths on ``args``; with ``sessions``, the fast run gets the first
    id and the click run the second (where ``SID`` stands in ``args``), so
    each writes a fresh session, and outputs are compared with the id masked."""
    ids = sessions or ("SID", "SID")
    f = fast([a.replace("SID", ids[0]) for a in args], env, input)
    s = slow([a.replace("SID", ids[1]) for a in args], env, input)
    assert not imports_click(f), f"the fast path imported click for {args}"
    fo, so = f.outcome(), s.outcome()
    if sessions:
        fo = (fo[0].replace(ids[0].encode(), b"SID"), fo[1].replace(ids[0].encode(), b"SID"), fo[2])
        so = (so[0].replace(ids[1].encode(), b"SID"), so[1].replace(ids[1].encode(), b"SID"), so[2])
    assert fo == so, args
    return f, s


@pytest.fixture
def env(daemon: DaemonProc) -> dict[str, str]:
    return {**daemon.env, "TZ": "Europe/Berlin", "COLUMNS": "100"}


def fresh() -> tuple[str, str]:
    return str(uuid.uuid4()), str(uuid.uuid4())


def entries(*texts: str) -> bytes:
    out, parent = b"", None
    for i, text in enumerate(texts):
        uid = str(uuid.uuid4())
        make = user if i % 2 == 0 else assistant
        out += line(make(text, uid, parentUuid=parent, cwd=CWD, timestamp="2025-03-02T23:30:00.000Z")) + b"\n"
        parent = uid
    return out


def seed(daemon: DaemonProc, sessions: int) -> None:
    """Sessions of two messages each in CWD, written (through the client library, not the CLI)."""
    from sessiond.wire import messages as m

    with daemon.client() as c:
        for i in range(sessions):
            sid = str(uuid.uuid4())
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=entries(f"session {i}", "answer").splitlines(),
                            durability="written"))
            c.call(m.Close(id=c.next_id(), session=sid))


@pytest.mark.parametrize("columns", ["50", "80", "200"])
def test_help_is_clicks_byte_for_byte(columns):
    env = {**os.environ, "COLUMNS": columns}
    for args in (["--help"], ["-h"], []):  # no arguments: the help on stderr, exit 2
        f, s = same(args, env)
        assert f.out + f.err and (f.code, bool(f.out)) == ((2, False) if not args else (0, True))
    assert b"Usage: sessiond [OPTIONS] COMMAND [ARGS]..." in f.err


def test_short_help_table_is_each_commands_first_sentence():
    import click

    from sessiond.client.cli import COMMAND_MODULES, cli
    from sessiond.client.cli.toplevel_help import SHORT_HELP

    ctx = click.Context(cli)
    assert set(SHORT_HELP) == set(COMMAND_MODULES)
    assert {n: cli.get_command(ctx, n).get_short_help_str(limit=1000) for n in COMMAND_MODULES} == SHORT_HELP


def test_status_human_and_json_through_a_daemon(env, daemon: DaemonProc):
    with daemon.client() as c:  # the index's state is in the human status: settled, not starting between the two
        wait_until(lambda: (c.status().index or {}).get("state") == "ok", "the index ready", timeout=30)
    f, s = fast(["status"], env), slow(["status"], env)
    assert not imports_click(f) and f.code == s.code == 0 and f.err == s.err == b""
    digits = re.compile(rb"\d+(\.\d+)? ?(B|KB|MB|GB)?")  # uptime, counters, sizes move between the two runs
    assert digits.sub(b"N", f.out) == digits.sub(b"N", s.out) and b"  socket    " in f.out
    f, s = fast(["status", "--json"], env), slow(["status", "--json"], env)
    assert not imports_click(f) and f.code == s.code == 0
    fj, sj = json.loads(f.out), json.loads(s.out)
    assert fj.keys() == sj.keys() and fj["running"] is True
    assert {k: fj[k] for k in ("pid", "socket", "root", "version", "config")} == {k: sj[k] for k in ("pid", "socket", "root", "version", "config")}


def test_status_without_a_daemon(short_tmp):
    env = {**os.environ, "SESSIOND_SOCKET": str(short_tmp / "none.sock")}
    for args in (["status"], ["status", "--json"], ["--socket", str(short_tmp / "other.sock"), "status"]):
        f, _ = same(args, env)
        assert f.code == 1


def test_append_human_json_and_from_a_file(env, short_tmp):
    for extra in ([], ["--json"], ["--durability", "written"], ["--durability=durable", "--agent", "a1b2c3d"]):
        f, _ = same(["append", "--cwd", CWD, "--session", "SID", *extra], env, entries("hello", "hi"), sessions=fresh())
        assert f.code == 0 and (b"2 entries accepted" in f.out or b'"accepted":2' in f.out), f.out
    source = short_tmp / "in.jsonl"
    source.write_bytes(entries("from a file"))
    f, _ = same(["append", str(source), "--session", "SID", "--cwd", CWD, "--json"], env, sessions=fresh())
    assert json.loads(f.out)["accepted"] == 1
    f, _ = same(["--timeout", "5", "append", "--cwd", CWD, "--session", "SID", "--run", "r1", "--", "-"], env,
                entries("after --"), sessions=fresh())
    assert f.code == 0


def test_append_input_that_is_not_a_transcript(env, short_tmp):
    """Not-a-transcript input, a summary with no message, some bad lines: the
    same one-line verdicts and exit 1 on both paths."""
    passwd = b"root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
    summary = line({"type": "summary", "summary": "only a summary", "leafUuid": str(uuid.uuid4())})
    mixed = entries("good") + b"not json\n" + entries("also good")
    for data in (passwd, b"", b"\x00\xff\xfe binary\n", summary, mixed):
        for extra in ([], ["--json"]):
            f, _ = same(["append", "--cwd", CWD, "--session", "SID", *extra], env, data, sessions=fresh())
            assert f.code == 1 and f.err.startswith(b"sessiond: "), (data, f.err)


def test_append_an_entry_over_the_frame_cap(daemon_factory):
    d = daemon_factory().start("--max-frame", "65536")
    env = {**d.env, "COLUMNS": "100"}
    big = line(user("x" * 100_000, str(uuid.uuid4()))) + b"\n"
    for extra in ([], ["--json"]):
        f, _ = same(["append", "--cwd", CWD, "--session", "SID", *extra], env, entries("small") + big, sessions=fresh())
        assert f.code == 1 and b"frame" in f.err, f.err


def test_append_without_a_daemon_and_with_a_bad_root(short_tmp):
    """No daemon and no autostart: both write the files directly (each its own
    session); a root that is a regular file fails alike."""
    env = {**os.environ, "SESSIOND_SOCKET": str(short_tmp / "none.sock"), "SESSIOND_ROOT": str(short_tmp / "root")}
    for flag in (["--no-autostart"], []):
        e = env if flag else {**env, "SESSIOND_NO_AUTOSTART": "yes"}
        f, _ = same([*flag, "append", "--cwd", CWD, "--session", "SID"], e, entries("direct"), sessions=fresh())
        assert f.code == 0 and b"wrote directly to the files" in f.err
    regular = short_tmp / "a-file"
    regular.write_bytes(b"not a dir")
    f, _ = same(["--no-autostart", "--root", str(regular), "append", "--cwd", CWD, "--session", "SID"], env,
                entries("nowhere"), sessions=fresh())
    assert f.code == 1 and f.err.startswith(b"sessiond: ")
    f, _ = same(["--root", str(regular), "--no-autostart", "list", "--cwd", CWD], env)
    assert f.code in (0, 1)


def test_list_human_json_and_all(env, daemon: DaemonProc):
    seed(daemon, 5)
    for args in (["list", "--cwd", CWD], ["list", "--cwd", CWD, "--limit", "3"], ["list", "--cwd=" + CWD, "--limit=2", "--offset", "1"],
                 ["list", "--cwd", CWD, "--json"], ["list", "--all"], ["list", "--all", "--json", "--limit", "20"],
                 ["list", "--cwd", CWD, "--worktrees"], ["list", "--cwd", "/nowhere/at/all"]):
        f, _ = same(args, env)
        assert f.code == 0, f.err
    assert len(json.loads(fast(["list", "--cwd", CWD, "--json"], env).out)) == 5
    f, _ = same(["list", "--all", "--cwd", CWD], env)  # refused alike, not --cwd silently ignored
    assert f.code == 1 and b"--cwd and --all exclude each other" in f.err


def test_list_of_wide_titles_reads_the_same_on_both_paths(env, daemon: DaemonProc):
    with daemon.client() as c:
        for title in ("修复解析器中的错误并添加测试用例以覆盖所有边界情况", "日本語のタイトルをテストする", "🎉 party é́"):
            c.call(c.messages.Append(id=c.next_id(), session=str(uuid.uuid4()), cwd=CWD, entries=entries(title, "ok").splitlines(),
                                     durability="written"))
    for columns in ("60", "100", ""):  # "": piped, nothing cut
        same(["list", "--cwd", CWD], {**env, "COLUMNS": columns})


def test_list_without_a_daemon_reads_the_files(env, daemon: DaemonProc, short_tmp):
    seed(daemon, 2)
    daemon.stop()
    for args in (["list", "--cwd", CWD], ["list", "--cwd", CWD, "--json"], ["list", "--cwd", "relative/dir"]):
        same(args, env)


@pytest.mark.parametrize("args", [
    ["list", "--help"], ["status", "-h"], ["append", "--help"], ["--version"],
    ["list", "--limit", "0"], ["list", "--limit", "x"], ["list", "--limit", "+3"], ["list", "--bogus"], ["list", "extra"],
    ["list", "--json", "--json"], ["list", "--json=1"], ["list", "--cwd"], ["status", "--json", "x"],
    ["append", "--session", "s"], ["append", "--cwd", CWD, "--session", "s", "--durability", "Written"],
    ["append", "--cwd", CWD, "--session", "s", "/no/such/file"], ["append", "--cwd", CWD, "--session", "s", "a", "b"],
    ["--timeout", "0", "status"], ["--timeout", "inf", "status"], ["--root", "x"], ["--root", "", "list"], ["statu"],
    ["flush"],
])
def test_what_the_fast_path_declines_reaches_click(args, short_tmp):
    env = {**os.environ, "SESSIOND_SOCKET": str(short_tmp / "none.sock"), "SESSIOND_ROOT": str(short_tmp / "root"),
           "SESSIOND_NO_AUTOSTART": "1", "COLUMNS": "80"}
    f, s = fast(args, env, b""), slow(args, env, b"")
    assert imports_click(f), f"the fast path ran {args} itself"
    assert f.outcome() == s.outcome()


@pytest.mark.parametrize("name,value", [("SESSIOND_NO_AUTOSTART", "maybe"), ("SESSIOND_TIMEOUT", "soon"), ("_SESSIOND_COMPLETE", "bash_source")])
def test_an_environment_the_fast_path_does_not_judge_reaches_click(name, value, short_tmp):
    env = {**os.environ, "SESSIOND_SOCKET": str(short_tmp / "none.sock"), name: value}
    f, s = fast(["status"], env), slow(["status"], env)
    assert imports_click(f)
    assert f.outcome() == s.outcome()


def test_broken_pipe_is_quiet_on_the_fast_path(env, daemon: DaemonProc):
    """``sessiond status | head -c 1`` style: the reader leaves; the fast path
    exits 141 without a word, as the click path does."""
    codes = []
    for cmd in ([str(SCRIPT), "status"], [sys.executable, "-c", CLICK, "status"]):
        rd, wr = os.pipe()
        os.close(rd)  # nobody reads: the first write fails with EPIPE
        p = subprocess.run(cmd, stdout=wr, stderr=subprocess.PIPE, env=env, timeout=60)
        os.close(wr)
        codes.append((p.returncode, p.stderr))
    assert codes[0] == codes[1] == (141, b"")


def test_the_wire_messages_do_not_import_what_computes_their_records():
    """Every client imports the wire messages: the records answers carry
    (import results, trash manifests, usage) come from ``wire/records.py``,
    not from the trash, import and usage code (ctypes, shutil, the file helpers)."""
    code = ("import sys; import sessiond.wire.messages; "
            "print(sorted(m for m in sys.modules if m in {'sessiond.store.trash', 'sessiond.store.importer', "
            "'sessiond.store.usage', 'ctypes', 'shutil'}))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=60).stdout == b"[]\n"


def test_msgspec_is_imported_without_typing_extensions_and_it_stays_importable():
    """The hot commands import msgspec without typing_extensions (half its
    import cost; msgspec falls back to ``typing``): the frames still decode,
    and typing_extensions is importable afterwards for anything that wants it."""
    code = ("import sys; from sessiond.client.cli import import_msgspec_lean as lean; lean(); "
            "print('typing_extensions' in sys.modules); "
            "from sessiond.wire import messages as m; from sessiond.wire.framing import encode, decode_response; "
            "r = decode_response(encode(m.Appended(id=3, accepted=2, duplicates=1))[4:]); print(type(r).__name__, r.accepted); "
            "import typing_extensions; print(typing_extensions.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=60).stdout
    assert out == b"False\nAppended 2\ntyping_extensions\n"

