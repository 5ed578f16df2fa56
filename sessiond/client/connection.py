"""The blocking client: plain sockets, usable from exit handlers and sync code.

``Client`` connects (autostarting the daemon when its socket is absent), does the
Hello handshake, and exchanges typed messages. ``call`` sends one request and
waits for its answer; ``pipeline`` sends many before reading, which is how the CLI
streams a big file. Every wait has a timeout.

It imports only ``wire/core.py``'s messages (what its own requests and their
answers are): ``sessiond-hook`` runs on it without building every message.
"""

from __future__ import annotations

# _socket, the C socket type itself: ``socket.py`` only wraps it in enums and
# ``makefile``, and building those enums was 5 ms of a 60 ms ``sessiond status``
import _socket
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sessiond.store.locations import check_private_dir, default_root, default_socket
from sessiond.wire import core
from sessiond.wire.errors import (
    LEASE_LOST,
    SESSION_BUSY,
    DaemonUnavailable,
    LeaseLost,
    ProtocolError,
    RemoteError,
    SessionBusy,
    UnsafeSocketDir,
    VersionMismatch,
    WrongRoot,
)
from sessiond.wire.frames import DEFAULT_MAX_FRAME

from .core import Call, Channel, Sleep

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (sessiond-hook never does)
if TYPE_CHECKING:
    from collections.abc import Generator, Iterable
    from typing import Any, TypeVar

    from sessiond.wire import messages as m

    from .core import Connect
    from .session import Session

    T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0
RECV_SIZE = 1 << 20
"""The most one read of the daemon's answers takes (a big answer arrives in several)."""


def check_socket_owner(path: Path) -> None:
    """Refuse a daemon socket that belongs to another user, or sits in a
    directory that is not ours alone (``UnsafeSocketDir``: not retried, the CLI
    prints it as one line). FileNotFoundError when there is none yet."""
    try:
        check_private_dir(path.parent)
    except PermissionError as exc:
        raise UnsafeSocketDir(str(exc)) from None
    st = os.lstat(path)
    if not stat.S_ISSOCK(st.st_mode):
        raise DaemonUnavailable(f"{path} is not a socket")
    if st.st_uid != os.getuid():
        raise DaemonUnavailable(f"{path} is owned by uid {st.st_uid}; refusing to talk to it")


def raise_for(resp: m.Response) -> m.Response:
    """``resp`` itself, or the exception an ``Error`` answer stands for."""
    if isinstance(resp, core.Error):
        if resp.code == "version_mismatch":
            raise VersionMismatch(resp.message)
        if resp.code == LEASE_LOST:
            raise LeaseLost(resp.message, holder=resp.holder)
        if resp.code == SESSION_BUSY:
            raise SessionBusy(resp.message, holder=resp.holder)
        raise RemoteError(resp.message, code=resp.code)
    return resp


class Endpoint:
    """Where and how a client reaches its daemon (shared by both clients)."""

    def __init__(
        self,
        socket_path: Path | str | None = None,
        *,
        root: Path | str | None = None,
        autostart: bool = True,
        timeout: float = DEFAULT_TIMEOUT,
        name: str = "sessiond-py",
        other_root_ok: bool = False,
    ) -> None:
        self.socket_path = Path(socket_path) if socket_path else default_socket()
        self.root = Path(root) if root else None
        self.other_root_ok = other_root_ok
        """Connect even to a daemon of another root than ``root`` (to stop it, show
        its status, or tell the user its answer is not used); by default that
        is ``WrongRoot``, so nothing is ever written into another store."""
        self.served_root: str | None = None
        """The root the daemon serves (its Welcome), once connected."""
        self.autostart = autostart
        self.timeout = timeout
        self.name = name
        self.daemon_pid: int | None = None
        self.max_frame_bytes = DEFAULT_MAX_FRAME
        """The daemon's frame cap (from its Welcome): requests are sized to fit."""

    def welcomed(self, welcome: m.Welcome) -> None:
        """Take in the daemon's Welcome; ``WrongRoot`` when it serves another root
        than the one this client names (unless ``other_root_ok``)."""
        self.daemon_pid = welcome.pid
        self.max_frame_bytes = welcome.max_frame_bytes or DEFAULT_MAX_FRAME
        self.served_root = welcome.root or None
        if self.served_root is not None and not self.other_root_ok and not self.serves_own_root():
            raise WrongRoot(f"the daemon on {self.socket_path} serves {self.served_root}, not {self.root}; "
                            "nothing sent to it")

    def serves_own_root(self) -> bool:
        """True unless the daemon is known to serve another root than ``root``
        (no root named: whatever it serves is this client's)."""
        if self.root is None or self.served_root is None:
            return True
        return os.path.realpath(self.served_root) == os.path.realpath(self.root)


class Client(Endpoint):
    """The blocking client: one Unix socket, the Hello handshake, then typed requests
    and their answers (``call``, ``pipeline``); starts the daemon when none runs unless
    told not to. What the CLI, ``Session`` and ``sessiond-hook`` talk through."""

    def __init__(self, socket_path: Path | str | None = None, **kw: Any) -> None:
        super().__init__(socket_path, **kw)
        self._sock: _socket.socket | None = None
        self._recv_buf: bytearray | None = None
        self.channel = Channel()
        """Ids, frames and answers of the wire (the sans-IO core, ``core.py``)."""
        self.handles: dict[str, int] = {}
        """Open ``Session`` handles per session id. The daemon attaches a session
        to the connection, not to a handle: only the last handle's close may
        send ``Close`` (see ``Session.close``)."""

    # ----------------------------------------------------------------- connection

    def connect(self) -> Client:
        if self._sock is not None:
            return self
        try:
            sock = self._dial()
        except (FileNotFoundError, ConnectionRefusedError):
            if not self.autostart:
                raise DaemonUnavailable(f"no daemon is running on {self.socket_path}") from None
            from .autostart import start_daemon  # only when needed: it imports subprocess

            start_daemon(self.socket_path, self.root)
            try:
                sock = self._dial()
            except OSError as exc:
                raise DaemonUnavailable(f"cannot reach the daemon on {self.socket_path}: {exc}") from None
        except OSError as exc:
            raise DaemonUnavailable(f"cannot reach the daemon on {self.socket_path}: {exc}") from None
        self._sock = sock
        self.channel.opened()
        welcome = self.call(self.channel.hello(self.name, os.getpid()))
        assert isinstance(welcome, core.Welcome)
        try:
            self.welcomed(welcome)
        except WrongRoot:
            self.close()
            raise
        return self

    def _dial(self) -> _socket.socket:
        check_socket_owner(self.socket_path)
        deadline = time.monotonic() + self.timeout
        while True:
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(str(self.socket_path))
                return sock
            except BlockingIOError:
                # EAGAIN: the daemon's listen backlog is full (a storm of
                # connections it has not accepted yet), not a dead daemon.
                sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
            except BaseException:
                sock.close()
                raise

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    @contextmanager
    def untimed(self) -> Iterator[None]:
        """Inside the block, answers are awaited as long as they take (a watch,
        a reindex of gigabytes), not ``timeout``: a daemon that goes away still
        ends the wait (its socket closes), and ``abort`` from another thread
        ends it too."""
        if self._sock is None:
            self.connect()
        assert self._sock is not None
        self._sock.settimeout(None)
        try:
            yield
        finally:
            if self._sock is not None:
                self._sock.settimeout(self.timeout)

    def abort(self) -> None:
        """End a wait for an answer that another thread is in: the socket is
        shut down, and that wait raises ``DaemonUnavailable``."""
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(_socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> Client:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------- messages

    def next_id(self) -> int:
        return self.channel.next_id()

    def send(self, req: m.Request) -> None:
        if self._sock is None:
            self.connect()
        try:
            self._sock.sendall(self.channel.encode(req))  # type: ignore[union-attr]  # connected: callers connect first
        except OSError as exc:
            self.close()
            raise DaemonUnavailable(f"lost the daemon while sending: {exc}") from None

    def receive(self, rid: int) -> m.Response:
        """The response to request ``rid`` (answers to others are kept for later;
        a connection-level refusal answers everything)."""
        channel = self.channel
        while (resp := channel.answer(rid)) is None:
            for answer in self.read_answers():
                channel.file(answer)
        return resp

    def read_answers(self) -> list[m.Response]:
        """The answers completed by the next bytes from the daemon, not filed
        (``DaemonUnavailable``, the socket closed, when none come within the
        timeout or it went away; ``ProtocolError``, closed too, for a bad stream)."""
        data = self._receive_data()
        try:
            return self.channel.decode(data)  # decoded before the buffer is read into again
        except ProtocolError:
            self.close()
            raise

    def _receive_data(self) -> memoryview:
        """The next bytes from the daemon, up to ``RECV_SIZE`` of them: a view
        of the client's one receive buffer, valid until the next read. A
        fresh ``recv(RECV_SIZE)`` allocates (and the allocator maps) a buffer
        that size for every read, which costs a watcher far more per frame
        than decoding the frame does; and the frames are decoded straight out
        of the buffer (``FrameBuffer.feed``), not out of a copy of it."""
        assert self._sock is not None
        buf = self._recv_buf
        if buf is None:
            buf = self._recv_buf = bytearray(RECV_SIZE)
        try:
            size = self._sock.recv_into(buf)
            data = memoryview(buf)[:size]
        except TimeoutError:
            self.close()
            raise DaemonUnavailable(f"the daemon did not answer within {self.timeout:g}s") from None
        except OSError as exc:
            self.close()
            raise DaemonUnavailable(f"lost the daemon: {exc}") from None
        if not data:
            self.close()
            raise DaemonUnavailable("the daemon closed the connection")
        return data

    def call(self, req: m.Request) -> m.Response:
        self.send(req)
        return raise_for(self.receive(req.id))

    def drive(self, steps: Generator[Connect | Call | Sleep, Any, T]) -> T:
        """Run one of the core's state machines (``core.deliver``) on this
        socket: connect, call and sleep as it says, and throw what failed back
        in for it to decide (retry, give up, or raise)."""
        answer: Any = None
        failed: Exception | None = None
        while True:
            try:
                op = steps.send(answer) if failed is None else steps.throw(failed)
            except StopIteration as done:
                return done.value
            answer = failed = None
            try:
                if isinstance(op, Call):
                    answer = self.call(op.request)
                elif isinstance(op, Sleep):
                    time.sleep(op.seconds)
                elif self._sock is None:
                    self.connect()
            except Exception as exc:  # noqa: BLE001 (thrown into the state machine, which re-raises what it does not handle)
                failed = exc

    def pipeline(self, reqs: Iterable[m.Request], window: int = 32) -> list[m.Response]:
        """Send requests keeping up to ``window`` in flight; answers in order.
        Error answers are returned, not raised, so the caller sees each one."""
        out: list[m.Response] = []
        inflight: list[int] = []
        for req in reqs:
            self.send(req)
            inflight.append(req.id)
            if len(inflight) >= window:
                out.append(self.receive(inflight.pop(0)))
        for rid in inflight:
            out.append(self.receive(rid))
        return out

    # ----------------------------------------------------------------- shortcuts

    def status(self) -> m.StatusResult:
        return self.call(core.Status(id=self.next_id()))  # type: ignore[return-value]  # the answer to a Status (an Error raises)

    def flush(self, session: str | None = None, durable: bool = False) -> m.Flushed:
        return self.call(core.Flush(id=self.next_id(), session=session, durable=durable))  # type: ignore[return-value]  # the answer to a Flush (an Error raises)

    def shutdown(self) -> None:
        self.call(core.Shutdown(id=self.next_id()))

    def session(self, session_id: str | None = None, cwd: str | None = None, **kw) -> Session:
        from .session import Session

        return Session(self, session_id=session_id, cwd=cwd, **kw)


__all__ = ["Client", "Endpoint", "default_root", "default_socket"]
