"""Talking to JetStream: connecting, the stream, the last range of a subject,
publishing with acknowledgements, and the error an append gets when a required
mirror cannot take it.

Why it exists: everything that knows NATS and JetStream's wire details (header
names, error codes, the shape of an acknowledgement) stays here, so the rest of
the mirror deals in ranges, sequences and exceptions.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec

from sessiond.config import ConfigError, MirrorSettings
from sessiond.mirror.stream_format import HDR_OFFSET, parse_offset
from sessiond.wire.errors import MIRROR_UNAVAILABLE, SessiondError

log = logging.getLogger("sessiond")


HDR_MSG_ID = "Nats-Msg-Id"
HDR_EXPECTED_SEQ = "Nats-Expected-Last-Subject-Sequence"
WRONG_LAST_SEQUENCE = 10071
"""JetStream's error when the subject's last message is not the one expected."""
DUPLICATE_WINDOW = 120.0

# ------------------------------------------------- errors, connection and stream


def mirror_error(message: str) -> SessiondError:
    return SessiondError(message, code=MIRROR_UNAVAILABLE)


def require_client() -> None:
    """The nats-py client is an optional extra: say how to get it."""
    try:
        import nats  # noqa: F401
    except ImportError:
        raise ConfigError("mirror: the [mirror] section needs nats-py: pip install 'sessiond[mirror]'") from None


async def connect(cfg: MirrorSettings, name: str, *, forever: bool = True, **callbacks: Any):
    """A NATS connection with the settings both the daemon and the CLI use.

    ``forever``: keep trying (the first connection too) and reconnect forever
    (the daemon); else give up after a few rounds of the server list (the CLI).
    Fast pings, so a dead server is noticed within seconds even without a reset."""
    import nats

    async def quiet(exc: Exception) -> None:
        log.debug("mirror: nats: %s", exc)

    opts: dict[str, Any] = {
        "servers": list(cfg.servers),
        "name": name,
        "connect_timeout": 2,
        "reconnect_time_wait": 0.5,
        "max_reconnect_attempts": -1 if forever else 2,
        "ping_interval": 5,
        "max_outstanding_pings": 3,
        "error_cb": callbacks.pop("error_cb", quiet),
        **callbacks,
    }
    if cfg.credentials is not None:
        opts["user_credentials"] = str(cfg.credentials)
    return await nats.connect(**opts)


async def ensure_stream(js: Any, cfg: MirrorSettings) -> int | None:
    """Create the stream if missing; refuse one that does not take our subjects.
    The stream's ``max_msg_size`` (None: no limit): an existing stream is used
    as it is, so its limit bounds the ranges sent to it."""
    from nats.js import api
    from nats.js.errors import BadRequestError, NotFoundError

    config = api.StreamConfig(
        name=cfg.stream,
        subjects=[f"{cfg.subject_prefix}.>"],
        storage=api.StorageType.FILE,
        num_replicas=cfg.replicas,
        duplicate_window=DUPLICATE_WINDOW,
        allow_direct=True,
    )
    try:
        info = await js.add_stream(config)
    except BadRequestError:
        pass  # exists with another configuration: fine if it takes our subjects
    else:
        return _size_limit(info)
    try:
        owner = await js.find_stream_name_by_subject(f"{cfg.subject_prefix}.x.y")
    except NotFoundError:
        owner = None
    if owner != cfg.stream:
        raise mirror_error(f"stream {cfg.stream} exists but does not take subjects {cfg.subject_prefix}.>")
    return _size_limit(await js.stream_info(cfg.stream))


def _size_limit(info: Any) -> int | None:
    limit = info.config.max_msg_size
    return limit if limit is not None and limit > 0 else None


async def remote_end(js: Any, stream: str, subject: str, names: dict[str, str]) -> tuple[int, int, bytes, int]:
    """Where the stream's copy of a file ends: (end, start of the last range, its
    bytes, its stream sequence); (0, 0, b"", 0) when the stream has nothing of it.

    The last message is untrusted (anyone with access may have published it):
    ``ForeignRange`` when its headers do not name the file as ``names`` (the
    file's ``Sessiond-Project`` and ``Sessiond-File``) do, or give no plain offset."""
    from nats.js.errors import NotFoundError

    try:
        msg = await js.get_last_msg(stream, subject)
    except NotFoundError:
        return 0, 0, b"", 0
    data = msg.data or b""
    headers = msg.headers or {}
    seq = msg.seq or 0
    for name, value in names.items():
        if headers.get(name) != value:
            raise ForeignRange(seq, f"its {name} header is {headers.get(name)!r}")
    start = parse_offset(headers.get(HDR_OFFSET))
    if start is None:
        raise ForeignRange(seq, f"its {HDR_OFFSET} header {headers.get(HDR_OFFSET)!r} is not a byte offset")
    return start + len(data), start, data, seq


class ForeignRange(Exception):
    """The stream's last message of a file is not a range of it as sessiond sends
    one: its copy cannot be continued."""

    def __init__(self, seq: int, why: str) -> None:
        super().__init__(f"the stream's last message of it (sequence {seq}) is not a range of it: {why}")


class PublishRefused(Exception):
    """JetStream answered a publish with an error (``err_code`` is its code)."""

    def __init__(self, err_code: int | None, description: str) -> None:
        super().__init__(f"JetStream refused a range: {description} (err_code {err_code})")
        self.err_code = err_code


class MirrorFailure(Exception):
    """The mirror's own reasons to start over from the watermarks (an ack that
    says no stream answered, an unreadable one, and the pump's own)."""


# ------------------------------------------------------------------ the ack inbox


class AckInbox:
    """Publishes with each acknowledgement delivered to our own inbox, as a
    future of the stream sequence (nats-py's publish_async loses error acks).
    One per mirror; ``subscribe`` again on each new connection."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.nc: Any = None
        self._acks: dict[str, asyncio.Future] = {}
        self._n = 0
        self._inbox = ""

    async def subscribe(self, nc: Any) -> None:
        self.nc = nc
        self._inbox = nc.new_inbox()
        await nc.subscribe(self._inbox + ".*", cb=self._on_ack)

    async def publish(self, subject: str, data: bytes, headers: dict[str, str]) -> asyncio.Future:
        """The future's result is the stream sequence; its exception
        ``PublishRefused`` (JetStream said no) or ``MirrorFailure``; the mirror
        cancels it when it starts over (a failure, a lost track)."""
        self._n += 1
        token = str(self._n)
        fut = self.loop.create_future()
        self._acks[token] = fut
        fut.add_done_callback(lambda _f: self._acks.pop(token, None))
        await self.nc.publish(subject, data, reply=f"{self._inbox}.{token}", headers=headers)
        return fut

    async def _on_ack(self, msg: Any) -> None:
        fut = self._acks.pop(msg.subject.rpartition(".")[2], None)
        if fut is None or fut.done():
            return
        if not msg.data:  # a status message: 503 no responders (no stream takes the subject)
            status = (msg.headers or {}).get("Status", "")
            fut.set_exception(MirrorFailure(f"no stream answered (status {status})"))
            return
        try:
            resp = msgspec.json.decode(msg.data)
        except msgspec.DecodeError:
            fut.set_exception(MirrorFailure("unreadable JetStream acknowledgement"))
            return
        err = resp.get("error") if isinstance(resp, dict) else None
        if err:
            fut.set_exception(PublishRefused(err.get("err_code"), err.get("description", "")))
        else:
            fut.set_result(int(resp.get("seq", 0)))
