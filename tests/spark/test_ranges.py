"""How the driver cuts an offset range into partitions (``stream.plan_ranges``)."""

from __future__ import annotations

import itertools

from leveret.spark.stream import plan_ranges


def test_ranges_are_contiguous_and_a_whole_number_of_rounds_over_the_cores() -> None:
    for n, cores, parts in ((500, 2, 1), (5000, 2, 2), (200_000, 2, 2), (300_000, 2, 4)):
        ranges = plan_ranges(10, 10 + n, cores, 100_000)
        assert len(ranges) == parts
        assert ranges[0].start == 10 and ranges[-1].end == 10 + n
        assert all(a.end == b.start for a, b in itertools.pairwise(ranges))
        sizes = [r.end - r.start for r in ranges]
        assert max(sizes) - min(sizes) <= 1
    assert plan_ranges(5, 5, 2, 100) == []
