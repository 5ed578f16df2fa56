"""The Agent SDK's own SessionStore conformance suite (its 14 contracts, none
skipped) against ``SessiondSessionStore`` on a real daemon: a fresh daemon and
store root for each contract, as the suite asks of ``make_store``."""

from __future__ import annotations

import anyio
import pytest
from claude_agent_sdk.testing import run_session_store_conformance

from sessiond.client.agentsdk import SessiondSessionStore

pytestmark = pytest.mark.timeout(180)


def test_conformance(daemon_factory) -> None:
    made = []

    async def make_store() -> SessiondSessionStore:
        d = await anyio.to_thread.run_sync(lambda: daemon_factory(name=f"c{len(made)}").start())
        made.append(d)
        return SessiondSessionStore(socket=d.socket, root=d.root, autostart=False)

    anyio.run(run_session_store_conformance, make_store)
    # A contract skipped (the store lacking an optional method) asks for no store:
    # one for the probe and one per contract is all 14 run.
    assert len(made) == 15
