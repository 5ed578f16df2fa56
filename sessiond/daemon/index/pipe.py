"""What the daemon and its indexer process say to each other over two pipes.

Frames are a 4-byte big-endian length and a msgpack body, as on the socket;
the messages are tagged Structs. The daemon never sends transcript bytes: only
"look at these files again" (the file is the queue), so a message is a few
paths and nothing the indexer does can make the daemon hold more.
"""

from __future__ import annotations

import struct

import msgspec

from sessiond.wire.fsnames import pack, unpack


class _Msg(msgspec.Struct, tag=True, tag_field="op"):
    pass


class Look(_Msg):
    """These files changed (the daemon wrote them, or a follower saw it)."""

    paths: list[str]


class Rescan(_Msg):
    """Answer ``Done(token)`` once every file noted before is caught up, and
    re-stat ``projects`` (None: all) unless that was done less than ``max_age``
    s ago: before the answer with ``wait``, after it without (the asker does
    not wait for a re-stat; the next one finds what it found)."""

    token: int
    projects: list[str] | None = None
    max_age: float = 0.0
    wait: bool = True


class Reindex(_Msg):
    """Forget ``projects`` (None: everything) and index them from scratch."""

    token: int
    projects: list[str] | None = None


class Damaged(_Msg):
    """A search found the index file ``(dev, ino)`` unreadable (``reason``):
    rebuild it, unless it is no longer the file being written."""

    dev: int
    ino: int
    reason: str


class Stop(_Msg):
    """Daemon to indexer: commit what is done and exit (the daemon is stopping)."""


class Done(_Msg):
    """Indexer to daemon: the answer to the ``Rescan`` or ``Reindex`` with this
    ``token``; for a reindex, the files and bytes indexed and the seconds it took."""

    token: int
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0


class Progress(_Msg):
    """Indexer to daemon during a reindex or a rebuild: bytes indexed so far out of
    ``total``, which ``status`` shows."""

    token: int
    done: int
    total: int


class State(_Msg):
    """What searches may do with the index, sent whenever it changes: ``ok``
    (read it), ``rebuilding`` (it is being built anew, from empty: scan the
    files), ``scanning`` (it cannot be written, ``reason`` says why: scan the
    files); and which file it is (``dev``, ``ino``; 0 when there is none),
    so a reader can tell the file at the path is still that one."""

    state: str
    reason: str = ""
    dev: int = 0
    ino: int = 0
    lost: bool = False
    """With ``rebuilding``: the index there was lost or unusable (not a first
    build, nor a reindex someone asked for)."""


REBUILD_TOKEN = -1
"""The ``Progress`` token of a rebuild nobody asked for (the index was found
unusable); the daemon's own tokens count from 0."""

ToWorker = Look | Rescan | Reindex | Damaged | Stop
FromWorker = Done | Progress | State

_header = struct.Struct(">I")
_encoder = msgspec.msgpack.Encoder()


def frame(msg: _Msg) -> bytes:
    body = pack(_encoder, msg)
    return _header.pack(len(body)) + body


class Splitter:
    """Bytes in, decoded messages out (frames may arrive in any pieces)."""

    def __init__(self, kind) -> None:
        self.buf = bytearray()
        self.decoder = msgspec.msgpack.Decoder(kind)

    def feed(self, data: bytes) -> list:
        self.buf += data
        out = []
        while len(self.buf) >= 4:
            (n,) = _header.unpack_from(self.buf)
            if len(self.buf) < 4 + n:
                break
            out.append(unpack(self.decoder, bytes(self.buf[4:4 + n])))
            del self.buf[:4 + n]
        return out
