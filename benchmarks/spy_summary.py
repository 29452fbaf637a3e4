"""Summarise py-spy's raw (collapsed-stack) output: self and inclusive time per function,
or self time per line.

    python benchmarks/spy_summary.py /tmp/spy/leveret-a-1.txt [--top 25] [--lines]

``fanout.py --py-spy-dir DIR`` writes such files (one per Leveret run).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path


def _frame_name(frame: str, with_line: bool) -> str:
    """``func (path/to/file.py:123)`` -> ``func (to/file.py)`` (or ``...:123``)."""
    func, _, location = frame.partition(" (")
    path, _, line = location.rstrip(")").rpartition(":")
    short = "/".join(path.split("/")[-2:])
    return f"{func} ({short}:{line})" if with_line else f"{func} ({short})"


def summarise(path: Path, with_lines: bool = False) -> tuple[int, Counter[str], Counter[str]]:
    """Total samples, self samples and inclusive samples per function (or line)."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for raw in path.read_text().splitlines():
        stack, _, count = raw.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [
            _frame_name(f, with_lines)
            for f in stack.split(";")
            if not f.startswith(("process ", "thread "))
        ]
        if frames:
            own[frames[-1]] += n
        for name in set(frames):
            inclusive[name] += n
    return total, own, inclusive


def report(path: Path, top: int = 20, with_lines: bool = False) -> str:
    total, own, inclusive = summarise(path, with_lines)
    if not total:
        return f"{path}: no samples"
    out = [f"{path}: {total} samples", "  self"]
    out += [f"  {100 * n / total:5.1f}%  {name}" for name, n in own.most_common(top)]
    if not with_lines:
        # Leave out the start-up chain every sample shares (runpy, typer, the event loop).
        shared = [name for name, n in inclusive.items() if n >= 0.97 * total]
        for name in shared:
            del inclusive[name]
        out.append("  inclusive (frames in every sample left out)")
        out += [f"  {100 * n / total:5.1f}%  {name}" for name, n in inclusive.most_common(top)]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--lines", action="store_true", help="self time per source line")
    args = p.parse_args(argv)
    for path in args.files:
        print(report(path, args.top, args.lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
