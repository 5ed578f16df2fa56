"""The config file's keys: their names, types, bounds and how each lands on
the settings (``sessiond/config.py``).

Why its own module: the file speaks in the user's units and names
(``flush_interval_ms``, ``lease_grace_s``, ``[mirror] ack_timeout_s``), checked
by msgspec (types, unknown keys) and then by one rule per key (``Key``: its
range and conversion), the same rule for the top level and the ``[mirror]``
table; the settings the daemon reads are in seconds and paths. A new key is
added here and in ``Settings``; how settings are merged and reloaded does not
change with it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, NamedTuple

import msgspec

FsyncPolicy = Literal["never", "interval", "always"]
LogLevel = Literal["debug", "info", "warning", "error"]
BUDGETS = ("max_queued_bytes", "max_pending_bytes", "max_inflight_bytes", "max_inflight_requests", "max_output_bytes",
           "max_output_total_bytes", "max_partial_bytes", "max_pending_total_bytes", "max_parked_requests", "max_clients",
           "max_sessions", "max_list_views", "max_expensive_jobs")
"""Memory budgets (sessiond/daemon/bounds.py): positive integers, same name in the file."""


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
    redact: bool | None = None


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
    max_expensive_jobs: int | None = None
    max_sessions: int | None = None
    search_index: bool | None = None
    search_index_path: str | None = None
    search_refresh_s: float | None = None
    search_cpu_s: float | None = None
    follow_max_watches: int | None = None
    watch_coalesce_ms: float | None = None


class Key(NamedTuple):
    """How one key of the file (or environment, or flag) lands on its Struct:
    the attribute it sets, the check of its value (the complaint, or None), and
    the conversion (milliseconds to seconds, a path with ``~``)."""

    attr: str
    check: Callable[[Any], str | None] = lambda value: None
    convert: Callable[[Any], Any] = lambda value: value


def _positive(value: Any) -> str | None:
    return None if value > 0 else f"must be positive, got {value!r}"


def _not_negative(value: Any) -> str | None:
    return None if value >= 0 else f"must not be negative, got {value!r}"


def _at_least(low: int) -> Callable[[Any], str | None]:
    return lambda value: None if value >= low else f"must be at least {low}, got {value!r}"


def _between(low: int, high: int) -> Callable[[Any], str | None]:
    return lambda value: None if low <= value <= high else f"must be between {low} and {high}, got {value!r}"


def _expand(value: str) -> Path:
    return Path(os.path.expanduser(value))


def _directory(value: str) -> str | None:
    root = _expand(value)
    return f"{root} is not a directory" if root.exists() and not root.is_dir() else None


_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _stream_name(value: str) -> str | None:
    return None if _NAME_RE.fullmatch(value) else f"must match [A-Za-z0-9_-]{{1,64}}, got {value!r}"


def _subject_prefix(value: str) -> str | None:
    # Subjects are dot-separated tokens: each token of the prefix must be a
    # plain word (no wildcards, spaces or empty tokens).
    if all(_NAME_RE.fullmatch(t) for t in value.split(".")):
        return None
    return f"must be dot-separated [A-Za-z0-9_-] tokens, got {value!r}"


def _seconds_from_ms(value: float) -> float:
    return value / 1000


KEYS: dict[str, Key] = {
    "root": Key("root", _directory, _expand),
    "socket": Key("socket", convert=_expand),
    "flush_interval_ms": Key("flush_interval", _between(0, 60_000), _seconds_from_ms),
    "max_frame_bytes": Key("max_frame", _at_least(1024)),
    **{name: Key(name, _positive) for name in BUDGETS},
    "rate_limit_bytes": Key("rate_bytes", _not_negative, float),
    "rate_burst_bytes": Key("rate_burst", _not_negative, float),
    "frame_timeout_s": Key("frame_timeout", _positive, float),
    "path_recheck_s": Key("path_recheck", _not_negative, float),
    **{name: Key(name, _between(1, 1024)) for name in ("read_threads", "expensive_per_client", "max_expensive_waiting")},
    "idle_evict_s": Key("idle_evict", _not_negative, float),
    "follow_max_watches": Key("follow_max_watches", _not_negative),
    "lease_grace_s": Key("lease_grace", _not_negative, float),
    "search_index_path": Key("search_index_path", convert=_expand),
    "search_refresh_s": Key("search_refresh", _not_negative, float),
    "search_cpu_s": Key("search_cpu", _positive, float),
    "watch_coalesce_ms": Key("watch_coalesce", _between(0, 1000), _seconds_from_ms),
}
"""The keys of ``FileConfig`` that are checked or converted; any other sets the
attribute of its own name as it is (msgspec already checked its type)."""

MIRROR_KEYS: dict[str, Key] = {
    "stream": Key("stream", _stream_name),
    "subject_prefix": Key("subject_prefix", _subject_prefix),
    "credentials": Key("credentials", convert=_expand),
    "replicas": Key("replicas", _between(1, 5)),
    "queue_bytes": Key("queue_bytes", _not_negative),
    "ack_timeout_s": Key("ack_timeout", _positive, float),
    "shutdown_flush_s": Key("shutdown_flush", _positive, float),
}
"""The same for the ``[mirror]`` table's keys (``MirrorFileConfig``)."""
