"""The daemon's settings: flags > environment > config file > defaults.

The file is ``$XDG_CONFIG_HOME/sessiond/config.toml`` (or ``SESSIOND_CONFIG``), read
with msgspec's TOML support into a Struct that forbids unknown keys, so a typo or
a bad value is one clear error naming the key; each key's bounds and conversion
are in ``config_keys``. SIGHUP re-reads it (``reload``) and applies what can
change at run time, naming the rest as applied at the next start.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from sessiond.search.budget import DEFAULT_CPU_SECONDS
from sessiond.store.locations import MAX_CONFIG_BYTES, config_path, default_root, default_socket
from sessiond.store.safeopen import read_regular
from sessiond.wire.framing import DEFAULT_MAX_FRAME

from .config_keys import KEYS, MIRROR_KEYS, FileConfig, FsyncPolicy, Key, LogLevel, MirrorFileConfig


class ConfigError(Exception):
    """A bad config file, environment variable or flag; the message names the key."""


class MirrorSettings(msgspec.Struct, kw_only=True):
    """The ``[mirror]`` table: where sessions are mirrored (NATS JetStream), see
    ``sessiond/mirror/``. Present only when the table is in the config file."""

    servers: list[str]
    """NATS server URLs (``nats://host:4222``), one or more of the cluster."""
    stream: str = "SESSIOND"
    """The JetStream stream the sessions go to (created if missing)."""
    subject_prefix: str = "sessiond"
    """First tokens of every subject the daemon publishes on."""
    credentials: Path | None = None
    """A NATS ``.creds`` file; None: connect without one."""
    required: bool = False
    """True: an append that the mirror cannot take is refused (SPEC 6: local and
    remote never diverge silently) and a ``durable`` ack waits for JetStream."""
    replicas: int = 1
    """Replicas of the stream when the daemon creates it (3 on a 3-node cluster)."""
    queue_bytes: int = 64 * 1024 * 1024
    """Written lines kept in memory for the mirror; beyond, it re-reads the files."""
    ack_timeout: float = 5.0
    """Seconds to wait for JetStream's acknowledgement of a publish."""
    shutdown_flush: float = 5.0
    """How long shutdown waits for the mirror to catch up before exiting anyway."""
    redact: bool = False
    """True: the stream gets every line with its secrets masked (``secrets.mask_line``:
    the same length, so offsets hold; ids and signatures as written), and what
    other machines pull is masked; the local files stay as written."""


class Settings(msgspec.Struct, kw_only=True):
    """Everything the daemon's behaviour depends on (root, socket, flush and sync
    policy, budgets, limits, index, mirror), from flags, environment, config file and
    defaults in that order; clients take the root and socket from it too."""

    root: Path = msgspec.field(default_factory=default_root)
    """The store (transcripts under ``<root>/projects``); default ``$XDG_DATA_HOME/sessiond``
    (``~/.local/share/sessiond``). Clients read it from the file too."""
    socket: Path = msgspec.field(default_factory=default_socket)
    """The daemon's Unix socket; default ``$XDG_RUNTIME_DIR/sessiond/sessiond.sock``, else
    ``/tmp/sessiond-<uid>/sessiond.sock``. Clients read it from the file too."""
    flush_interval: float = 0.100
    """Coalescing window of the ``queued`` path, in seconds (the file and the
    environment give it in milliseconds)."""
    fsync: FsyncPolicy = "interval"
    """``interval``: dirty files are fdatasync'ed once a second (like Redis everysec)."""
    fsync_interval: float = 1.0
    group_sync: bool = True
    """Files waiting for a sync together share one ``syncfs`` (Linux): far fewer
    journal commits under load, but it also writes out other programs' dirty
    data on that filesystem. False: one fdatasync per file."""
    max_frame: int = DEFAULT_MAX_FRAME
    """Largest frame body a client may send, in bytes (its length header not counted)."""
    max_queued_bytes: int = 256 * 1024 * 1024
    """Above this many queued bytes, connections stop being read until the drain
    catches up (backpressure: latency, never a silent drop)."""
    max_pending_bytes: int = 16 * 1024 * 1024
    """Cap of one session's pre-materialization buffer."""
    max_inflight_bytes: int = 64 * 1024 * 1024
    """Request bytes one connection may have awaiting a written/durable answer."""
    max_inflight_requests: int = 1024
    """Requests one connection may have awaiting an answer owed later; beyond,
    it is not read until answers go out."""
    max_output_bytes: int = 4 * 1024 * 1024
    """Answers one connection may have waiting to be sent (a client that does
    not read them): beyond, it is not read until its socket drains."""
    max_output_total_bytes: int = 256 * 1024 * 1024
    """Answers left unread by clients that stopped reading, over all
    connections: past it, the newest such client is disconnected."""
    max_partial_bytes: int = 256 * 1024 * 1024
    """Bytes of frames still being received, over all connections: beyond, a
    big frame waits (unread) until it fits."""
    max_pending_total_bytes: int = 256 * 1024 * 1024
    """Pre-message entries held over all sessions: beyond, ``busy``."""
    max_parked_requests: int = 65536
    """Requests waiting for a file scan, over all connections: beyond, ``busy``."""
    max_sessions: int = 16384
    """Sessions held in memory (each a few KB): at the budget, idle ones are
    evicted at once; when none is idle, a new session gets ``busy``."""
    max_clients: int = 4096
    """Connections served at once: beyond, a newcomer gets ``busy``."""
    max_list_views: int = 8
    """List scopes (sets of project dirs) whose answers are kept ready to patch
    (``sessiond/daemon/pages.py``; a few hundred bytes per session each): beyond, the
    least recently listed is dropped and made anew when it is listed again."""
    rate_bytes: float = 128 * 1024 * 1024
    """Bytes per second one connection may send (0: no limit); over it, it is
    read more slowly, never refused."""
    rate_burst: float = 256 * 1024 * 1024
    """Bytes one connection may send at once above ``rate_bytes`` (the bucket's size)."""
    frame_timeout: float = 30.0
    """Seconds a client may stay inside a frame before it is cut off."""
    lease_grace: float = 10.0
    """After a start, how long a lease the previous daemon granted waits for its
    holder to reconnect before anyone else may claim the session (SPEC 7)."""
    max_open_files: int = 0
    """Transcript fds kept open at once (LRU); 0: half the fd limit."""
    path_recheck: float = 1.0
    """Seconds between re-checks of every open transcript's path that no inotify
    watch could flag (a symlinked ancestor re-pointed, a mount on top); 0: none."""
    idle_evict: float = 30.0
    """Seconds a session with no clients and nothing queued stays in memory."""
    log_level: LogLevel = "info"
    """Least severe log line written (one line per event, on stderr)."""
    read_threads: int = 2
    """Threads of the read pool (List pages, resend tail reads, scans); syncs
    have their own, so reads never make a durable append wait."""
    expensive_per_client: int = 1
    """Read-pool jobs one connection may have running at once; its others wait
    their turn, behind other connections' (round-robin)."""
    max_expensive_waiting: int = 64
    """Read-pool jobs one connection may have waiting; beyond, ``busy``."""
    max_expensive_jobs: int = 1024
    """Read-pool jobs all connections together may have waiting or running;
    beyond, the connection holding the most is refused ``busy`` (``workers.py``)."""
    config_file: Path | None = None
    """The file read at start and on SIGHUP (it need not exist)."""
    mirror: MirrorSettings | None = None
    search_index: bool = True
    """Keep the full-text index of every transcript (``sessiond/daemon/index/``)."""
    search_index_path: Path | None = None
    """Where the index lives; None: ``<root>/.sessiond-search.sqlite3``."""
    search_refresh: float = 2.0
    """A search starts a re-stat of its scope (files other writers changed)
    unless one was done this many seconds ago; it runs after the answer. 0:
    before every search's answer."""
    search_cpu: float = DEFAULT_CPU_SECONDS
    """CPU seconds one search may use before it is stopped (``bad_request``)."""
    watch_coalesce: float = 0.002
    """Longest a watcher's lines wait for more writes to their file, in seconds
    (the file gives it in milliseconds): a write after a quiet spell goes out
    at once, the writes within this of the last frame go together in one frame
    (at a high write rate, far fewer frames and wake-ups). 0: a frame per write."""
    follow_max_watches: int = 8192
    """inotify watches the follower may hold on the project tree's directories
    (one per dir, not per file); past it, dirs are re-stat'ed every second."""

    def public(self) -> dict[str, str | int | float | bool]:
        return {
            "root": str(self.root),
            "socket": str(self.socket),
            "flushIntervalMs": round(self.flush_interval * 1000, 3),
            "fsync": self.fsync,
            "groupSync": self.group_sync,
            "maxFrame": self.max_frame,
            "maxQueuedBytes": self.max_queued_bytes,
            "logLevel": self.log_level,
            "configFile": str(self.config_file) if self.config_file and self.config_file.exists() else "",
        }


ENV = {
    "SESSIOND_ROOT": "root",
    "SESSIOND_SOCKET": "socket",
    "SESSIOND_FLUSH_INTERVAL_MS": "flush_interval_ms",
    "SESSIOND_FSYNC": "fsync",
    "SESSIOND_LOG_LEVEL": "log_level",
    "SESSIOND_SEARCH_INDEX": "search_index",
}


def read_file(path: Path, *, required: bool = False) -> dict[str, Any]:
    """The keys set in the config file: none when it does not exist, unless it
    was named explicitly (``required``: ``--config``), when that is an error.
    It may be a symlink (a dotfiles checkout), but only to a regular file of
    at most ``MAX_CONFIG_BYTES``: a FIFO or a device there, or a huge file, is
    a ``ConfigError`` naming it, never a hang or a read without end."""
    try:
        data = read_regular(path, MAX_CONFIG_BYTES, follow=True)
    except FileNotFoundError:
        if required:
            raise ConfigError(f"{path}: no such config file") from None
        return {}
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    try:
        cfg = msgspec.toml.decode(data, type=FileConfig)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: {_keyed(exc)}") from None
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return {k: v for k, v in msgspec.structs.asdict(cfg).items() if v is not None}


def read_env(environ: dict[str, str] | None = None) -> dict[str, Any]:
    env = os.environ if environ is None else environ
    raw = {key: env[name] for name, key in ENV.items() if env.get(name)}
    try:
        cfg = msgspec.convert(raw, FileConfig, strict=False)
    except msgspec.ValidationError as exc:
        name = next((n for n, k in ENV.items() if f"`$.{k}`" in str(exc)), "environment")
        raise ConfigError(f"{name}: {_keyed(exc)}") from None
    return {k: v for k, v in msgspec.structs.asdict(cfg).items() if v is not None}


def _keyed(exc: msgspec.ValidationError) -> str:
    """msgspec says ``... - at `$.key```; lead with the key instead."""
    text = str(exc)
    if " - at `$." in text:
        msg, key = text.rsplit(" - at `$.", 1)
        key = key.rstrip("`")
        if msg.startswith("Object contains unknown field `"):  # a nested table
            return f"{key}.{msg.split('`')[1]}: unknown key"
        return f"{key}: {msg}"
    if "unknown field" in text:
        return text.replace("Object contains unknown field", "unknown key")
    return text


def build(flags: dict[str, Any], path: Path | None = None, environ: dict[str, str] | None = None,
          *, required: bool | None = None) -> Settings:
    """Settings from flags (only those given) > env > file > defaults. A file
    named by ``path`` (``--config``) must exist, unless ``required=False``
    (a reload: the file may come later); the default one need not."""
    required = path is not None if required is None else required
    path = path or config_path()
    merged: dict[str, Any] = {}
    merged.update(read_file(path, required=required))
    merged.update(read_env(environ))
    merged.update({k: v for k, v in flags.items() if v is not None})
    settings = Settings(config_file=path)  # kept even while missing: a SIGHUP reads it once it exists
    apply(settings, merged)
    if settings.max_partial_bytes < settings.max_frame:
        raise ConfigError(f"max_partial_bytes: must be at least max_frame_bytes ({settings.max_frame}), "
                          f"got {settings.max_partial_bytes}")
    return settings


def _land(target: Any, keys: dict[str, Key], values: dict[str, Any], prefix: str = "") -> list[str]:
    """Check and set ``values`` (file-key names) on ``target``, in order; the
    first bad one is a ConfigError naming its key. Returns the attributes that
    changed."""
    changed = []
    for name, value in values.items():
        key = keys.get(name) or Key(name)
        why = key.check(value)
        if why is not None:
            raise ConfigError(f"{prefix}{name}: {why}")
        value = key.convert(value)
        if getattr(target, key.attr) != value:
            setattr(target, key.attr, value)
            changed.append(key.attr)
    return changed


def apply(settings: Settings, values: dict[str, Any]) -> list[str]:
    """Set ``values`` (file-key names) on ``settings``; returns what changed."""
    return _land(settings, _SETTINGS_KEYS, values)


def mirror_settings(cfg: MirrorFileConfig) -> MirrorSettings:
    """Check the ``[mirror]`` table; each error names its key."""
    if not cfg.servers:
        raise ConfigError("mirror.servers: at least one server URL is required")
    for url in cfg.servers:
        if "://" not in url or not url.split("://", 1)[1]:
            raise ConfigError(f"mirror.servers: {url!r} is not a URL like nats://host:4222")
    out = MirrorSettings(servers=list(cfg.servers))
    values = {k: v for k, v in msgspec.structs.asdict(cfg).items() if v is not None and k != "servers"}
    _land(out, MIRROR_KEYS, values, "mirror.")
    return out


_SETTINGS_KEYS: dict[str, Key] = {**KEYS, "mirror": Key("mirror", convert=mirror_settings)}
