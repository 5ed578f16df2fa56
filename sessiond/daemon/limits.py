"""Per-client limits, so one runaway agent cannot starve the others.

A token bucket on the bytes each connection sends: over its rate, the connection
is simply not read for a while (the client sees latency, never an error or a
lost entry). Throttling is logged once, then summed up as "suppressed N" lines
at most every ``LOG_EVERY`` seconds, so a flood does not also flood the log.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("sessiond")

LOG_EVERY = 10.0


class TokenBucket:
    """One connection's byte rate: bytes read spend tokens that refill at ``rate`` up
    to ``burst``; past them the connection is not read for the time ``take`` returns."""

    __slots__ = ("rate", "burst", "tokens", "stamp")

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.stamp = time.monotonic()

    def take(self, n: int) -> float:
        """Spend ``n`` tokens; returns how long to wait before reading more (0: none)."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= n
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


class ThrottleLog:
    """One log line when a client is first throttled, then one summary line per
    ``LOG_EVERY`` seconds with how many throttling events were suppressed."""

    __slots__ = ("client", "suppressed", "last")

    def __init__(self, client: str) -> None:
        self.client = client
        self.suppressed = 0
        self.last = 0.0

    def event(self, wait: float) -> None:
        now = time.monotonic()
        if now - self.last >= LOG_EVERY:
            if self.suppressed:
                log.warning("%s still over its rate limit: suppressed %d throttling messages", self.client, self.suppressed)
            else:
                log.warning("%s is over its rate limit; reading paused %.0f ms", self.client, wait * 1000)
            self.suppressed = 0
            self.last = now
        else:
            self.suppressed += 1
