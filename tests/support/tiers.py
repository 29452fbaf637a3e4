"""Which tier of the suite runs. The fast tier (``-m "not slow"``, ``scripts/test --fast``)
is the inner loop: its property tests draw a tenth of the examples (at least 10) that the
whole suite draws, so that it stays near a minute; the whole suite (CI's) draws them all.
tests/conftest.py sets :data:`FAST` before any test module is collected."""

from __future__ import annotations

FAST = False


def examples(n: int) -> int:
    """A property test's ``max_examples``: ``n`` in the whole suite, fewer in the fast
    tier."""
    return max(10, n // 10) if FAST else n
