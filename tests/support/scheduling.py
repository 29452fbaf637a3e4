"""How the suite's xdist workers get their tests: ``--dist loadgroup``, plus one rule.

xdist hands a worker its next test while the current one runs (a worker runs a test only
once it knows the one after it), so every worker holds one test in waiting. Handed out in
plain order, the long tests at the front of the queue (``LONG_FIRST`` in conftest.py) end up
waiting behind each other on the same worker while others finish the short ones: measured
here, aiormq's suite (about 8 minutes) queued behind FastStream's on one worker. Here a
worker whose current test is a long one gets a short test to hold, and the long ones are
handed to workers as they come free."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xdist.scheduler import LoadGroupScheduling


class LongFirstScheduling(LoadGroupScheduling):
    """``loadgroup``, except that a long test is never handed to a worker whose pending
    test is long too, while a short one is still waiting."""

    def __init__(self, config: Any, log: Any, is_long: Callable[[str], bool]) -> None:
        super().__init__(config, log)
        self._is_long = is_long

    def _unit_is_long(self, unit: dict[str, bool]) -> bool:
        return any(self._is_long(nodeid) for nodeid in unit)

    def _busy_with_long(self, node: Any) -> bool:
        for unit in self.assigned_work.get(node, {}).values():
            for nodeid, done in unit.items():
                if not done and self._is_long(nodeid):
                    return True
        return False

    def _assign_work_unit(self, node: Any) -> None:
        if self.workqueue and self._busy_with_long(node):
            for scope, unit in self.workqueue.items():
                if not self._unit_is_long(unit):
                    self.workqueue.move_to_end(scope, last=False)
                    break
        super()._assign_work_unit(node)
