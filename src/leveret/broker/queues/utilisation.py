"""How much of the time a queue could hand messages to its consumers at once, as
RabbitMQ's ``rabbit_queue_consumers`` measures it for ``consumer_capacity`` (and
``consumer_utilisation``): the queue is *active* while its consumers can take what it
has, *inactive* from the moment a message waits because none can, until one can again.
The figure is a moving average of the active share of each active-then-inactive period,
with a half-life of one second (``rabbit_misc:moving_average``)."""

from __future__ import annotations

import math
import time

HALF_LIFE_US = 1_000_000.0  # ?USE_AVG_HALF_LIFE, in microseconds
_LN_HALF = math.log(0.5)


def now_us() -> int:
    return time.monotonic_ns() // 1000


def use_avg(active: int, inactive: int, avg: float) -> float:
    """rabbit_queue_consumers:use_avg."""
    if active == 0 and inactive == 0:
        return avg
    elapsed = active + inactive
    weight = math.exp(elapsed * _LN_HALF / HALF_LIFE_US)
    return (active / elapsed) * (1 - weight) + avg * weight


class ConsumerUse:
    """The ``use`` state of one queue: active since a time, or inactive since a time
    after an active stretch of some length, and the average so far."""

    __slots__ = ("active_for", "avg", "is_active", "since")

    def __init__(self) -> None:
        self.is_active = True  # a new queue starts active, at 1.0 (new/0)
        self.since = now_us()
        self.active_for = 0
        self.avg = 1.0

    def inactive(self) -> None:
        """A message waits: no consumer can take it."""
        if self.is_active:
            now = now_us()
            self.active_for = now - self.since
            self.since = now
            self.is_active = False

    def active(self) -> None:
        """A consumer can take messages again (one was added or unblocked)."""
        if not self.is_active:
            now = now_us()
            self.avg = use_avg(self.active_for, now - self.since, self.avg)
            self.since = now
            self.is_active = True

    def capacity(self) -> float:
        now = now_us()
        if self.is_active:
            return use_avg(now - self.since, 0, self.avg)
        return use_avg(self.active_for, now - self.since, self.avg)
