"""The broker's clock: the system's, or one a test moves by hand.

Everything in the broker that waits (message TTL, queue expiry, delayed messages,
consumer timeouts, stream retention by age) reads the time through :func:`now_ms` and
:func:`wall_ms`. A broker runs its core on one thread (its event loop's), so the clock in
force is the one installed on that thread: a :class:`ManualClock` there makes that broker,
and no other in the process, follow the test's time.

A manual clock starts at the system's time and then stands still until
:meth:`ManualClock.advance` moves it; the broker's housekeeping then runs at once, so
what came due by the new time happens before ``advance`` returns.
"""

from __future__ import annotations

import threading
import time


class Clock:
    """The system's clock."""

    manual = False

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (intervals, deadlines)."""
        return time.monotonic()

    def time(self) -> float:
        """Seconds since the epoch (timestamps, retention by age)."""
        return time.time()


class ManualClock(Clock):
    """A clock that stands still until it is told to move."""

    manual = True

    def __init__(self) -> None:
        self._monotonic = time.monotonic()
        self._time = time.time()
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        return self._monotonic

    def time(self) -> float:
        return self._time

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (not backward: time never goes back)."""
        if seconds < 0:
            raise ValueError("a clock moves forward only")
        with self._lock:
            self._monotonic += seconds
            self._time += seconds


SYSTEM = Clock()
_local = threading.local()
# Whether any thread was ever given a clock of its own: until then every thread reads
# the system's, without looking in its thread-local state (the delivery path reads the
# time once per message).
_installed = False
_monotonic = time.monotonic


def install(clock: Clock | None) -> None:
    """Make ``clock`` the clock of the calling thread (None: the system's)."""
    global _installed
    _local.clock = clock if clock is not None else SYSTEM
    if clock is not None and clock is not SYSTEM:
        _installed = True


def current() -> Clock:
    """The calling thread's clock."""
    clock: Clock = getattr(_local, "clock", SYSTEM)
    return clock


def now_ms() -> int:
    """Milliseconds on the thread's monotonic clock."""
    if _installed:
        clock: Clock | None = getattr(_local, "clock", None)
        if clock is not None:
            return int(clock.monotonic() * 1000)
    return int(_monotonic() * 1000)


def wall_ms() -> int:
    """Milliseconds since the epoch on the thread's clock."""
    clock: Clock | None = getattr(_local, "clock", None)
    if clock is None:
        return int(time.time() * 1000)
    return int(clock.time() * 1000)
