"""The fast path's wire without msgspec (``sessiond/wire/lite.py``) against
the click CLI, which speaks msgspec: every branch of the lite path (a bad
line, more than one batch, a small frame cap, a refusal for the session, a
held session, autostart, an answer the lite codec declines) prints what
click's path prints, stores what it stores, and the hot commands import
neither msgspec nor the wire messages. Helpers and fixtures are
``test_cli_fastpath.py``'s.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

from tests.client.test_cli_fastpath import CWD, SCRIPT, entries, env, fast, fresh, same, seed, slow  # noqa: F401 (env: a fixture)
from tests.conftest import DaemonProc
from tests.helpers import main_path

WIRE = {"msgspec", "sessiond.wire.messages"}


def test_the_hot_commands_run_without_msgspec_or_the_wire_messages(env, daemon: DaemonProc):
    """``status``, ``list`` (the daemon's answer) and a one-entry ``append``
    run to completion on the lite codec: neither msgspec nor the wire
    messages module is ever imported (``-X importtime`` lists every import)."""
    seed(daemon, 2)
    sid = str(uuid.uuid4())
    for args, data in ((["status"], None), (["list", "--cwd", CWD], None), (["list", "--all", "--limit", "20"], None),
                       (["append", "--cwd", CWD, "--session", sid], entries("one entry")),
                       (["append", "--cwd", CWD, "--session", sid, "--durability", "written"], entries("another"))):
        f = fast(args, env, data)
        assert f.code == 0 and f.out and f.err == b"", (args, f.err)
        assert not f.imported & WIRE and not any(n.startswith("msgspec.") for n in f.imported), (args, f.imported & WIRE)
    assert b"2 entries" not in f.out and b"1 entry accepted" in f.out


def stored(daemon: DaemonProc, *sids: str) -> list[bytes]:
    return [main_path(daemon.root, CWD, sid).read_bytes() if main_path(daemon.root, CWD, sid).exists() else b"" for sid in sids]


def test_append_with_a_bad_line_is_refused_whole_then_sent_without_it(env, daemon: DaemonProc):
    """The lite path sends the lines unchecked; the daemon refuses the batch
    for its bad line, writing nothing; the msgspec path then sends the good
    ones: the same output as click's, and each good entry stored once."""
    good = entries("first", "second")
    for data in (good.replace(b"\n", b"\nnot json\n", 1), b"\n\n" + good + b"{\"half\": \n", b"[1]\n" + good):
        ids = fresh()
        f, _ = same(["append", "--cwd", CWD, "--session", "SID", "--durability", "written"], env, data, sessions=ids)
        assert f.code == 1 and b"1 line skipped" in f.err and b"2 entries accepted" in f.out, f.err
        assert "msgspec" in f.imported  # the replay
        fast_file, click_file = stored(daemon, *ids)
        assert fast_file == click_file == good


def test_append_of_more_than_one_batch_goes_the_msgspec_way_from_the_start(env, daemon: DaemonProc):
    """257 entries (BATCH_ENTRIES is 256): read ahead, then replayed to the
    msgspec path, which pipelines two batches; blank lines keep their numbers."""
    from sessiond.client.cli.appending import BATCH_ENTRIES

    many = entries(*(f"entry {i}" for i in range(BATCH_ENTRIES + 1)))
    data = b"\n" + many + b"oops\n"
    ids = fresh()
    f, _ = same(["append", "--cwd", CWD, "--session", "SID", "--durability", "written"], env, data, sessions=ids)
    assert f.code == 1 and f"{BATCH_ENTRIES + 1} entries accepted".encode() in f.out
    assert f"(line {BATCH_ENTRIES + 3})".encode() in f.err
    fast_file, click_file = stored(daemon, *ids)
    assert fast_file == click_file == many


def test_append_over_one_frames_worth_of_bytes(daemon_factory):
    """Under a small frame cap a few dozen entries are more than one batch's
    bytes: the lite path hands the input over, the output is click's."""
    d = daemon_factory().start("--max-frame", "65536")
    env = {**d.env, "COLUMNS": "100"}
    data = entries(*("y" * 2000 for _ in range(40)))
    ids = fresh()
    f, _ = same(["append", "--cwd", CWD, "--session", "SID", "--durability", "written"], env, data, sessions=ids)
    assert f.code == 0 and b"40 entries accepted" in f.out and "msgspec" in f.imported
    assert stored(d, *ids) == [data, data]


def test_append_the_daemon_refuses_for_the_session(env, daemon: DaemonProc):
    """An error about the session, not a line: with every line good it is
    the answer to the very batch the msgspec path would send, printed as that
    path prints it (no replay); with a bad line too, the input is replayed
    and the msgspec path gets the same refusal."""
    ids = fresh()
    for sid in ids:
        daemon.cli("append", "--cwd", CWD, "--session", sid, "--durability", "written", input=entries("to trash"))
        daemon.cli("rm", sid, "--cwd", CWD, "--force")
    msgspec_path = "sessiond.wire.messages"  # (msgspec itself checks the lines, once refused)
    f, _ = same(["append", "--cwd", CWD, "--session", "SID"], env, entries("after rm"), sessions=ids)
    assert f.code == 1 and b"is in the trash" in f.err and msgspec_path not in f.imported
    f, _ = same(["append", "--cwd", CWD, "--session", "SID"], env, entries("after rm") + b"bad\n", sessions=ids)
    assert f.code == 1 and b"is in the trash" in f.err and msgspec_path in f.imported


def test_append_to_a_session_another_client_holds(env, daemon: DaemonProc):
    """``session_busy`` names the holder (a LeaseHolder the lite codec does
    not read): the input is replayed to the msgspec path; nothing is written."""
    from sessiond.wire import messages as m

    ids = fresh()
    stamp = re.compile(rb"\d{4}-\d\d-\d\dT[\d:.]+Z")  # when each session was opened
    args = ["append", "--cwd", CWD, "--session"]
    with daemon.client(name="holder") as holder:
        for sid in ids:
            holder.call(m.Open(id=holder.next_id(), session=sid, cwd=CWD, lease=True))
        f, s = fast([*args, ids[0]], env, entries("not mine")), slow([*args, ids[1]], env, entries("not mine"))
    assert (f.code, f.out, stamp.sub(b"T", f.err.replace(ids[0].encode(), b"SID"))) == \
        (s.code, s.out, stamp.sub(b"T", s.err.replace(ids[1].encode(), b"SID")))
    assert f.code == 1 and b"is live: held by" in f.err, f.err
    assert "msgspec" in f.imported and stored(daemon, *ids) == [b"", b""]


def test_append_that_autostarts_the_daemon(short_tmp):
    """No daemon yet: the lite path's client starts one, as click's does (each
    run its own, stopped after)."""
    outcomes = []
    for i, run in enumerate((fast, slow)):
        env = {**os.environ, "SESSIOND_SOCKET": str(short_tmp / f"run{i}" / "s.sock"), "SESSIOND_ROOT": str(short_tmp / f"root{i}"),
               "COLUMNS": "100"}
        sid = str(uuid.uuid4())
        try:
            r = run(["append", "--cwd", CWD, "--session", sid, "--durability", "written"], env, entries("autostarted"))
        finally:
            subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=60)
        outcomes.append((r.out.replace(sid.encode(), b"SID"), r.err, r.code))
        assert main_path(short_tmp / f"root{i}", CWD, sid).exists()
    assert outcomes[0] == outcomes[1] and outcomes[0][2] == 0


class FakeDaemon:
    """A socket that does the handshake, then answers every request with
    ``answer(request)``: an answer the lite codec does not read."""

    def __init__(self, path: Path, answer) -> None:
        import socket
        import threading

        self.answer = answer
        self.connections = 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.sock.settimeout(30)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        from sessiond.wire import messages as m
        from sessiond.wire.framing import FrameBuffer, decode_request, encode

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
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


def test_an_answer_the_lite_codec_does_not_read_runs_the_command_again_on_msgspec(short_tmp):
    """A status answer missing its fields: the lite codec declines it, the
    command runs again from the start on msgspec's codec, whose typed error
    is printed as click's path prints it."""
    import msgspec

    from sessiond.wire.framing import HEADER

    def answer(req) -> bytes:
        body = msgspec.msgpack.encode({"op": "StatusResult", "id": req.id})
        return HEADER.pack(len(body)) + body

    path = short_tmp / "fake.sock"
    fake = FakeDaemon(path, answer)
    try:
        env = {**os.environ, "SESSIOND_SOCKET": str(path), "SESSIOND_NO_AUTOSTART": "1"}
        f, _ = same(["status"], env)
        assert f.code == 1 and f.err.startswith(b"sessiond: malformed response") and "msgspec" in f.imported, f.err
        assert fake.connections == 3  # the fast run twice (lite, then msgspec), click's once
    finally:
        fake.close()
