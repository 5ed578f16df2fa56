"""An entry at the line cap every reader shares, and one byte over, on a
daemon whose frame cap was raised past it: the one over is refused before
anything of its batch is accepted (written, every reader would skip it: an
acknowledged message no resume sees); the one at the cap is written and read."""

from __future__ import annotations

import json
import uuid

from sessiond.store.linecap import MAX_LINE
from sessiond.wire import messages as m
from sessiond.wire.framing import encode
from tests.helpers import line, main_path, read_entries, user

from .attacks import MiB, raw_conn, read_answers

CWD = "/work/line-cap"


def _entry_of(size: int) -> bytes:
    """A user entry of exactly ``size`` bytes."""
    base = user("")
    bare = len(json.dumps(base, separators=(",", ":")).encode())
    base["message"]["content"] = "x" * (size - bare)
    data = json.dumps(base, separators=(",", ":")).encode()
    assert len(data) == size
    return data


def test_an_entry_past_the_line_cap_is_too_large_even_under_a_bigger_frame_cap(daemon_factory) -> None:
    d = daemon_factory().start("--max-frame", str(MAX_LINE + MiB))
    sid = str(uuid.uuid4())
    s = raw_conn(d.socket, timeout=120)
    try:
        first = line(user("before"))
        s.sendall(encode(m.Append(id=1, session=sid, cwd=CWD, entries=[first, _entry_of(MAX_LINE + 1)],
                                  durability="written")))
        over = read_answers(s, 1)[0]
        assert isinstance(over, m.Error) and over.code == "too_large", over
        assert not main_path(d.root, CWD, sid).exists()
        at_cap = _entry_of(MAX_LINE)
        s.sendall(encode(m.Append(id=2, session=sid, cwd=CWD, entries=[first, at_cap], durability="written")))
        assert isinstance(read_answers(s, 1)[0], m.Appended)
    finally:
        s.close()
    assert [e["uuid"] for e in read_entries(main_path(d.root, CWD, sid))] == [
        json.loads(first)["uuid"], json.loads(at_cap)["uuid"]]
