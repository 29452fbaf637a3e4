"""The event loop's side of delayed messages: one timer, armed for the schedule's next
due time, that lets the schedule deliver what came due."""

from __future__ import annotations

import asyncio
import logging

from leveret.broker.clock import wall_ms
from leveret.broker.delayed import Scheduler

log = logging.getLogger(__name__)


class ScheduleTimer:
    def __init__(self, loop: asyncio.AbstractEventLoop, scheduler: Scheduler) -> None:
        self.loop = loop
        self.scheduler = scheduler
        self._handle: asyncio.TimerHandle | None = None
        self._at: int | None = None  # the due time (wall ms) the timer is armed for
        scheduler.wakeup = self.wakeup
        self.rearm()

    def wakeup(self, due: int) -> None:
        """Something is due at ``due``: make sure the timer goes off by then."""
        if self._at is not None and self._at <= due:
            return
        if self._handle is not None:
            self._handle.cancel()
        self._at = due
        self._handle = self.loop.call_later(max(0, due - wall_ms()) / 1000, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._at = None
        try:
            self.scheduler.tick()
        except Exception:  # the timer must keep running whatever one message does
            log.exception("delivering delayed messages")
        self.rearm()

    def rearm(self) -> None:
        due = self.scheduler.next_due()
        if due is not None:
            self.wakeup(due)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.scheduler.wakeup = None
        self.scheduler.close()
