"""The service manager's notify protocol: one datagram per message, no dependency.

Under systemd (``Type=notify``) the daemon says ``READY=1`` once it accepts
requests, ``STOPPING=1`` when it begins to shut down, ``WATCHDOG=1`` at half of
``WATCHDOG_USEC``, and ``STATUS=`` lines with live figures. Outside systemd
(no ``NOTIFY_SOCKET``) every call is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("sessiond")


class Notifier:
    """The daemon's messages to its service manager (systemd ``Type=notify``): READY,
    STOPPING, WATCHDOG and STATUS datagrams to ``NOTIFY_SOCKET``; without one, every
    call does nothing."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        addr = env.get("NOTIFY_SOCKET", "")
        if addr.startswith("@"):
            addr = "\0" + addr[1:]  # abstract namespace
        self.address = addr or None
        self.watchdog_interval: float | None = None
        usec = env.get("WATCHDOG_USEC")
        wpid = env.get("WATCHDOG_PID")
        if usec and usec.isdigit() and int(usec) > 0 and (not wpid or wpid == str(os.getpid())):
            self.watchdog_interval = int(usec) / 1e6 / 2
        self._sock: socket.socket | None = None
        if self.address:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        # Children (autostarted helpers, tests) must not talk to our manager.
        for key in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
            os.environ.pop(key, None)

    def send(self, *lines: str) -> None:
        if self._sock is None or self.address is None:
            return
        try:
            self._sock.sendto("\n".join(lines).encode(), self.address)
        except OSError as exc:
            log.warning("notify socket %s: %s", self.address, exc)

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def stopping(self) -> None:
        self.send("STOPPING=1", "STATUS=draining queues")

    def watchdog(self) -> None:
        self.send("WATCHDOG=1")

    def status(self, text: str) -> None:
        self.send(f"STATUS={text}")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
