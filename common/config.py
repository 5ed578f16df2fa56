"""The daemon's settings: flags > environment > config file > defaults.

The file is ``$XDG_CONFIG_HOME/sessiond/config.toml`` (or ``SESSIOND_CONFIG``), read
with msgspec's TOML support into a Struct that forbids unknown keys, so a typo or
a bad value is one clear error naming the key. SIGHUP re-reads it and applies
what can change at run time (``RELOADABLE``, and ``MIRROR_RELOADABLE`` in the
``[mirror]`` table) and names the rest as applied at the next start.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import msgspec

from sessiond.protocol.locations import config_path, default_root, default_socket
from sessiond.protocol.wire.framing import DEFAULT_MAX_FRAME

FsyncPolicy = Literal["never", "interval", "always"]
LogLevel = Literal["debug", "info", "warning", "error"]
BUDGETS = ("max_queued_bytes", "max_pending_bytes", "max_inflight_bytes", "max_inflight_requests", "max_output_bytes",
           "max_output_total_bytes", "max_partial_bytes", "max_pending_total_bytes", "max_parked_requests", "max_clients",
           "max_sessions", "max_list_views")
"""Memory budgets (daemon/bounds.py): positive integers, same name in the file."""
RELOADABLE = ("flush_interval", "fsync", "group_sync", "log_level")
MIRROR_RELOADABLE = ("required", "ack_timeout", "queue_bytes", "shutdown_flush")
"""Mirror keys the running mirror reads at each use; the others (where and how it
connects, the stream and subjects its state refers to) need a restart."""


class ConfigError(Exception):
    """A bad config file, environment variable or flag; the message names the key."""


class MirrorSettings(msgspec.Struct, kw_only=True):
    """The ``[mirror]`` table: where sessions are mirrored (NATS JetStream), see
    ``common/mirror/``. Present only when the table is in the config file."""

    servers: list[str]
    stream: str = "SESSIOND"
    subject_prefix: str = "sessiond"
    credentials: Path | None = None
    required: bool = False
    """True: an append that the mirror cannot take is refused (SPEC 6: local and
    remote never diverge silently) and a ``durable`` ack waits for JetStream."""
    replicas: int = 1
    """Replicas of the stream when the daemon creates it (3 on a 3-node cluster)."""
    queue_bytes: int = 64 * 1024 * 1024
    """Written lines kept in memory for the mirror; beyond, it re-reads the files."""
    ack_timeout: float = 5.0
    shutdown_flush: float = 5.0
    """How long shutdown waits for the mirror to catch up before exiting anyway."""


class Settings(msgspec.Struct, kw_only=True):
    root: Path = msgspec.field(default_factory=default_root)
    socket: Path = msgspec.field(default_factory=default_socket)
    flush_interval: float = 0.100
    """Coalescing window of the ``queued`` path, in seconds."""
    fsync: FsyncPolicy = "interval"
    """``interval``: dirty files are fdatasync'ed once a second (like Redis everysec)."""
    fsync_interval: float = 1.0
    group_sync: bool = True
    """Files waiting for a sync together share one ``syncfs`` (Linux): far fewer
    journal commits under load, but it also writes out other programs' dirty
    data on that filesystem. False: one fdatasync per file."""
    max_frame: int = DEFAULT_MAX_FRAME
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
    (``daemon/pages.py``; a few hundred bytes per session each): beyond, the
    least recently listed is dropped and made anew when it is listed again."""
    rate_bytes: float = 128 * 1024 * 1024
    """Bytes per second one connection may send (0: no limit); over it, it is
    read more slowly, never refused."""
    rate_burst: float = 256 * 1024 * 1024
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
    read_threads: int = 2
    """Threads of the read pool (List pages, resend tail reads, scans); syncs
    have their own, so reads never make a durable append wait."""
    expensive_per_client: int = 1
    """Read-pool jobs one connection may have running at once; its others wait
    their turn, behind other connections' (round-robin)."""
    max_expensive_waiting: int = 64
    """Read-pool jobs one connection may have waiting; beyond, ``busy``."""
    config_file: Path | None = None
    """The file read at start and on SIGHUP (it need not exist)."""
    mirror: MirrorSettings | None = None
    search_index: bool = True
    """Keep the full-text index of every transcript (``daemon/index/``)."""
    search_index_path: Path | None = None
    """Where the index lives; None: ``<root>/.sessiond-search.sqlite3``."""
    search_refresh: float = 2.0
    """A search starts a re-stat of its scope (files other writers changed)
    unless one was done this many seconds ago; it runs after the answer. 0:
    before every search's answer."""
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


class MirrorFileConfig(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """The keys of the ``[mirror]`` table (``servers`` is required there)."""

    servers: list[str] | None = None
    stream: str | None = None
    subject_prefix: str | None = None
    credentials: str | None = None
    required: bool | None = None
    replicas: int | None = None
    queue_bytes: int | None = None
    ack_timeout_s: float | None = None
    shutdown_flush_s: float | None = None


class FileConfig(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """The keys a config file may set (all optional)."""

    root: str | None = None
    socket: str | None = None
    flush_interval_ms: float | None = None
    fsync: FsyncPolicy | None = None
    group_sync: bool | None = None
    log_level: LogLevel | None = None
    max_frame_bytes: int | None = None
    max_queued_bytes: int | None = None
    max_pending_bytes: int | None = None
    rate_limit_bytes: float | None = None
    rate_burst_bytes: float | None = None
    frame_timeout_s: float | None = None
    path_recheck_s: float | None = None
    read_threads: int | None = None
    expensive_per_client: int | None = None
    max_expensive_waiting: int | None = None
    idle_evict_s: float | None = None
    lease_grace_s: float | None = None
    mirror: MirrorFileConfig | None = None
    max_inflight_bytes: int | None = None
    max_inflight_requests: int | None = None
    max_output_bytes: int | None = None
    max_output_total_bytes: int | None = None
    max_partial_bytes: int | None = None
    max_pending_total_bytes: int | None = None
    max_parked_requests: int | None = None
    max_clients: int | None = None
    max_list_views: int | None = None
    max_sessions: int | None = None
    search_index: bool | None = None
    search_index_path: str | None = None
    search_refresh_s: float | None = None
    follow_max_watches: int | None = None


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
    was named explicitly (``required``: ``--config``), when that is an error."""
    try:
        data = path.read_bytes()
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


def apply(settings: Settings, values: dict[str, Any]) -> list[str]:
    """Set ``values`` (file-key names) on ``settings``; returns what changed."""
    changed = []

    def put(attr: str, value: Any) -> None:
        if getattr(settings, attr) != value:
            setattr(settings, attr, value)
            changed.append(attr)

    for key, value in values.items():
        if key == "root":
            root = Path(os.path.expanduser(value))
            if root.exists() and not root.is_dir():
                raise ConfigError(f"root: {root} is not a directory")
            put("root", root)
        elif key == "socket":
            put("socket", Path(os.path.expanduser(value)))
        elif key == "flush_interval_ms":
            if not 0 <= value <= 60_000:
                raise ConfigError(f"flush_interval_ms: must be between 0 and 60000, got {value}")
            put("flush_interval", value / 1000)
        elif key == "max_frame_bytes":
            if value < 1024:
                raise ConfigError(f"max_frame_bytes: must be at least 1024, got {value}")
            put("max_frame", value)
        elif key in BUDGETS:
            if value < 1:
                raise ConfigError(f"{key}: must be positive, got {value}")
            put(key, value)
        elif key in ("rate_limit_bytes", "rate_burst_bytes"):
            if value < 0:
                raise ConfigError(f"{key}: must not be negative, got {value}")
            put("rate_bytes" if key == "rate_limit_bytes" else "rate_burst", float(value))
        elif key == "frame_timeout_s":
            if value <= 0:
                raise ConfigError(f"frame_timeout_s: must be positive, got {value}")
            put("frame_timeout", float(value))
        elif key == "path_recheck_s":
            if value < 0:
                raise ConfigError(f"path_recheck_s: must not be negative, got {value}")
            put("path_recheck", float(value))
        elif key in ("read_threads", "expensive_per_client", "max_expensive_waiting"):
            if not 1 <= value <= 1024:
                raise ConfigError(f"{key}: must be between 1 and 1024, got {value}")
            put(key, value)
        elif key == "idle_evict_s":
            if value < 0:
                raise ConfigError(f"idle_evict_s: must not be negative, got {value}")
            put("idle_evict", float(value))
        elif key == "follow_max_watches":
            if value < 0:
                raise ConfigError(f"follow_max_watches: must not be negative, got {value}")
            put(key, value)
        elif key == "lease_grace_s":
            if value < 0:
                raise ConfigError(f"lease_grace_s: must not be negative, got {value}")
            put("lease_grace", float(value))
        elif key == "mirror":
            put("mirror", mirror_settings(value))
        elif key == "search_index_path":
            put("search_index_path", Path(os.path.expanduser(value)))
        elif key == "search_refresh_s":
            if value < 0:
                raise ConfigError(f"search_refresh_s: must not be negative, got {value}")
            put("search_refresh", float(value))
        else:
            put(key, value)
    return changed


_STREAM_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def mirror_settings(cfg: MirrorFileConfig) -> MirrorSettings:
    """Check the ``[mirror]`` table; each error names its key."""
    if not cfg.servers:
        raise ConfigError("mirror.servers: at least one server URL is required")
    for url in cfg.servers:
        if "://" not in url or not url.split("://", 1)[1]:
            raise ConfigError(f"mirror.servers: {url!r} is not a URL like nats://host:4222")
    out = MirrorSettings(servers=list(cfg.servers))
    if cfg.stream is not None:
        if not _STREAM_RE.fullmatch(cfg.stream):
            raise ConfigError(f"mirror.stream: must match [A-Za-z0-9_-]{{1,64}}, got {cfg.stream!r}")
        out.stream = cfg.stream
    if cfg.subject_prefix is not None:
        # Subjects are dot-separated tokens: each token of the prefix must be a
        # plain word (no wildcards, spaces or empty tokens).
        if not all(_TOKEN_RE.fullmatch(t) for t in cfg.subject_prefix.split(".")):
            raise ConfigError(f"mirror.subject_prefix: must be dot-separated [A-Za-z0-9_-] tokens, got {cfg.subject_prefix!r}")
        out.subject_prefix = cfg.subject_prefix
    if cfg.credentials is not None:
        out.credentials = Path(os.path.expanduser(cfg.credentials))
    if cfg.required is not None:
        out.required = cfg.required
    if cfg.replicas is not None:
        if not 1 <= cfg.replicas <= 5:
            raise ConfigError(f"mirror.replicas: must be between 1 and 5, got {cfg.replicas}")
        out.replicas = cfg.replicas
    if cfg.queue_bytes is not None:
        if cfg.queue_bytes < 0:
            raise ConfigError(f"mirror.queue_bytes: must not be negative, got {cfg.queue_bytes}")
        out.queue_bytes = cfg.queue_bytes
    for key, attr in (("ack_timeout_s", "ack_timeout"), ("shutdown_flush_s", "shutdown_flush")):
        value = getattr(cfg, key)
        if value is not None:
            if value <= 0:
                raise ConfigError(f"mirror.{key}: must be positive, got {value}")
            setattr(out, attr, float(value))
    return out


class Reloaded(msgspec.Struct):
    """What a SIGHUP did: the keys applied, as (name, before, after), and the
    keys that differ in the file but only take effect at the next start."""

    applied: list[tuple[str, Any, Any]]
    at_restart: list[str]


def reload(settings: Settings, flags: dict[str, Any]) -> Reloaded:
    """SIGHUP: re-read the file (flags and env still win), apply the keys that can
    change at run time, and name the others that changed, which cannot."""
    fresh = build(flags, settings.config_file or config_path(), required=False)
    before = {k: getattr(settings, k) for k in RELOADABLE}
    names = apply(settings, {
        "flush_interval_ms": fresh.flush_interval * 1000,
        "fsync": fresh.fsync,
        "group_sync": fresh.group_sync,
        "log_level": fresh.log_level,
    })
    out = Reloaded([(k, before[k], getattr(settings, k)) for k in names], [])
    skip = {*RELOADABLE, "config_file", "mirror"}
    out.at_restart = [k for k in Settings.__struct_fields__
                      if k not in skip and getattr(fresh, k) != getattr(settings, k)]
    old, new = settings.mirror, fresh.mirror
    if (old is None) != (new is None):
        out.at_restart.append("mirror")
    elif old is not None and new is not None:
        for k in MirrorSettings.__struct_fields__:
            was, now = getattr(old, k), getattr(new, k)
            if was == now:
                continue
            if k in MIRROR_RELOADABLE:
                setattr(old, k, now)  # the running mirror holds this very object
                out.applied.append((f"mirror.{k}", was, now))
            else:
                out.at_restart.append(f"mirror.{k}")
    return out
