"""Waiting for something that happens a moment later: one polling loop for all."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# The reference RabbitMQ's collect_statistics_interval, as scripts/test sets it (1000 ms):
# the figures its management API shows change once per interval, and later than that on a
# busy node (each queue, channel and connection process emits its own).
RABBITMQ_STATS_INTERVAL = 1.0
# How long a test waits for RabbitMQ's figures to catch up: sixty intervals. A wait ends as
# soon as they agree; this only bounds a real disagreement.
STATS_WAIT = 60 * RABBITMQ_STATS_INTERVAL


def wait_for(probe: Callable[[], T], timeout: float = 30, interval: float = 0.5) -> T:
    """Call ``probe`` every ``interval`` seconds until it returns something truthy or
    ``timeout`` seconds have passed; returns its last value (falsy on a timeout: the caller
    asserts or raises). ``probe`` runs at least once, and once more at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def settled(probe: Callable[[], T], timeout: float = STATS_WAIT) -> T:
    """``probe``'s value once it stays the same for three of RabbitMQ's statistics
    intervals (its figures for one thing can arrive over several collections); an
    AssertionError if it is still changing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = probe()
    while time.monotonic() < deadline:
        time.sleep(3 * RABBITMQ_STATS_INTERVAL)
        now = probe()
        if now == last:
            return now
        last = now
    raise AssertionError(f"still changing after {timeout} s: {last}")
