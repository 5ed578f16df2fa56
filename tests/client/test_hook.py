"""``sessiond-hook`` (``sessiond/client/cli/hook.py``): the commands hooks and agents run
at every turn, without click.

Every case runs the installed ``sessiond-hook`` console script (what a hook
runs) under ``python -X importtime`` and, where it stands in for a ``sessiond``
command, the same command line through the click group in another process:
stdout, stderr (the import-time lines taken out) and the exit code must be
equal, and the hook must not have imported click, anyio, uvloop or the whole
wire message module. Its own usage errors are one line and exit 2.
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
from tests.helpers import assistant, line, main_path, user, wait_until

SCRIPT = Path(sys.executable).parent / "sessiond-hook"
CLICK = "import sys; from sessiond.client.cli import cli; cli(sys.argv[1:], prog_name='sessiond')"
CWD = "/work/hook-project"
IMPORT_LINE = re.compile(rb"^import time: .*\n", re.MULTILINE)
NOT_ON_THE_HOT_PATH = {"click", "anyio", "uvloop", "asyncio", "sessiond.wire.messages"}


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, imported: set[str] | None = None) -> None:
        self.out, self.err, self.code = proc.stdout, proc.stderr, proc.returncode
        self.imported = imported or set()

    def outcome(self) -> tuple[bytes, bytes, int]:
        return self.out, self.err, self.code


def hook(args, env, input: bytes | None = None) -> Run:
    """The console script, with the modules it imported."""
    assert SCRIPT.exists(), f"no console script at {SCRIPT} (pip install -e . first)"
    proc = subprocess.run([sys.executable, "-X", "importtime", str(SCRIPT), *args], input=input, env=env,
                          capture_output=True, timeout=60)
    imported = {m.group(1).decode() for m in re.finditer(rb"^import time:[^|]*\|[^|]*\| *(\S+)", proc.stderr, re.MULTILINE)}
    assert imported, "no import-time lines: the run did not start the interpreter as expected"
    run = Run(proc, imported)
    run.err = IMPORT_LINE.sub(b"", proc.stderr)
    return run


def click(args, env, input: bytes | None = None) -> Run:
    return Run(subprocess.run([sys.executable, "-c", CLICK, *args], input=input, env=env, capture_output=True, timeout=60))


def lean(run: Run) -> bool:
    """Nothing a hook must not pay for was imported."""
    return not {m.split(".")[0] if not m.startswith("sessiond") else m for m in run.imported} & NOT_ON_THE_HOT_PATH


def same(args, env, input: bytes | None = None, *, sessions: tuple[str, str] | None = None) -> tuple[Run, Run]:
    """The hook and click on ``args``; with ``sessions``, the hook gets the
    first id and click the second (where ``SID`` stands in ``args``), so each
    writes a fresh session, and outputs are compared with the id masked."""
    ids = sessions or ("SID", "SID")
    h = hook([a.replace("SID", ids[0]) for a in args], env, input)
    c = click([a.replace("SID", ids[1]) for a in args], env, input)
    assert lean(h), f"the hook imported {h.imported & NOT_ON_THE_HOT_PATH} for {args}"
    ho, co = h.outcome(), c.outcome()
    if sessions:
        ho = (ho[0].replace(ids[0].encode(), b"SID"), ho[1].replace(ids[0].encode(), b"SID"), ho[2])
        co = (co[0].replace(ids[1].encode(), b"SID"), co[1].replace(ids[1].encode(), b"SID"), co[2])
    assert ho == co, args
    return h, c


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


def stored(daemon: DaemonProc, *sids: str) -> list[bytes]:
    return [main_path(daemon.root, CWD, sid).read_bytes() if main_path(daemon.root, CWD, sid).exists() else b"" for sid in sids]


def test_status_human_and_json_through_a_daemon(env, daemon: DaemonProc):
    with daemon.client() as c:  # the index's state is in the human status: settled, not starting between the two
        wait_until(lambda: (c.status().index or {}).get("state") == "ok", "the index ready", timeout=30)
    h, c = hook(["status"], env), click(["status"], env)
    assert lean(h) and h.code == c.code == 0 and h.err == c.err == b""
    digits = re.compile(rb"\d+(\.\d+)? ?(B|KB|MB|GB)?")  # uptime, counters, sizes move between the two runs
    assert digits.sub(b"N", h.out) == digits.sub(b"N", c.out) and b"  socket    " in h.out
    h, c = hook(["status", "--json"], env), click(["status", "--json"], env)
    assert lean(h) and h.code == c.code == 0
    hj, cj = json.loads(h.out), json.loads(c.out)
    assert hj.keys() == cj.keys() and hj["running"] is True
    keys = ("pid", "socket", "root", "version", "config")
    assert {k: hj[k] for k in keys} == {k: cj[k] for k in keys}


def test_status_without_a_daemon(short_tmp):
    env = {**os.environ, "SESSIOND_SOCKET": str(short_tmp / "none.sock")}
    for args in (["status"], ["status", "--json"], ["--socket", str(short_tmp / "other.sock"), "status"]):
        h, _ = same(args, env)
        assert h.code == 1


def test_append_human_json_and_from_a_file(env, daemon: DaemonProc, short_tmp):
    for extra in ([], ["--json"], ["--durability", "written"], ["--durability=durable", "--agent", "a1b2c3d"]):
        h, _ = same(["append", "--cwd", CWD, "--session", "SID", *extra], env, entries("hello", "hi"), sessions=fresh())
        assert h.code == 0 and (b"2 entries accepted" in h.out or b'"accepted":2' in h.out), h.out
    source = short_tmp / "in.jsonl"
    source.write_bytes(entries("from a file"))
    h, _ = same(["append", str(source), "--session", "SID", "--cwd", CWD, "--json"], env, sessions=fresh())
    assert json.loads(h.out)["accepted"] == 1
    ids = fresh()
    data = entries("after --", "and stored")
    h, _ = same(["--timeout", "5", "append", "--cwd", CWD, "--session", "SID", "--run", "r1", "--durability", "written",
                 "--", "-"], env, data, sessions=ids)
    assert h.code == 0 and stored(daemon, *ids) == [data, data]


def test_append_input_that_is_not_a_transcript(env, daemon: DaemonProc):
    """Not-a-transcript input, a summary with no message, some bad lines: the
    same one-line verdicts and exit 1; of the mixed input, the good lines are
    stored alike."""
    passwd = b"root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
    summary = line({"type": "summary", "summary": "only a summary", "leafUuid": str(uuid.uuid4())})
    good = entries("good", "also good")
    mixed = good.replace(b"\n", b"\nnot json\n", 1)
    for data in (passwd, b"", b"\x00\xff\xfe binary\n", summary, mixed):
        for extra in ([], ["--json"]):
            ids = fresh()
            h, _ = same(["append", "--cwd", CWD, "--session", "SID", "--durability", "written", *extra], env, data, sessions=ids)
            assert h.code == 1 and h.err.startswith(b"sessiond: "), (data, h.err)
            if data is mixed:
                assert stored(daemon, *ids) == [good, good]


def test_append_of_more_than_one_batch(env, daemon: DaemonProc):
    """257 entries (BATCH_ENTRIES is 256) and a bad last line: pipelined in two
    batches, blank lines keeping their numbers in the summary."""
    from sessiond.client.cli.appending import BATCH_ENTRIES

    many = entries(*(f"entry {i}" for i in range(BATCH_ENTRIES + 1)))
    ids = fresh()
    h, _ = same(["append", "--cwd", CWD, "--session", "SID", "--durability", "written"], env, b"\n" + many + b"oops\n", sessions=ids)
    assert h.code == 1 and f"{BATCH_ENTRIES + 1} entries accepted".encode() in h.out
    assert f"(line {BATCH_ENTRIES + 3})".encode() in h.err
    assert stored(daemon, *ids) == [many, many]


def test_append_an_entry_over_the_frame_cap(daemon_factory):
    d = daemon_factory().start("--max-frame", "65536")
    env = {**d.env, "COLUMNS": "100"}
    big = line(user("x" * 100_000, str(uuid.uuid4()))) + b"\n"
    for extra in ([], ["--json"]):
        h, _ = same(["append", "--cwd", CWD, "--session", "SID", *extra], env, entries("small") + big, sessions=fresh())
        assert h.code == 1 and b"frame" in h.err, h.err


def test_append_the_daemon_refuses_for_the_session(env, daemon: DaemonProc):
    ids = fresh()
    for sid in ids:
        daemon.cli("append", "--cwd", CWD, "--session", sid, "--durability", "written", input=entries("to trash"))
        daemon.cli("rm", sid, "--cwd", CWD, "--force")
    h, _ = same(["append", "--cwd", CWD, "--session", "SID"], env, entries("after rm"), sessions=ids)
    assert h.code == 1 and b"is in the trash" in h.err


def test_append_to_a_session_another_client_holds(env, daemon: DaemonProc):
    """``session_busy`` names the holder; nothing is written."""
    from sessiond.wire import messages as m

    ids = fresh()
    stamp = re.compile(rb"\d{4}-\d\d-\d\dT[\d:.]+Z")  # when each session was opened
    args = ["append", "--cwd", CWD, "--session"]
    with daemon.client(name="holder") as holder:
        for sid in ids:
            holder.call(m.Open(id=holder.next_id(), session=sid, cwd=CWD, lease=True))
        h, c = hook([*args, ids[0]], env, entries("not mine")), click([*args, ids[1]], env, entries("not mine"))
    assert (h.code, h.out, stamp.sub(b"T", h.err.replace(ids[0].encode(), b"SID"))) == \
        (c.code, c.out, stamp.sub(b"T", c.err.replace(ids[1].encode(), b"SID")))
    assert h.code == 1 and b"is live: held by" in h.err, h.err
    assert lean(h) and stored(daemon, *ids) == [b"", b""]


def test_append_without_a_daemon_and_with_a_bad_root(short_tmp):
    """No daemon and no autostart (the flag, or its variable): the files are
    written directly; a root that is a regular file fails alike."""
    env = {**os.environ, "SESSIOND_SOCKET": str(short_tmp / "none.sock"), "SESSIOND_ROOT": str(short_tmp / "root")}
    for flag in (["--no-autostart"], []):
        e = env if flag else {**env, "SESSIOND_NO_AUTOSTART": "yes"}
        h, _ = same([*flag, "append", "--cwd", CWD, "--session", "SID"], e, entries("direct"), sessions=fresh())
        assert h.code == 0 and b"wrote directly to the files" in h.err
    regular = short_tmp / "a-file"
    regular.write_bytes(b"not a dir")
    h, _ = same(["--no-autostart", "--root", str(regular), "append", "--cwd", CWD, "--session", "SID"], env,
                entries("nowhere"), sessions=fresh())
    assert h.code == 1 and h.err.startswith(b"sessiond: ")


def test_append_that_autostarts_the_daemon(short_tmp):
    """No daemon yet: the hook's client starts one, as click's does (each run
    its own, stopped after)."""
    outcomes = []
    for i, run in enumerate((hook, click)):
        env = {**os.environ, "SESSIOND_SOCKET": str(short_tmp / f"run{i}" / "s.sock"), "SESSIOND_ROOT": str(short_tmp / f"root{i}"),
               "COLUMNS": "100"}
        sid = str(uuid.uuid4())
        try:
            r = run(["append", "--cwd", CWD, "--session", sid, "--durability", "written"], env, entries("autostarted"))
        finally:
            subprocess.run([sys.executable, "-m", "sessiond.client.cli", "stop"], env=env, capture_output=True, timeout=60)
        outcomes.append((r.out.replace(sid.encode(), b"SID"), r.err, r.code))
        assert main_path(short_tmp / f"root{i}", CWD, sid).exists()
    assert outcomes[0] == outcomes[1] and outcomes[0][2] == 0


def test_record_human_json_agent_and_parent(env, daemon: DaemonProc):
    """``record`` chains the messages; the hook's output and exit codes are
    click's, a ``--parent`` that is no message of the session included."""
    messages = b"".join(line({"type": t, "message": {"role": t, "content": f"{t} said"}}) + b"\n" for t in ("user", "assistant"))
    uid = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # the uuids record makes
    for extra in ([], ["--json"], ["--agent", "a1b2c3d", "--durability", "written"], ["--agent-version", "9.9.9"],
                  ["--parent", str(uuid.uuid4())]):
        ids = fresh()
        h, c = hook(["record", "--cwd", CWD, "--session", ids[0], *extra], env, messages), \
            click(["record", "--cwd", CWD, "--session", ids[1], *extra], env, messages)
        assert (h.code, uid.sub(b"U", h.out), uid.sub(b"U", h.err)) == (c.code, uid.sub(b"U", c.out), uid.sub(b"U", c.err)), extra
        assert h.code == (1 if "--parent" in extra else 0), h.err
    h = hook(["record", "--cwd", CWD, "--session", str(uuid.uuid4()), "--json"], env, b"not json\n")
    assert h.code == 1 and h.err.startswith(b"sessiond: ")


@pytest.mark.parametrize("args,says", [
    ([], b"missing command"), (["list"], b"no such command: 'list'"), (["statu"], b"no such command: 'statu'; did you mean: status"),
    (["status", "--bogus"], b"no such option: --bogus"), (["status", "x"], b"unexpected argument 'x'"),
    (["status", "--json=1"], b"does not take a value"), (["append", "--session", "s"], b"missing option --cwd"),
    (["append", "--cwd", CWD], b"missing option --session"), (["append", "--cwd"], b"requires an argument"),
    (["append", "--cwd", CWD, "--session", "s", "--durability", "Written"], b"--durability: 'Written' is not one of"),
    (["append", "--cwd", CWD, "--session", "s", "/no/such/file"], b"cannot read SOURCE '/no/such/file'"),
    (["append", "--cwd", CWD, "--session", "s", "a", "b"], b"unexpected argument 'b'"),
    (["record", "--cwd", CWD, "--session", "s", "--run", "r"], b"no such option: --run"),
    (["--timeout", "0", "status"], b"--timeout: 0 is not in the range 0.1 to 604800 seconds"),
    (["--timeout", "nan", "status"], b"--timeout: nan is not in the range"), (["--timeout", "soon", "status"], b"not a number"),
    (["--version"], b"no such option: --version"), (["status", "--help"], b"no such option: --help"),
])
def test_a_usage_error_is_one_line_and_exit_2(args, says, short_tmp):
    env = {**os.environ, "SESSIOND_SOCKET": str(short_tmp / "none.sock"), "SESSIOND_NO_AUTOSTART": "1"}
    h = hook(args, env, b"")
    assert (h.code, h.out, h.err.count(b"\n")) == (2, b"", 1) and h.err.startswith(b"sessiond-hook: ") and says in h.err, h.err


@pytest.mark.parametrize("name,value,code", [("SESSIOND_NO_AUTOSTART", "maybe", 2), ("SESSIOND_TIMEOUT", "soon", 2),
                                             ("SESSIOND_NO_AUTOSTART", " Off ", 1), ("SESSIOND_TIMEOUT", "", 1)])
def test_the_environment_is_read_as_sessiond_reads_it(name, value, code, short_tmp):
    """A value click refuses is a usage error (exit 2) for both; one it takes
    (any case, trimmed; empty is unset) runs: no daemon, status exits 1."""
    env = {**os.environ, "SESSIOND_SOCKET": str(short_tmp / "none.sock"), name: value}
    h, c = hook(["status"], env), click(["status"], env)
    assert h.code == c.code == code and h.err.count(b"\n") == 1, h.err
    if code == 1:
        assert h.outcome() == c.outcome()


def test_help_names_the_commands_and_exits_0():
    for args in (["--help"], ["-h"]):
        r = subprocess.run([str(SCRIPT), *args], capture_output=True, timeout=60)
        assert r.returncode == 0 and r.stderr == b""
        assert all(f"sessiond-hook [OPTIONS] {c}".encode() in r.stdout for c in ("status", "append", "record"))


def test_broken_pipe_is_quiet(env, daemon: DaemonProc):
    """``sessiond-hook status | head -c 1`` style: the reader leaves; exit 141
    without a word, as ``sessiond status``."""
    codes = []
    for cmd in ([str(SCRIPT), "status"], [sys.executable, "-c", CLICK, "status"]):
        rd, wr = os.pipe()
        os.close(rd)  # nobody reads: the first write fails with EPIPE
        p = subprocess.run(cmd, stdout=wr, stderr=subprocess.PIPE, env=env, timeout=60)
        os.close(wr)
        codes.append((p.returncode, p.stderr))
    assert codes[0] == codes[1] == (141, b"")


class FakeDaemon:
    """A socket that does the handshake, then answers every request with
    ``answer(request)``."""

    def __init__(self, path: Path, answer) -> None:
        import socket
        import threading

        self.answer = answer
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.sock.settimeout(30)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        from sessiond.wire import messages as m
        from sessiond.wire.framing import FrameBuffer, decode_request, encode

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(30)
                frames = FrameBuffer()
                try:
                    while data := conn.recv(65536):
                        for body in frames.feed(data):
                            req = decode_request(body)
                            if isinstance(req, m.Hello):
                                conn.sendall(encode(m.Welcome(id=0, protocol_version=m.PROTOCOL_VERSION, daemon_version="fake", pid=1)))
                            else:
                                conn.sendall(self.answer(req))
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def test_an_answer_the_core_messages_do_not_read_is_decoded_by_the_whole_union(short_tmp):
    """A status answer missing its fields: the hook's decode falls back to
    every message's union, whose typed error is what click's run prints."""
    import msgspec

    from sessiond.wire.framing import HEADER

    def reply(req) -> bytes:
        body = msgspec.msgpack.encode({"op": "StatusResult", "id": req.id})
        return HEADER.pack(len(body)) + body

    path = short_tmp / "fake.sock"
    fake = FakeDaemon(path, reply)
    try:
        env = {**os.environ, "SESSIOND_SOCKET": str(path), "SESSIOND_NO_AUTOSTART": "1"}
        h, c = hook(["status"], env), click(["status"], env)
        assert h.outcome() == c.outcome() and h.code == 1 and h.err.startswith(b"sessiond: malformed response"), h.err
        assert "sessiond.wire.messages" in h.imported  # only for such an answer
    finally:
        fake.close()


def test_msgspec_is_imported_without_typing_extensions_and_it_stays_importable():
    """The hook imports msgspec without typing_extensions (half its import
    cost; msgspec falls back to ``typing``): the frames still decode, and
    typing_extensions is importable afterwards for anything that wants it."""
    code = ("import sys; from sessiond.client.cli.hook import import_msgspec_lean as lean; lean(); "
            "print('typing_extensions' in sys.modules); "
            "from sessiond.wire import core; from sessiond.wire.framing import encode, decode_response; "
            "r = decode_response(encode(core.Appended(id=3, accepted=2, duplicates=1))[4:]); print(type(r).__name__, r.accepted); "
            "import typing_extensions; print(typing_extensions.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=60).stdout
    assert out == b"False\nAppended 2\ntyping_extensions\n"


def test_the_wire_messages_do_not_import_what_computes_their_records():
    """Every client imports the wire messages: the records answers carry
    (import results, trash manifests, usage) come from ``wire/records.py``,
    not from the trash, import and usage code (ctypes, shutil, the file helpers)."""
    code = ("import sys; import sessiond.wire.messages; "
            "print(sorted(m for m in sys.modules if m in {'sessiond.store.trash', 'sessiond.store.importer', "
            "'sessiond.store.usage', 'ctypes', 'shutil'}))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=60).stdout == b"[]\n"
