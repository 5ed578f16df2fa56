"""Default places: the store root and the daemon's socket.

Both sides must compute the same defaults, so they live in the protocol package.
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

from .safeopen import UnsafePath, open_regular, read_regular

SOCKET_NAME = "sessiond.sock"
LOG_NAME = "sessiond.log"
MAX_CONFIG_BYTES = 1024 * 1024
"""The config file's cap (a few dozen keys): a bigger one is refused unread."""


def config_path() -> Path:
    """``SESSIOND_CONFIG``, else ``$XDG_CONFIG_HOME/sessiond/config.toml``."""
    env = os.environ.get("SESSIOND_CONFIG")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "sessiond" / "config.toml"


def _from_config_file(key: str) -> str | None:
    """``root``/``socket`` as the config file sets them, so clients find the
    daemon the file configured. A bad file is the daemon's to report."""
    try:
        data = read_regular(config_path(), MAX_CONFIG_BYTES, follow=True)
    except OSError:  # a FIFO, a device or a huge file there included (read_regular)
        return None
    import msgspec

    try:
        value = msgspec.toml.decode(data).get(key)
    except (msgspec.DecodeError, AttributeError):
        return None
    return os.path.expanduser(value) if isinstance(value, str) and value else None


def default_root() -> Path:
    env = os.environ.get("SESSIOND_ROOT") or _from_config_file("root")
    if env:
        return Path(env)
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "sessiond"


def default_socket() -> Path:
    env = os.environ.get("SESSIOND_SOCKET") or _from_config_file("socket")
    if env:
        return Path(env)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "sessiond" / SOCKET_NAME
    return Path(f"/tmp/sessiond-{os.getuid()}") / SOCKET_NAME


def lock_path(socket: Path) -> Path:
    """The file a daemon holds an exclusive flock on for its whole life."""
    return socket.with_name(socket.name + ".lock")


def open_private_file(path: Path, flags: int) -> int:
    """Open a file of the socket directory (the lock, the log): never through a
    symlink, never blocking, and only a regular file of ours; PermissionError
    naming it otherwise."""
    try:
        fd = open_regular(path, flags, 0o600)
    except UnsafePath as exc:
        raise PermissionError(exc.strerror) from None
    st = os.fstat(fd)
    if st.st_uid != os.getuid():
        os.close(fd)
        raise PermissionError(f"{path} is owned by uid {st.st_uid}, not {os.getuid()}; refusing to use it")
    return fd


def daemon_holds_lock(socket: Path) -> bool:
    """True while a daemon process is alive for ``socket`` (answering or not).

    A client must not write transcripts itself while this holds: a stalled
    daemon may still write what it was sent. PermissionError when the socket
    directory or the lock is not ours (then no daemon of ours can hold it).
    """
    try:
        check_private_dir(socket.parent)
    except FileNotFoundError:
        return False
    try:
        fd = open_private_file(lock_path(socket), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def check_private_dir(path: Path) -> None:
    """Refuse a socket directory another user could tamper with.

    Raises PermissionError naming the problem: a symlink, another owner, or
    group/other permission bits. Checked before anything in it is opened, by
    the daemon and the clients alike (another local user may pre-create
    ``/tmp/sessiond-<uid>``).
    """
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise PermissionError(f"{path} is a symlink; refusing to use it")
    if not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"{path} is not a directory")
    if st.st_uid != os.getuid():
        raise PermissionError(f"{path} is owned by uid {st.st_uid}, not {os.getuid()}")
    if st.st_mode & 0o077:
        raise PermissionError(f"{path} has mode {stat.S_IMODE(st.st_mode):o}; it must be 0700")
