"""Adopting a listening socket handed over by systemd or launchd.

systemd passes it as fd 3 with ``LISTEN_FDS``/``LISTEN_PID``; launchd hands it
out through ``launch_activate_socket`` (libSystem, via ctypes). An adopted socket
belongs to the service manager: the daemon never unlinks or rebinds it.
"""

from __future__ import annotations

import ctypes
import os
import socket
import sys

SD_LISTEN_FDS_START = 3
LAUNCHD_SOCKET_NAME = "Listeners"


def systemd_socket() -> socket.socket | None:
    """The first socket systemd passed to THIS process, or None."""
    pid = os.environ.get("LISTEN_PID")
    fds = os.environ.get("LISTEN_FDS")
    for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(key, None)  # never inherited by children
    if not pid or not fds or pid != str(os.getpid()) or not fds.isdigit() or int(fds) < 1:
        return None
    sock = socket.socket(fileno=SD_LISTEN_FDS_START)
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        raise OSError(f"systemd passed a {sock.family.name}/{sock.type.name} socket; a Unix stream socket is needed")
    os.set_inheritable(sock.fileno(), False)
    return sock


def launchd_socket() -> socket.socket | None:
    """The socket of our launchd ``Sockets`` entry, or None outside launchd."""
    if sys.platform != "darwin" or not os.environ.get("XPC_SERVICE_NAME"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "launch_activate_socket", None)
    if fn is None:
        return None
    fds = ctypes.POINTER(ctypes.c_int)()
    count = ctypes.c_size_t(0)
    fn.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int)), ctypes.POINTER(ctypes.c_size_t)]
    fn.restype = ctypes.c_int
    if fn(LAUNCHD_SOCKET_NAME.encode(), ctypes.byref(fds), ctypes.byref(count)) != 0 or count.value < 1:
        return None
    fd = fds[0]
    for i in range(1, count.value):
        os.close(fds[i])
    libc.free(fds)
    return socket.socket(fileno=fd)


def activated_socket() -> socket.socket | None:
    return systemd_socket() or launchd_socket()
