"""The remote mirror: every transcript write, republished to NATS JetStream (SPEC 6).

Why JetStream: a persistent, replicated, ordered log with per-subject optimistic
concurrency, one small server binary, an asyncio client, and clustering when one
server is not enough. sessiond builds no replication protocol of its own: it
appends to that log and reads it back.

**The stream format** (subjects per file, byte-range messages with project, file
and offset headers, so a pull is byte-identical) is defined in
``sessiond.mirror.stream_format``, shared with ``sessiond push`` and ``sessiond pull``.

**One writer per file, enforced by the server.** Ranges of a file go out one at a
time, each with ``Nats-Expected-Last-Subject-Sequence`` = the sequence of the
file's previous range. JetStream refuses a range whose predecessor is not the one
expected, so a range is never stored twice (a resend after a lost ack is refused,
and the stream's last range is then recognised as ours) and two machines
continuing one session cannot interleave: the one that finds another machine's
bytes marks its file diverged. The message id is ``<subject>:<start>-<end>:<crc32>``
for JetStream's duplicate window as a second line of defence. While a range is in
flight the file's next writes pile up into the next range (ack-clocked batching).

Why ranges and not one message per entry with the uuid as id: a uuid is not unique
within a file (1.0.x inline sidechains and fork-inherited messages repeat uuids by
design, and JetStream's dedup is stream-wide), entries without a uuid need a
position anyway, and a message per line costs the client its whole per-message
work (headers, encoding, an ack to wait for) for each line, where a range shares it
among its lines: the mirror shares the daemon's loop.

**The daemon side.** ``Mirror.observe`` is a ``Writer`` observer: it records each
file's size and keeps the written bytes in a bounded in-memory queue; a pump task
publishes them and advances a per-file watermark, ``acked``, on each ack. The file
is the real queue: when the memory queue is full, when the connection fails, or
after a restart, the pump re-reads the file from the watermark. A file first seen
at an offset > 0 (it existed before, was pulled, or was written while the daemon
was down) asks the stream where its copy ends (the subject's last range, checked
against the local bytes) and catches up from there; a stream that holds MORE than
the local file, or other bytes, means another machine wrote the session: the file
is marked diverged and no longer mirrored. Lagging files are listed in a small
state file, and a run that crashed makes the next one look at every transcript
written since its last save.

Failure policy: ``required = false``: local writes go on, the pump retries with
backoff and catches up from the watermarks, ``status`` shows the lag.
``required = true``: appends are refused (``mirror_unavailable``) while the mirror
is down or for a session with a diverged file, and a ``durable`` append is
acknowledged only once JetStream has acknowledged it too.
"""

from .engine import Mirror
from .jetstream import connect, ensure_stream, mirror_error, remote_end, require_client
from .statefile import STATE_FILE

__all__ = ["STATE_FILE", "Mirror", "connect", "ensure_stream", "mirror_error", "remote_end", "require_client"]
