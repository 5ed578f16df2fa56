"""Running under a service manager: socket activation, notify, units, config."""

from __future__ import annotations

import os
import plistlib
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sessiond.client import Client
from sessiond.client.service import launchd_plist, systemd_units
from sessiond.config import ConfigError, build
from sessiond.wire.errors import DaemonUnavailable
from tests.conftest import REPO
from tests.helpers import wait_until

needs_activate = pytest.mark.skipif(not shutil.which("systemd-socket-activate"), reason="systemd-socket-activate not installed")


def drain(sock: socket.socket) -> list[str]:
    out = []
    sock.setblocking(False)
    while True:
        try:
            out += sock.recv(4096).decode().splitlines()
        except BlockingIOError:
            return out


@needs_activate
def test_socket_activation_notify_ready_watchdog_and_stopping(short_tmp):
    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    sock_path = run / "sessiond.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(short_tmp / "notify"))
    env = {**os.environ, "NOTIFY_SOCKET": str(short_tmp / "notify"), "WATCHDOG_USEC": "200000",
           "SESSIOND_ROOT": str(short_tmp / "root")}
    env.pop("SESSIOND_SOCKET", None)
    log = open(short_tmp / "log", "wb")
    proc = subprocess.Popen(
        ["systemd-socket-activate", "-l", str(sock_path), "-E", "NOTIFY_SOCKET", "-E", "WATCHDOG_USEC", "-E", "SESSIOND_ROOT",
         "-E", "PATH", sys.executable, "-m", "sessiond.client.cli", "serve", "--log-level", "debug"],
        env=env, stdout=log, stderr=log,
    )
    try:
        wait_until(lambda: sock_path.exists() or proc.poll() is not None, "the activation socket", every=0.01)
        assert proc.poll() is None
        # The first connection starts the daemon (it adopts fd 3). The socket file
        # exists from bind(), a moment before listen(): retry a refused connect.
        clients: list[Client] = []

        def connected() -> bool:
            try:
                clients.append(Client(sock_path, autostart=False, timeout=20).connect())
            except DaemonUnavailable:
                return False
            return True

        wait_until(connected, "the activation socket to listen", every=0.01)
        with clients[0] as c:
            before = drain(notify)  # READY=1 was sent before any request was served
            st = c.status()
        assert "READY=1" in before, before
        assert st.pid == proc.pid and st.socket == str(sock_path)
        pings: list[str] = []

        def pinged_twice() -> bool:  # every 100 ms (half of WATCHDOG_USEC): how many by a given time is the machine's
            pings.extend(drain(notify))
            return pings.count("WATCHDOG=1") >= 2

        wait_until(pinged_twice, "two watchdog pings", timeout=10)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert "STOPPING=1" in drain(notify)
        assert sock_path.exists()  # an activated socket belongs to the manager
        text = (short_tmp / "log").read_text()
        assert "socket-activated" in text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        notify.close()


def test_committed_units_are_the_renderer_output():
    for name, text in systemd_units().items():
        assert (REPO / "systemd" / name).read_text() == text
    assert (REPO / "systemd" / "dev.sessiond.plist").read_bytes() == launchd_plist()
    plist = plistlib.loads(launchd_plist("/opt/bin/sessiond", "/tmp/sessiond-501/sessiond.sock"))
    assert plist["Sockets"]["Listeners"]["SockPathMode"] == 384  # 0600 in decimal
    assert plist["ProgramArguments"] == ["/opt/bin/sessiond", "serve"]
    assert plist["KeepAlive"] == {"SuccessfulExit": False} and plist["ExitTimeOut"] > 0


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
def test_units_pass_systemd_analyze_verify(short_tmp, daemon_factory):
    d = daemon_factory()
    out = d.cli("install-service", "--systemd", env={"XDG_CONFIG_HOME": str(short_tmp / "cfg")})
    assert b"systemctl --user" in out.stdout
    unit_dir = short_tmp / "cfg" / "systemd" / "user"
    service = (unit_dir / "sessiond.service").read_text()
    assert f"ExecStart={Path(sys.executable).with_name('sessiond')} serve" in service
    for folder in (REPO / "systemd", unit_dir):
        r = subprocess.run(["systemd-analyze", "verify", "sessiond.socket", "sessiond.service"], cwd=folder,
                           capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr.decode()


# ---------------------------------------------------------------------- config


def test_precedence_flags_over_env_over_file_over_defaults(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text('flush_interval_ms = 30\nfsync = "always"\nlog_level = "warning"\nroot = "/srv/from-file"\n')
    s = build({}, cfg, environ={})
    assert (s.flush_interval, s.fsync, s.log_level, str(s.root)) == (0.03, "always", "warning", "/srv/from-file")
    s = build({}, cfg, environ={"SESSIOND_FLUSH_INTERVAL_MS": "40", "SESSIOND_FSYNC": "never"})
    assert (s.flush_interval, s.fsync, s.log_level) == (0.04, "never", "warning")
    s = build({"flush_interval_ms": 5.0}, cfg, environ={"SESSIOND_FLUSH_INTERVAL_MS": "40"})
    assert s.flush_interval == 0.005
    s = build({}, tmp_path / "missing.toml", environ={}, required=False)  # the default file need not exist
    assert (s.flush_interval, s.fsync) == (0.1, "interval")
    with pytest.raises(ConfigError, match="missing.toml: no such config file"):  # a file named with --config must
        build({}, tmp_path / "missing.toml", environ={})


@pytest.mark.parametrize(
    "text, key",
    [
        ("flush_intervl_ms = 10\n", "flush_intervl_ms"),
        ('fsync = "sometimes"\n', "fsync"),
        ('flush_interval_ms = "fast"\n', "flush_interval_ms"),
        ("flush_interval_ms = -1\n", "flush_interval_ms"),
        ("max_frame_bytes = 10\n", "max_frame_bytes"),
        ("this is not toml", "TOML"),
    ],
)
def test_bad_config_is_one_error_naming_the_key(tmp_path, text, key):
    cfg = tmp_path / "config.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as err:
        build({}, cfg, environ={})
    assert key in str(err.value)


def test_bad_config_stops_serve_with_one_line(daemon_factory, short_tmp):
    cfg = short_tmp / "bad.toml"
    cfg.write_text('fsync = "sometimes"\n')
    d = daemon_factory()
    r = d.cli("serve", "--config", str(cfg), check=False, timeout=30)
    assert r.returncode == 2
    assert r.stderr.count(b"\n") == 1 and b"fsync" in r.stderr and b"Traceback" not in r.stderr
    bad_env = d.cli("serve", check=False, timeout=30, env={"SESSIOND_FSYNC": "nope"})
    assert bad_env.returncode == 2 and b"SESSIOND_FSYNC" in bad_env.stderr


RELOAD_VALUES = {"flush_interval": ("flush_interval_ms = 40", 0.04), "fsync": ('fsync = "never"', "never"),
                 "group_sync": ("group_sync = false", False), "log_level": ('log_level = "warning"', "warning")}
"""A changed value in the file for each key a SIGHUP applies, as (the file's
line, the setting's value after it)."""


def test_sighup_applies_every_reloadable_key_and_only_those(daemon_factory, short_tmp):
    """``sessiond/daemon/reload.py RELOADABLE`` is the one list of what a SIGHUP applies:
    each of them is applied, named in the log with its old and new values, and
    a second SIGHUP of the same file changes nothing."""
    from sessiond.config import Settings
    from sessiond.daemon.reload import RELOADABLE

    assert set(RELOAD_VALUES) == set(RELOADABLE)  # a new reloadable key needs its line here
    cfg = short_tmp / "config.toml"
    cfg.write_text("")
    d = daemon_factory().start("--config", str(cfg))
    cfg.write_text("".join(f"{line}\n" for line, _ in RELOAD_VALUES.values()))
    d.signal(signal.SIGHUP)
    wait_until(lambda: "SIGHUP: config reloaded" in d.log_text(), "the reload")
    logged = next(x for x in d.log_text().splitlines() if "SIGHUP: config reloaded" in x)
    defaults = Settings()
    for name, (_, value) in RELOAD_VALUES.items():
        if name == "log_level":  # every test daemon has --log-level, and a flag wins over the file
            assert "log_level" not in logged, logged
            continue
        assert f"{name} {getattr(defaults, name)} -> {value}" in logged, logged
    assert "next start" not in d.log_text()
    with d.client() as c:
        conf = c.status().config
        assert (conf["flushIntervalMs"], conf["fsync"], conf["groupSync"]) == (40, "never", False)
    d.signal(signal.SIGHUP)
    wait_until(lambda: "SIGHUP: config reloaded, nothing changed" in d.log_text(), "the second reload")


def test_sighup_reloads_what_can_change_and_flags_still_win(daemon_factory, short_tmp):
    cfg = short_tmp / "config.toml"
    cfg.write_text('flush_interval_ms = 50\nfsync = "interval"\n')
    d = daemon_factory().start("--config", str(cfg), "--log-level", "info")
    with d.client() as c:
        conf = c.status().config
        assert (conf["flushIntervalMs"], conf["fsync"], conf["configFile"]) == (50, "interval", str(cfg))
        cfg.write_text('flush_interval_ms = 20\nfsync = "always"\nlog_level = "debug"\n')
        d.signal(signal.SIGHUP)
        wait_until(lambda: c.status().config["flushIntervalMs"] == 20, "the reload")
        assert c.status().config["fsync"] == "always"
        cfg.write_text('flush_interval_ms = 20\nfsync = "always"\nlog_level = "debug"\nmax_queued_bytes = 1000000\n')
        d.signal(signal.SIGHUP)  # a key that cannot change at run time is named, not applied
        wait_until(lambda: "only applied at the next start: max_queued_bytes" in d.log_text(), "the second reload")
        assert c.status().config["maxQueuedBytes"] == 256 * 1024 * 1024
        cfg.write_text("flush_interval_ms = oops\n")  # a broken edit keeps the old config
        d.signal(signal.SIGHUP)
        wait_until(lambda: "config not reloaded" in d.log_text(), "the refused reload")
        assert c.status().config["flushIntervalMs"] == 20
    assert "SIGHUP: config reloaded: flush_interval 0.05 -> 0.02" in d.log_text()
    d.stop()
    cfg.write_text("flush_interval_ms = 20\n")
    d2 = daemon_factory(name="flagged").start("--config", str(cfg), "--flush-interval", "70")
    with d2.client() as c:
        cfg.write_text("flush_interval_ms = 10\n")
        d2.signal(signal.SIGHUP)
        wait_until(lambda: "SIGHUP" in d2.log_text(), "the reload")
        assert c.status().config["flushIntervalMs"] == 70
    assert "only applied at the next start" not in d2.log_text()  # a flag that wins is no change
