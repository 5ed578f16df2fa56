"""Hostile input and other users: nothing malformed gets through, nobody else gets in."""

from __future__ import annotations

import os
import random
import shutil
import socket
import struct
import subprocess
import uuid
from pathlib import Path

import msgspec
import pytest

from sessiond.wire import messages as m
from sessiond.wire.errors import RemoteError
from sessiond.wire.framing import encode
from tests.helpers import line, main_path, read_entries, user

CWD = "/work/project"


def raw_conn(d, hello: bool = True) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(str(d.socket))
    if hello:
        s.sendall(encode(m.Hello(id=0, protocol_version=m.PROTOCOL_VERSION)))
        s.recv(4096)
    return s


def test_a_symlink_planted_in_the_root_cannot_lead_outside(daemon, short_tmp):
    outside = short_tmp / "outside"
    outside.mkdir()
    projects = daemon.root / "projects"
    projects.mkdir(parents=True, exist_ok=True)
    (projects / "-work-project").symlink_to(outside)
    sid = str(uuid.uuid4())
    with daemon.client() as c:
        with pytest.raises(RemoteError) as err:
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(user("x"))], durability="written"))
        assert err.value.code == "permission_denied"
        # an agent dir planted as a symlink inside a real project
        other = str(uuid.uuid4())
        real = main_path(daemon.root, "/work/other", other)
        real.parent.mkdir(parents=True)
        real.with_suffix("").mkdir()
        (real.with_suffix("") / "subagents").symlink_to(outside)
        with pytest.raises(RemoteError) as err:
            c.call(m.Append(id=c.next_id(), session=other, cwd="/work/other", durability="written",
                            entries=[line({**user("s"), "isSidechain": True, "agentId": "a1"})]))
        assert err.value.code == "permission_denied"
    assert list(outside.iterdir()) == []


def test_a_client_stalling_inside_a_frame_is_cut_off(daemon_factory, short_tmp):
    cfg = short_tmp / "c.toml"
    cfg.write_text("frame_timeout_s = 0.3\n")
    d = daemon_factory().start("--config", str(cfg))
    s = raw_conn(d)
    s.sendall(struct.pack(">I", 1000) + b"\x81")  # a header and one byte of body, then silence
    data = s.recv(4096)
    assert b"timed out inside a frame" in data
    assert s.recv(4096) == b""
    s.close()
    with d.client() as c:
        assert c.status().pid == d.pid


def test_a_runaway_client_is_throttled_not_refused(daemon_factory, short_tmp):
    cfg = short_tmp / "c.toml"
    cfg.write_text("rate_limit_bytes = 400000\nrate_burst_bytes = 50000\n")  # throttled for ~0.6 s
    d = daemon_factory().start("--config", str(cfg))
    sid = str(uuid.uuid4())
    msgs = [user("y" * 2000) for _ in range(150)]  # ~300 KB: several times the burst
    with d.client() as c:
        c.pipeline([m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(e)]) for e in msgs], window=64)
        c.flush()
    assert read_entries(main_path(d.root, CWD, sid)) == msgs
    assert "over its rate limit" in d.log_text()


def test_fuzzed_frames_never_disturb_other_clients(daemon, short_tmp):
    rng = random.Random(1234)
    sid = str(uuid.uuid4())
    good = [user(f"good {i}") for i in range(200)]
    valid = [
        encode(m.Append(id=1, session=str(uuid.uuid4()), cwd=CWD, entries=[line(user("z"))])),
        encode(m.Flush(id=2)),
        encode(m.Record(id=3, session=str(uuid.uuid4()), cwd=CWD, messages=[b'{"type":"user","uuid":"u"}'])),
    ]
    evil_entries = [b"[1]", b"{", b'{"a":1}\n{"b":2}', b'{"x":"\xff"}', b'{"type":"user","isSidechain":true,"agentId":"../.."}']
    evil_fields = [
        {"session": "../../../etc/passwd"}, {"cwd": "relative"}, {"cwd": "/a\x00b"}, {"agent": "../x"}, {"run": "a/b"},
        {"session": str(uuid.uuid4()), "cwd": "/" + "d/" * 3000},
    ]

    def mutated() -> bytes:
        kind = rng.randrange(6)
        if kind == 0:
            return os.urandom(rng.randrange(1, 200))
        if kind == 1:
            body = os.urandom(rng.randrange(0, 100))
            return struct.pack(">I", len(body)) + body
        if kind == 2:
            frame = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 4)):
                frame[rng.randrange(4, len(frame))] = rng.randrange(256)
            return bytes(frame)
        if kind == 3:
            fields = {"op": "Append", "id": rng.randrange(1000), "session": str(uuid.uuid4()), "cwd": CWD,
                      "entries": [rng.choice(evil_entries)], **rng.choice(evil_fields)}
            body = msgspec.msgpack.encode(fields)
            return struct.pack(">I", len(body)) + body
        if kind == 4:
            body = msgspec.msgpack.encode(rng.choice([{"op": "Nope", "id": 1}, [1, 2], {"op": "Append"}, "str", None]))
            return struct.pack(">I", len(body)) + body
        return struct.pack(">I", 2**31)  # far over the cap

    with daemon.client() as writer:
        hostile = 0
        for i in range(2000):
            if i % 10 == 0:
                writer.call(m.Append(id=writer.next_id(), session=sid, cwd=CWD, entries=[line(good[i // 10])]))
            s = raw_conn(daemon, hello=rng.random() < 0.8)
            try:
                s.sendall(mutated())
                s.shutdown(socket.SHUT_WR)
                while s.recv(65536):
                    pass
            except OSError:
                pass
            finally:
                s.close()
            hostile += 1
        writer.flush()
        st = writer.status()
    assert hostile == 2000 and st.pid == daemon.pid
    assert read_entries(main_path(daemon.root, CWD, sid)) == good
    for p in daemon.root.rglob("*"):
        assert Path(os.path.realpath(p)).is_relative_to(os.path.realpath(daemon.root))
    assert not Path("/etc/passwd.jsonl").exists()


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv") or not Path("/usr/bin/python3").exists(),
                    reason="needs root, setpriv and a system python")
def test_other_users_are_refused_both_ways(daemon, short_tmp):
    probe = (  # the daemon answers a foreign uid at once, before any Hello
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])\n"
        "print(s.recv(4096))\n"
    )
    # Open the path to the socket for the test only, so the uid check is what refuses.
    for p in (short_tmp, daemon.socket.parent.parent, daemon.socket.parent):
        os.chmod(p, 0o755)
    os.chmod(daemon.socket, 0o777)
    r = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "/usr/bin/python3", "-c", probe,
                        str(daemon.socket)], capture_output=True, timeout=30)
    assert b"permission_denied" in r.stdout, r.stderr
    assert "refused a client of uid 65534" in daemon.log_text()
    # And a client refuses a daemon socket that belongs to another uid.
    fake_dir = short_tmp / "fake"
    fake_dir.mkdir(mode=0o700)
    fake = fake_dir / "s.sock"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(fake))
    os.chown(fake, 65534, 65534)
    from sessiond.client import Client
    from sessiond.wire.errors import DaemonUnavailable

    with pytest.raises(DaemonUnavailable, match="owned by uid 65534"):
        Client(fake, autostart=False).connect()
    srv.close()


@pytest.mark.parametrize("problem", ["group-bits", "symlink"])
def test_an_unsafe_socket_directory_is_refused(daemon_factory, short_tmp, problem):
    d = daemon_factory()
    if problem == "group-bits":
        d.socket.parent.mkdir(mode=0o700)
        os.chmod(d.socket.parent, 0o770)
    else:
        real = short_tmp / "elsewhere"
        real.mkdir(mode=0o700)
        d.socket.parent.symlink_to(real)
    r = d.cli("serve", check=False, timeout=30)
    assert r.returncode == 1 and (b"must be 0700" in r.stderr or b"symlink" in r.stderr), r.stderr


def test_on_exit_the_socket_is_unlinked_only_if_still_ours(daemon):
    os.unlink(daemon.socket)
    daemon.socket.write_text("someone else's")
    assert daemon.stop() == 0
    assert daemon.socket.read_text() == "someone else's"
