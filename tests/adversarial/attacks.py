"""The attacks, as plain functions on a running daemon: the adversarial tests
assert on what they return, ``bench/bounds.py`` runs them at full size and
reports the daemon's peak RSS under each. Every raw connection speaks the real
wire protocol over the real socket."""

from __future__ import annotations

import os
import select
import socket
import struct
import threading
import time
import uuid
from pathlib import Path

import msgspec

from sessiond.wire import messages as m
from sessiond.wire.errors import RemoteError
from sessiond.wire.framing import FrameBuffer, decode_response, encode
from tests.helpers import line, user

MiB = 1024 * 1024
SPARSE = 2 * 1024 * MiB


def plant(path: Path, kind: str, size: int = SPARSE) -> None:
    """Put something hostile where the daemon expects one of its own small
    files: a ``fifo`` (an open blocks), ``dev-zero`` (a symlink to /dev/zero:
    a read never ends), a ``directory``, or a ``sparse`` file of ``size`` bytes
    (nothing on disk, everything to a reader)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "directory":
        os.mkdir(path)
    elif kind == "sparse":
        with open(path, "wb") as f:
            f.truncate(size)
    else:
        raise ValueError(f"no such thing to plant: {kind}")


def peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmHWM:"):
            return int(row.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


def raw_conn(sock_path: Path, hello: bool = True, timeout: float = 20.0) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(str(sock_path))
    if hello:
        s.sendall(encode(m.Hello(id=0, protocol_version=m.PROTOCOL_VERSION)))
        assert isinstance(read_answers(s, 1)[0], m.Welcome)
    return s


def read_answers(s: socket.socket, count: int, frames: FrameBuffer | None = None) -> list[m.Response]:
    """The next ``count`` answers on a raw connection (fails on EOF or timeout)."""
    frames = frames or FrameBuffer(1 << 30)
    out: list[m.Response] = []
    while len(out) < count:
        data = s.recv(1 << 20)
        assert data, f"connection closed after {len(out)} of {count} answers"
        out.extend(decode_response(body) for body in frames.feed(data))
    return out


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def msgpack(value: object) -> bytes:
    return msgspec.msgpack.encode(value)


def send_until_blocked(s: socket.socket, data: bytes, cap: int, patience: float = 1.0) -> int:
    """Send ``data`` over and over without reading, until the peer stops taking
    it for ``patience`` seconds, closes, or ``cap`` bytes went out; the bytes sent."""
    s.setblocking(False)
    sent = 0
    stuck_since = None
    view = memoryview(data)
    while sent < cap:
        offset = sent % len(data)
        try:
            sent += s.send(view[offset : offset + cap - sent])
            stuck_since = None
        except BlockingIOError:
            now = time.monotonic()
            stuck_since = stuck_since or now
            if now - stuck_since > patience:
                break
            time.sleep(0.01)
        except (BrokenPipeError, ConnectionResetError):  # refused: the answer says why
            break
    s.setblocking(True)
    return sent


# ---------------------------------------------------------------------- attacks

STATUS_BURST = 2000


def pipeline_without_reading(sock_path: Path, cap: int, patience: float = 1.0) -> tuple[socket.socket, int]:
    """Status requests (each answer ~40x its request) sent and never read; the
    socket and the bytes the daemon took before it stopped reading."""
    s = raw_conn(sock_path)
    burst = b"".join(encode(m.Status(id=i + 1)) for i in range(STATUS_BURST))
    return s, send_until_blocked(s, burst, cap, patience)


def read_everything_owed(s: socket.socket, sent: int) -> int:
    """Read the answers to every whole burst a non-reader sent; their count."""
    owed = sent // len(b"".join(encode(m.Status(id=i + 1)) for i in range(STATUS_BURST))) * STATUS_BURST
    frames = FrameBuffer(1 << 30)
    answered = 0
    while answered < owed:
        data = s.recv(1 << 20)
        assert data, f"closed after {answered} of {owed} answers"
        answered += len(frames.feed(data))
    return answered


def malformed_near_cap(sock_path: Path, max_frame: int) -> list[m.Response]:
    """Two frames just under the cap that fail the typed decode: an array of
    ~max_frame empty arrays (no id), and a map with id 7777 carrying the same;
    then a Status. The three answers."""
    s = raw_conn(sock_path, timeout=60)
    n = max_frame - 16
    s.sendall(frame(b"\xdd" + struct.pack(">I", n) + b"\x90" * n))
    head = b"\x83\xa2op\xa6Append\xa2id\xcd\x1e\x61\xa1x"  # {"op": "Append", "id": 7777, "x": [...]}
    n = max_frame - len(head) - 16
    s.sendall(frame(head + b"\xdd" + struct.pack(">I", n) + b"\x90" * n))
    s.sendall(encode(m.Status(id=5)))
    try:
        return read_answers(s, 3)
    finally:
        s.close()


DEEP = b"\x91" * 200_000 + b"\xc0"  # [[[...[nil]...]]]
NESTED_BODIES = {
    "unknown field": b"\x83\xa2op\xa6Status\xa2id\x09\xa1x" + DEEP,
    "id": b"\x82\xa2op\xa6Status\xa2id" + DEEP,
    "entries": b"\x85\xa2op\xa6Append\xa2id\x09\xa7session" + msgpack("7b1c2a4e-0000-4000-8000-000000000000")
    + b"\xa3cwd" + msgpack("/work/adversary") + b"\xa7entries\x91" + DEEP,
    "top level": DEEP,
}


def nested_deep(sock_path: Path, where: str) -> list[m.Response]:
    """A body nested 200,000 deep, then a Status: the two answers."""
    s = raw_conn(sock_path)
    try:
        s.sendall(frame(NESTED_BODIES[where]) + encode(m.Status(id=10)))
        return read_answers(s, 2)
    finally:
        s.close()


def stalled_big_frames(sock_path: Path, max_frame: int, count: int = 50) -> tuple[list[socket.socket], int]:
    """``count`` connections each announcing a frame at the cap, sending most
    of its body (as much as the daemon takes) and stalling. The sockets, and how
    many were refused with ``busy``."""
    body = b"\xc4" * (max_frame - 64)
    head = struct.pack(">I", max_frame)
    stalled = []
    for _ in range(count):
        s = raw_conn(sock_path)
        send_until_blocked(s, head + body, len(head) + len(body), patience=0.05)
        stalled.append(s)
    readable, _, _ = select.select(stalled, [], [], 5.0)
    for s in readable:
        (err,) = read_answers(s, 1)
        assert isinstance(err, m.Error) and err.code == "busy", err
    return stalled, len(readable)


def fill_pending_buffers(client, cwd: str, sessions: int, per_session: int,
                         entry_bytes: int = 64 * 1024) -> tuple[dict[str, int], RemoteError | None]:
    """Fresh sessions each given ``per_session`` metadata entries and no message
    (nothing materializes), until the daemon refuses; the entries accepted per
    session, and the refusal."""
    title = b'{"type":"custom-title","customTitle":"' + b"t" * entry_bytes + b'","sessionId":"%s"}'
    accepted: dict[str, int] = {}
    for _ in range(sessions):
        sid = str(uuid.uuid4())
        try:
            for _ in range(per_session):
                client.call(m.Append(id=client.next_id(), session=sid, cwd=cwd, entries=[title % sid.encode()]))
                accepted[sid] = accepted.get(sid, 0) + 1
        except RemoteError as exc:
            return accepted, exc
    return accepted, None


def open_sessions(sock_path: Path, cwd: str, count: int, chunk: int = 5000) -> tuple[int, int]:
    """``count`` fresh sessions opened on one connection (which keeps them all
    in use); how many opened, and how many were refused with ``busy``."""
    s = raw_conn(sock_path, timeout=60)
    opened = refused = 0
    try:
        for start in range(0, count, chunk):
            n = min(chunk, count - start)
            s.sendall(b"".join(encode(m.Open(id=start + i + 1, session=str(uuid.uuid4()), cwd=cwd)) for i in range(n)))
            for answer in read_answers(s, n):
                if isinstance(answer, m.Opened):
                    opened += 1
                else:
                    assert isinstance(answer, m.Error) and answer.code == "busy", answer
                    refused += 1
        return opened, refused
    finally:
        s.close()


def idle_connections(sock_path: Path, count: int) -> list[socket.socket]:
    """``count`` connections that do nothing (half of them never said Hello)."""
    idle = []
    for i in range(count):
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(sock_path))
        if i % 2:
            s.sendall(encode(m.Hello(id=0, protocol_version=m.PROTOCOL_VERSION)))
        idle.append(s)
    return idle


def owed_answers_flood(sock_path: Path, session: str, cwd: str, count: int) -> tuple[list[dict], list[m.Response]]:
    """``count`` pipelined ``written`` appends in one send (far past the
    in-flight budget): the entries, and every answer."""
    entries = [user(f"e{i}") for i in range(count)]
    s = raw_conn(sock_path, timeout=60)
    try:
        data = b"".join(encode(m.Append(id=i + 1, session=session, cwd=cwd, entries=[line(e)], durability="written"))
                        for i, e in enumerate(entries))
        sender = threading.Thread(target=s.sendall, args=(data,), daemon=True)
        sender.start()
        answers = read_answers(s, count)
        sender.join(timeout=60)
        return entries, answers
    finally:
        s.close()


def churn(sock_path: str, cycles: int, seconds: float, stop_file: str, searches: int = 8) -> int:
    """Connection churn, for a process of its own: connect, Hello, ``searches``
    pipelined Searches, close without reading their answers; again, for
    ``cycles`` cycles or ``seconds`` or until ``stop_file`` exists, whichever
    comes first. The cycles made (a connection refused ``busy`` counts)."""
    burst = b"".join(encode(m.Search(id=i + 1, query="churn", all=True)) for i in range(searches))
    deadline = time.monotonic() + seconds
    done = 0
    while done < cycles and time.monotonic() < deadline and not os.path.exists(stop_file):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(20.0)
        try:
            s.connect(str(sock_path))
            s.sendall(encode(m.Hello(id=0, protocol_version=m.PROTOCOL_VERSION)) + burst)
            s.recv(1 << 16)  # its Welcome (or the busy that refused it): the daemon has read the burst
        except (BrokenPipeError, ConnectionResetError, ConnectionRefusedError):
            pass
        finally:
            s.close()
        done += 1
    return done


class Churning:
    """``processes`` processes each running ``churn`` until ``stop``."""

    def __init__(self, sock_path: Path, stop_file: Path, processes: int, cycles: int, seconds: float) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.stop_file = stop_file
        self.pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
        self.futures = [self.pool.submit(churn, str(sock_path), cycles, seconds, str(stop_file)) for _ in range(processes)]

    def running(self) -> bool:
        return not any(f.done() for f in self.futures)

    def stop(self) -> int:
        """Stop them all; the cycles they made."""
        self.stop_file.touch()
        try:
            return sum(f.result(timeout=60) for f in self.futures)
        finally:
            self.pool.shutdown()
