"""Every checked config key, at and past its bounds, through a real config file:
one rule per key, the same wording at the top level and in ``[mirror]``."""

from __future__ import annotations

import pytest

from sessiond.config import ConfigError, build
from sessiond.config_keys import BUDGETS, KEYS, MIRROR_KEYS, Key

MIRROR = '[mirror]\nservers = ["nats://127.0.0.1:4222"]\n'

# (key, a refused value, what the error says, an accepted value, the attribute and what it holds)
TOP = [
    ("flush_interval_ms", "60001", "must be between 0 and 60000, got 60001.0", "0", "flush_interval", 0.0),
    ("flush_interval_ms", "-1", "must be between 0 and 60000, got -1.0", "250", "flush_interval", 0.25),
    ("max_frame_bytes", "1023", "must be at least 1024, got 1023", "1024", "max_frame", 1024),
    ("rate_limit_bytes", "-1", "must not be negative, got -1.0", "0", "rate_bytes", 0.0),
    ("rate_burst_bytes", "-5", "must not be negative, got -5.0", "7", "rate_burst", 7.0),
    ("frame_timeout_s", "0", "must be positive, got 0.0", "0.5", "frame_timeout", 0.5),
    ("path_recheck_s", "-0.5", "must not be negative, got -0.5", "0", "path_recheck", 0.0),
    ("read_threads", "0", "must be between 1 and 1024, got 0", "1024", "read_threads", 1024),
    ("expensive_per_client", "1025", "must be between 1 and 1024, got 1025", "1", "expensive_per_client", 1),
    ("max_expensive_waiting", "0", "must be between 1 and 1024, got 0", "3", "max_expensive_waiting", 3),
    ("idle_evict_s", "-1", "must not be negative, got -1.0", "0", "idle_evict", 0.0),
    ("follow_max_watches", "-1", "must not be negative, got -1", "0", "follow_max_watches", 0),
    ("lease_grace_s", "-1", "must not be negative, got -1.0", "2", "lease_grace", 2.0),
    ("search_refresh_s", "-1", "must not be negative, got -1.0", "0", "search_refresh", 0.0),
    ("search_cpu_s", "0", "must be positive, got 0.0", "0.25", "search_cpu", 0.25),
    ("watch_coalesce_ms", "1001", "must be between 0 and 1000, got 1001.0", "0", "watch_coalesce", 0.0),
    ("watch_coalesce_ms", "-1", "must be between 0 and 1000, got -1.0", "2", "watch_coalesce", 0.002),
    *[(name, "0", "must be positive, got 0", "2000000000", name, 2_000_000_000) for name in BUDGETS],
]

IN_MIRROR = [
    ("stream", '"a.b"', "must match [A-Za-z0-9_-]{1,64}, got 'a.b'", '"S_1-x"', "stream", "S_1-x"),
    ("subject_prefix", '"a..b"', "must be dot-separated [A-Za-z0-9_-] tokens, got 'a..b'", '"org.team-1"',
     "subject_prefix", "org.team-1"),
    ("replicas", "6", "must be between 1 and 5, got 6", "5", "replicas", 5),
    ("queue_bytes", "-1", "must not be negative, got -1", "0", "queue_bytes", 0),
    ("ack_timeout_s", "0", "must be positive, got 0.0", "2", "ack_timeout", 2.0),
    ("shutdown_flush_s", "-1", "must be positive, got -1.0", "0.25", "shutdown_flush", 0.25),
]


def settings_of(tmp_path, text: str):
    cfg = tmp_path / "config.toml"
    cfg.write_text(text)
    return build({}, cfg, environ={})


@pytest.mark.parametrize("key, bad, why, good, attr, held", TOP, ids=[f"{r[0]}={r[1]}" for r in TOP])
def test_top_level_key_bounds(tmp_path, key, bad, why, good, attr, held):
    extra = "max_partial_bytes = 2000000000\n" if key == "max_frame_bytes" else ""
    with pytest.raises(ConfigError) as err:
        settings_of(tmp_path, f"{key} = {bad}\n")
    assert str(err.value) == f"{key}: {why}"
    value = getattr(settings_of(tmp_path, f"{key} = {good}\n{extra}"), attr)
    assert value == held and type(value) is type(held)


@pytest.mark.parametrize("key, bad, why, good, attr, held", IN_MIRROR, ids=[r[0] for r in IN_MIRROR])
def test_mirror_key_bounds(tmp_path, key, bad, why, good, attr, held):
    with pytest.raises(ConfigError) as err:
        settings_of(tmp_path, f"{MIRROR}{key} = {bad}\n")
    assert str(err.value) == f"mirror.{key}: {why}"
    value = getattr(settings_of(tmp_path, f"{MIRROR}{key} = {good}\n").mirror, attr)
    assert value == held and type(value) is type(held)


def test_every_checked_key_is_tested():
    """A key given a check in the table gets a row above (its bounds are a promise)."""
    unchecked = Key("any").check
    assert {k for k, rule in KEYS.items() if rule.check is not unchecked} - {"root"} == {r[0] for r in TOP}
    assert {k for k, rule in MIRROR_KEYS.items() if rule.check is not unchecked} == {r[0] for r in IN_MIRROR}


def test_first_bad_key_in_file_order_is_the_one_named(tmp_path):
    """Keys are checked in the file's order, a bad ``[mirror]`` table in its place."""
    with pytest.raises(ConfigError, match=r"^read_threads: "):
        settings_of(tmp_path, f"read_threads = 0\n{MIRROR}replicas = 9\n")


def test_paths_expand_home_and_root_must_be_a_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    s = settings_of(tmp_path, f'socket = "~/s.sock"\nsearch_index_path = "~/i.db"\n{MIRROR}credentials = "~/c.creds"\n')
    assert (s.socket, s.search_index_path, s.mirror.credentials) == (tmp_path / "s.sock", tmp_path / "i.db",
                                                                      tmp_path / "c.creds")
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(ConfigError, match=f"root: {afile} is not a directory"):
        settings_of(tmp_path, 'root = "~/afile"\n')
