"""Fixtures: the real corpus laid out as a Claude Code store (built once, read-only)."""

from __future__ import annotations

import pytest

from .store import CorpusStore, build_corpus_store


@pytest.fixture(scope="session")
def corpus_store(tmp_path_factory) -> CorpusStore:
    return build_corpus_store(tmp_path_factory.mktemp("claude") / "root")
