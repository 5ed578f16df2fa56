"""Service definitions for systemd (user units) and launchd (user agent).

The renderer here is the single source of the unit texts: the files committed in
``systemd/`` are its output for a generic ``/usr/bin/env sessiond`` (a test keeps
them identical), and ``sessiond install-service`` writes it with the real path of
the running executable.
"""

from __future__ import annotations

import os
import plistlib
import shutil
import sys
from pathlib import Path

GENERIC = "/usr/bin/env sessiond"

SOCKET_UNIT = """\
# sessiond: the listening socket, owned by systemd (socket activation).
# Install for the current user with `sessiond install-service --systemd`.
[Unit]
Description=sessiond socket (AI agent transcript daemon)

[Socket]
ListenStream={listen}
SocketMode=0600
DirectoryMode=0700
Accept=no

[Install]
WantedBy=sockets.target
"""

SERVICE_UNIT = """\
# sessiond: one writer for every AI agent transcript of this user.
# `sessiond install-service --systemd` writes this with the real executable path.
[Unit]
Description=sessiond: one writer for every AI agent transcript
Requires=sessiond.socket
After=sessiond.socket

[Service]
Type=notify
NotifyAccess=main
{environment}ExecStart={exec} serve
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=1s
# Exit 3: another daemon already owns the socket or the store root; a restart cannot help.
RestartPreventExitStatus=3
# Shutdown drains every queue and fdatasyncs every file before exiting.
TimeoutStopSec=60s
WatchdogSec=30s
UMask=0077
# Hardening that works in user units (no mount namespaces needed).
NoNewPrivileges=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
RestrictNamespaces=yes
SystemCallArchitectures=native
CapabilityBoundingSet=
KeyringMode=private

[Install]
WantedBy=default.target
Also=sessiond.socket
"""

LAUNCHD_LABEL = "dev.sessiond"


def executable() -> str:
    """How to run this installation's sessiond: its console script when found
    beside the interpreter, else ``python -m sessiond.client.cli``."""
    script = Path(sys.executable).with_name("sessiond")
    if script.exists():
        return str(script)
    found = shutil.which("sessiond")
    if found:
        return os.path.abspath(found)
    return f"{sys.executable} -m sessiond.client.cli"


GENERIC_LISTEN = "%t/sessiond/sessiond.sock"
"""systemd's own spelling of ``$XDG_RUNTIME_DIR/sessiond/sessiond.sock``, the
default socket."""


def _unit_value(value: str) -> str:
    """A path inside a unit file: ``%`` is a specifier there, so it is doubled."""
    return value.replace("%", "%%")


def systemd_units(exec_cmd: str = GENERIC, root: str | None = None, socket: str | None = None) -> dict[str, str]:
    """The two units; ``root``/``socket`` (a custom ``SESSIOND_ROOT`` or
    ``SESSIOND_SOCKET``) make the units serve that store on that socket, both
    in ``ListenStream=`` and in the daemon's environment, which clients share."""
    env = {"SESSIOND_ROOT": root, "SESSIOND_SOCKET": socket}
    environment = "".join(f'Environment="{k}={_unit_value(v)}"\n' for k, v in env.items() if v)
    listen = _unit_value(socket) if socket else GENERIC_LISTEN
    return {"sessiond.socket": SOCKET_UNIT.format(listen=listen),
            "sessiond.service": SERVICE_UNIT.format(exec=exec_cmd, environment=environment)}


def launchd_plist(exec_cmd: str = GENERIC, socket_path: str = "/tmp/sessiond-UID/sessiond.sock", root: str | None = None) -> bytes:
    log = str(Path(socket_path).with_name("sessiond.log"))
    doc = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": [*exec_cmd.split(), "serve"],
        "EnvironmentVariables": {"SESSIOND_SOCKET": socket_path, **({"SESSIOND_ROOT": root} if root else {})},
        "Sockets": {"Listeners": {"SockPathName": socket_path, "SockPathMode": 0o600}},
        "KeepAlive": {"SuccessfulExit": False},
        "ExitTimeOut": 60,
        "ProcessType": "Background",
        "Umask": 0o077,
        "StandardErrorPath": log,
    }
    return plistlib.dumps(doc, sort_keys=False)


def systemd_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "systemd" / "user"


def enabled_links() -> list[Path]:
    """The symlinks ``systemctl --user enable`` made for our units: while they
    exist, removing the unit files would leave systemd pointing at nothing."""
    base = systemd_dir()
    return [p for p in (base / "sockets.target.wants" / "sessiond.socket", base / "default.target.wants" / "sessiond.service")
            if p.is_symlink()]


def launchd_path() -> Path:
    return Path.home() / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
