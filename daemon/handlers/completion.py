"""Answering a request once several write queues have reached a point."""

from __future__ import annotations

from collections.abc import Callable

from sessiond.protocol.wire.errors import SessiondError


def after_all(count: int, done: Callable[[SessiondError | None], None]) -> Callable[[SessiondError | None], None]:
    """A waiter to hand to ``count`` queues; ``done`` runs once, after the last one
    (or at the first error)."""
    state = {"left": count, "fired": False}

    def part(err: SessiondError | None) -> None:
        if state["fired"]:
            return
        state["left"] -= 1
        if err is not None or state["left"] <= 0:
            state["fired"] = True
            done(err)

    if count == 0:
        state["fired"] = True
        done(None)
    return part
