"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def fresh_config(short_tmp: Path, monkeypatch) -> Path:
    """A config file making every search re-stat its scope first, so files that
    other writers changed are seen at once (the default waits up to 2 s)."""
    cfg = short_tmp / "config.toml"
    cfg.write_text("search_refresh_s = 0\n")
    monkeypatch.setenv("SESSIOND_CONFIG", str(cfg))
    return cfg
