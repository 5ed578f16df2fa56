"""The Agent SDK's own SessionStore conformance suite (its 14 contracts, none
skipped) against ``SessiondSessionStore`` on a real daemon: a fresh daemon and
store root for each contract, as the suite asks of ``make_store``."""

from __future__ import annotations

import anyio
import pytest
from claude_agent_sdk.testing import run_session_store_conformance
from claude_agent_sdk.testing import session_store_conformance as conformance

from sessiond.client.agentsdk import SessiondSessionStore

pytestmark = pytest.mark.timeout(180)


def test_every_optional_method_is_implemented() -> None:
    """No contract is skipped: the suite runs a method's contracts only when
    the store overrides it."""
    store = SessiondSessionStore(socket="/nonexistent", autostart=False)
    for method in conformance._OPTIONAL_METHODS:
        assert conformance._has_optional(store, method, frozenset()), method


def test_conformance(daemon_factory) -> None:
    made = []

    async def make_store() -> SessiondSessionStore:
        d = await anyio.to_thread.run_sync(lambda: daemon_factory(name=f"c{len(made)}").start())
        made.append(d)
        return SessiondSessionStore(socket=d.socket, root=d.root, autostart=False)

    anyio.run(run_session_store_conformance, make_store)
    assert len(made) == 15  # one probe and one store per contract: all 14 ran
