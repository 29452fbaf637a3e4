"""What the two segmented logs (a stream's osiris log, the record log of quorum queues and
of streams in the old layout) share: where their offsets begin and end, their size, and
retention, which drops whole segments, oldest first, never the active one."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from leveret.broker.clock import wall_ms


def segment_name(base: int) -> str:
    """A segment's file name without its suffix: its first offset, 20 digits."""
    return f"{base:020d}"


class SegmentFile(Protocol):
    base: int  # its first offset
    end: int  # one past its last offset
    size: int  # bytes
    last_ts: int  # timestamp of its last chunk, ms
    path: Path
    idx_path: Path

    def close(self) -> None: ...


S = TypeVar("S", bound=SegmentFile)


class SegmentedLog(Generic[S]):
    dir: Path
    segments: list[S]
    max_bytes: int | None
    max_age_ms: int | None
    max_segment_bytes: int

    def __init__(
        self, directory: Path, max_segment_bytes: int, max_bytes: int | None, max_age_ms: int | None
    ) -> None:
        """The log's directory (made if missing) and its retention limits; no segments yet."""
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_segment_bytes = max_segment_bytes
        self.max_bytes = max_bytes
        self.max_age_ms = max_age_ms
        self.segments = []

    @property
    def first(self) -> int:
        """The oldest offset still stored."""
        for seg in self.segments:
            if seg.end > seg.base:
                return seg.base
        return self.segments[-1].base

    @property
    def committed(self) -> int:
        """One past the last offset on disk: readers see offsets below it."""
        return self.segments[-1].end

    @property
    def total_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def segment_count(self) -> int:
        return len(self.segments)

    def set_retention(
        self, max_bytes: int | None, max_age_ms: int | None, max_segment_bytes: int
    ) -> None:
        """New limits (a policy changed): applied now and at every chunk from now on."""
        self.max_bytes = max_bytes
        self.max_age_ms = max_age_ms
        self.max_segment_bytes = max_segment_bytes
        self.apply_retention()

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Drop whole old segments beyond the length or age limit; how many went."""
        dropped = 0
        now = wall_ms() if now_ms is None else now_ms
        while len(self.segments) > 1:
            oldest = self.segments[0]
            too_big = self.max_bytes is not None and self.total_bytes > self.max_bytes
            too_old = self.max_age_ms is not None and oldest.last_ts < now - self.max_age_ms
            if not (too_big or too_old):
                break
            oldest.close()
            oldest.path.unlink(missing_ok=True)
            oldest.idx_path.unlink(missing_ok=True)
            self.segments.pop(0)
            dropped += 1
        return dropped

    # ------------------------------------------------------ what each log does
    def sync(self) -> bool:
        """Write and fsync what was appended; True if anything was written."""
        raise NotImplementedError

    def _close_writers(self) -> None:
        raise NotImplementedError

    def _drop_pending(self) -> None:
        """Forget what was appended and not written."""
        raise NotImplementedError

    # ---------------------------------------------------------------- close
    def close(self) -> None:
        self.sync()
        self._close_files()

    def delete(self) -> None:
        """The log and its directory gone, what was not written with them."""
        self._drop_pending()
        self._close_files()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _close_files(self) -> None:
        self._close_writers()
        for seg in self.segments:
            seg.close()
