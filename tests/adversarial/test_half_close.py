"""A client that sends its requests and then half-closes (``shutdown(SHUT_WR)``,
what ``printf frames | nc -N`` does) is still owed every answer: the daemon's
read EOF ends its reading, not its writing. Answers that come after an fsync
(``durable``) included. A half-closed client that reads nothing is still cut
off by the output budget."""

from __future__ import annotations

import socket
import threading
import uuid

import pytest

from sessiond.wire import messages as m
from sessiond.wire.framing import FrameBuffer, decode_response, encode
from tests.helpers import line, main_path, read_entries, user

from . import attacks
from .attacks import MiB, raw_conn
from .conftest import BUDGETS, CWD, Bounded, settled_non_readers

pytestmark = pytest.mark.timeout(180)


def read_until_eof(s: socket.socket) -> list[m.Response]:
    """Every answer up to the daemon's close (the socket's timeout bounds each read)."""
    frames = FrameBuffer(1 << 30)
    out: list[m.Response] = []
    while data := s.recv(1 << 20):
        out.extend(decode_response(body) for body in frames.feed(data))
    return out


@pytest.mark.parametrize("durability", ["durable", "written"])
def test_a_half_closed_client_gets_every_answer_it_is_owed(bounded: Bounded, durability: str):
    """3,000 appends (past the in-flight budget, so some are read only after
    earlier ones are answered), then SHUT_WR: one answer per request, each an
    ack, and every entry in the file."""
    count = 3000
    sid = str(uuid.uuid4())
    entries = [user(f"half-closed {i}") for i in range(count)]
    data = b"".join(encode(m.Append(id=i + 1, session=sid, cwd=CWD, entries=[line(e)], durability=durability))
                    for i, e in enumerate(entries))
    s = raw_conn(bounded.d.socket, timeout=60)

    def send_then_half_close() -> None:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)

    sender = threading.Thread(target=send_then_half_close, daemon=True)
    sender.start()
    try:
        answers = read_until_eof(s)
    finally:
        sender.join(timeout=60)
        s.close()
    errors = [a for a in answers if not isinstance(a, m.Appended)]
    assert not errors, errors[:3]
    assert sorted(a.id for a in answers) == list(range(1, count + 1)), f"{len(answers)} of {count} answered"
    written = read_entries(main_path(bounded.d.root, CWD, sid))
    assert [e["uuid"] for e in written] == [e["uuid"] for e in entries]
    bounded.check()


def whole_frames(data: bytes, sent: int) -> int:
    """How many whole frames the first ``sent`` bytes of ``data`` sent over and over hold."""
    rounds, rest = divmod(sent, len(data))
    return rounds * len(FrameBuffer(1 << 30).feed(data)) + len(FrameBuffer(1 << 30).feed(data[:rest]))


def test_a_half_closed_client_that_does_not_read_is_held_to_the_output_budget(bounded: Bounded):
    """Status requests pipelined, never read, then SHUT_WR: the daemon stops
    reading at the output budget as for any non-reader (the EOF waits unread
    behind the requests it did not take yet) and holds no more than that
    budget; once the client reads it gets one answer per whole request it
    sent, then the daemon closes."""
    cap = 16 * MiB
    s, sent = attacks.pipeline_without_reading(bounded.d.socket, cap)
    assert sent < cap, "the daemon kept reading a client that never reads its answers"
    s.shutdown(socket.SHUT_WR)
    st = bounded.check()
    out = st.budgets["outputBytes"]
    assert BUDGETS["max_output_bytes"] // 4 <= out["used"] <= out["limit"] + MiB, out
    answers = read_until_eof(s)
    s.close()
    assert all(isinstance(a, m.StatusResult) for a in answers)
    burst = b"".join(encode(m.Status(id=i + 1)) for i in range(attacks.STATUS_BURST))
    assert len(answers) == whole_frames(burst, sent)
    assert bounded.status().clients == 1  # the status call's own: the half-closed one is gone


def test_half_closed_clients_that_do_not_read_are_still_cut_off_together(daemon_factory, short_tmp):
    """Eight non-readers that half-closed: held to max_output_total_bytes
    together, past it the newest is disconnected as any non-reader is; the
    ones held get every answer once they read, then the daemon's close."""
    cfg = short_tmp / "c.toml"
    cfg.write_text(f"max_output_bytes = {MiB}\nmax_output_total_bytes = {3 * MiB}\n")
    d = daemon_factory().start("--config", str(cfg), "--log-level", "info")
    readers = [attacks.pipeline_without_reading(d.socket, 8 * MiB, patience=0.3) for _ in range(8)]
    for s, _ in readers:
        s.shutdown(socket.SHUT_WR)
    unread = settled_non_readers(d)
    assert 0 < unread["used"] <= unread["limit"] and 2 <= unread["clients"] < 8, unread
    burst = b"".join(encode(m.Status(id=i + 1)) for i in range(attacks.STATUS_BURST))
    dropped = 0
    for s, sent in readers:
        try:
            answers = read_until_eof(s)
        except ConnectionResetError:
            answers = None
        s.close()
        if answers is None or len(answers) < whole_frames(burst, sent):
            dropped += 1  # disconnected: its unread answers are gone
    assert dropped == 8 - unread["clients"]
    assert "does not read its answers" in d.log_text()
    with d.client() as c:
        st = c.status()
    assert st.budgets["unreadOutputBytes"]["used"] == 0 and st.clients == 1
