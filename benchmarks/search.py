"""Searching a busy day's lake: 10 million log records written by the real ingest, searched
with filters before and after `leveret pipeline compact`.

The lake is generated once (it takes a while) and reused: a Leveret server of its own
(``leveret server``, a data directory under ``--root``), a stream filled with ``--records``
records whose times spread over one day (20 apps, 50 hosts, 3 facilities, severities from
debug to critical, messages from a small vocabulary plus a rare word now and then),
published over the stream protocol and ingested by ``leveret pipeline ingest --trigger
availableNow`` (local[2], a batch per
``--per-trigger`` records: the small files of a real ingest). ``--measure`` then runs each
search of SEARCHES ``--rounds`` times (the first one, which reads the sink's log and warms
the page cache, is reported apart) on a copy of the lake as the ingest left it, compacts the
copy and runs them again.

    python benchmarks/search.py --generate       # once: /var/tmp/leveret-search-bench
    python benchmarks/search.py --measure
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests.support.brokers import start_leveret  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

from leveret.logs import compaction  # noqa: E402
from leveret.logs.lake import SinkLog  # noqa: E402
from leveret.logs.search import Filters, LakeSearch  # noqa: E402

DAY = 1_795_564_800.0  # 2026-11-25T00:00:00Z
SEVERITIES = ("debug",) * 10 + ("info",) * 70 + ("warning",) * 14 + ("error",) * 5 + ("critical",)
WORDS = tuple(
    [
        "request",
        "served",
        "user",
        "login",
        "cache",
        "miss",
        "retry",
        "connection",
        "refused",
        "upstream",
        "timeout",
        "queue",
        "full",
        "slow",
        "query",
        "disk",
        "write",
        "read",
        "ok",
    ]
)
SEARCHES: dict[str, dict[str, Any]] = {
    "errors of one app in one hour, with text": {
        "severities": ["error", "critical"], "apps": ["app7"], "text": "timeout",
        "since": "2026-11-25T14:00:00Z", "until": "2026-11-25T15:00:00Z",
    },
    "one host, all day, errors": {"severities": ["error"], "hosts": ["host13"]},
    "a rare word, all day": {"text": "kraken"},
    "warnings of one app and facility, 6 hours": {
        "severities": ["warning"], "apps": ["app3"], "facilities": ["auth"],
        "since": "2026-11-25T06:00:00Z", "until": "2026-11-25T12:00:00Z",
    },
    "newest 100 of everything": {},
}  # fmt: skip


def _body(i: int) -> bytes:
    ts = DAY + (i / N_RECORDS) * 86400.0
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1e6):06d}Z"
    h = (i * 2654435761) & 0xFFFFFFFF
    sev = SEVERITIES[h % 100]
    words = " ".join(WORDS[(h >> k) % len(WORDS)] for k in (3, 7, 11, 15, 19))
    if h % 100_003 == 0:
        words += " kraken"
    return (
        f'{{"ts":"{iso}","severity":"{sev}","facility":"{("user", "kern", "auth")[h % 3]}",'
        f'"host":"host{(h >> 5) % 50}","app":"app{(h >> 9) % 20}","pid":{1000 + h % 5000},'
        f'"message":"{words} #{i}"}}'
    ).encode()


N_RECORDS = 10_000_000


def _amqp10(body: bytes, properties: bytes) -> bytes:
    """An AMQP 1.0 message: the encoded properties section, then the body as one data
    section (vbin8 or vbin32), as a stream client would send it."""
    n = len(body)
    size = bytes((0xA0, n)) if n < 256 else b"\xb0" + n.to_bytes(4, "big")
    return properties + b"\x00\x53\x75" + size + body


async def _publish_stream(port: int, stream: str, n: int, batch: int = 2000) -> None:
    """The records into the stream over the stream protocol (rstream, confirms awaited),
    as AMQP 1.0 messages with content type application/json, with progress. The messages
    are encoded here (one properties section for all, checked against rstream's own
    encoding): rstream's encoder held the publisher to a few thousand a second."""
    from rstream import AMQPMessage, ConfirmationStatus, Producer
    from rstream._pyamqp.message import Properties

    typed = AMQPMessage(body=b"x", properties=Properties(content_type="application/json"))
    properties = bytes(typed)[: -len(b"\x00\x53\x75\xa0\x01x")]
    for sample in (b"x", _body(0), b"y" * 300):
        expected = AMQPMessage(body=sample, properties=Properties(content_type="application/json"))
        assert _amqp10(sample, properties) == bytes(expected), "encoding differs from rstream's"
    confirmed = 0
    done = asyncio.Event()

    async def on_confirm(_status: ConfirmationStatus) -> None:
        nonlocal confirmed
        confirmed += 1
        if confirmed == n:
            done.set()

    kw: dict[str, Any] = {"username": "guest", "password": "guest", "load_balancer_mode": True}
    async with Producer("127.0.0.1", port, **kw) as producer:
        await producer.create_stream(stream, exists_ok=True)
        for start in range(0, n, batch):
            messages = [_amqp10(_body(i), properties) for i in range(start, min(n, start + batch))]
            await producer.send_batch(stream, messages, on_publish_confirm=on_confirm)  # type: ignore[arg-type]
            if start % 1_000_000 == 0:
                print(f"  {start:,} sent, {confirmed:,} confirmed", flush=True)
        await done.wait()


def generate(root: Path, n: int, per_trigger: int) -> None:
    """The lake the real way: a Leveret server of its own, the records published to the
    ``logs`` stream over the stream protocol, then ``leveret pipeline ingest --trigger
    availableNow`` reading it (protocol ``auto``: the chunk reader over the stream port)."""
    global N_RECORDS
    N_RECORDS = n
    lake = root / "lake"
    if (lake / "_spark_metadata").is_dir():
        print(f"{lake} exists: reusing it (delete it to generate again)")
        return
    stream_port = free_port()
    broker = start_leveret(root / "broker", extra=["--stream-port", str(stream_port)])
    try:
        t = time.perf_counter()
        asyncio.run(_publish_stream(stream_port, "logs", n))
        print(f"published {n} records in {time.perf_counter() - t:.0f} s", flush=True)
        t = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
        subprocess.run(
            [sys.executable, "-m", "leveret.cli.main", "pipeline", "ingest", "--url",
             broker.url, "--stream", "logs", "--stream-port", str(stream_port),
             "--exchange", "", "--lake", str(lake),
             "--checkpoint", str(root / "checkpoint"), "--master", "local[2]",
             "--trigger", "availableNow", "--max-records-per-trigger", str(per_trigger),
             "--log-level", "warning"],
            check=True, env=env,
        )  # fmt: skip
        print(f"ingested in {time.perf_counter() - t:.0f} s", flush=True)
    finally:
        broker.stop()


def synthesize(root: Path, n: int, per_trigger: int, tasks: int = 2) -> None:
    """The same records in the ingest's exact layout, written with pyarrow instead of
    through a broker and Spark: per batch of ``per_trigger`` records, ``tasks`` files per
    severity partition (Spark's tasks), INT96 timestamps, the sink's log with its
    compaction every ten batches."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    global N_RECORDS
    N_RECORDS = n
    lake = root / "lake"
    if (lake / "_spark_metadata").is_dir():
        print(f"{lake} exists: reusing it (delete it to generate again)")
        return
    meta = lake / "_spark_metadata"
    meta.mkdir(parents=True)
    words = np.array(WORDS)
    sev_names = np.array(SEVERITIES)
    t0 = time.perf_counter()
    everything: list[str] = []
    for b, start in enumerate(range(0, n, per_trigger)):
        i = np.arange(start, min(n, start + per_trigger), dtype=np.int64)
        h = (i * 2654435761) & 0xFFFFFFFF
        ts = ((DAY + (i / n) * 86400.0) * 1e6).astype("int64")
        sev = sev_names[h % 100]
        msg = np.char.add(
            np.char.add(words[(h >> 3) % len(WORDS)], " "),
            np.char.add(words[(h >> 7) % len(WORDS)], " "),
        )
        msg = np.char.add(msg, np.where(h % 100_003 == 0, "kraken ", ""))
        msg = np.char.add(np.char.add(msg, words[(h >> 11) % len(WORDS)]), " #")
        msg = np.char.add(msg, i.astype(str))
        entries = []
        for s_name in ("debug", "info", "warning", "error", "critical"):
            mask = sev == s_name
            if not mask.any():
                continue
            idx = np.nonzero(mask)[0]
            d = lake / "date=2026-11-25" / f"severity={s_name}"
            d.mkdir(parents=True, exist_ok=True)
            for part in np.array_split(idx, tasks):
                hp = h[part]
                table = pa.table({
                    "offset": pa.array(i[part]),
                    "routing_key": pa.array([""] * len(part)),
                    "redelivered": pa.array([False] * len(part)),
                    "message_id": pa.array([None] * len(part), pa.string()),
                    "ts": pa.array(ts[part], pa.timestamp("us", tz="UTC")),
                    "facility": pa.array(np.array(["user", "kern", "auth"])[hp % 3]),
                    "host": pa.array(np.char.add("host", ((hp >> 5) % 50).astype(str))),
                    "app": pa.array(np.char.add("app", ((hp >> 9) % 20).astype(str))),
                    "pid": pa.array(1000 + hp % 5000),
                    "message": pa.array(msg[part]),
                    "logger": pa.array([None] * len(part), pa.string()),
                    "exc": pa.array([None] * len(part), pa.string()),
                    "extra": pa.array([None] * len(part), pa.string()),
                    "_corrupt": pa.array([None] * len(part), pa.string()),
                })  # fmt: skip
                f = d / f"part-{len(entries):05d}-{b:06d}-{s_name}.c000.snappy.parquet"
                pq.write_table(table, f, use_deprecated_int96_timestamps=True)
                entries.append(json.dumps({
                    "path": f.as_uri(), "size": f.stat().st_size, "isDir": False,
                    "modificationTime": int(f.stat().st_mtime * 1000),
                    "blockReplication": 1, "blockSize": 33554432, "action": "add",
                }))  # fmt: skip
        everything += entries
        name = f"{b}.compact" if (b + 1) % 10 == 0 else str(b)
        body = everything if name.endswith(".compact") else entries
        (meta / name).write_text("v1\n" + "\n".join(body))
    print(f"synthesized {n} records in {time.perf_counter() - t0:.0f} s", flush=True)


def _filters(spec: dict[str, Any]) -> Filters:
    return Filters.of(**spec)


def measure(lake: Path, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, spec in SEARCHES.items():
        f = _filters(spec)
        search = LakeSearch(lake)
        t = time.perf_counter()
        page = search.search(f, limit=100)
        first = time.perf_counter() - t
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            page = search.search(f, limit=100)
            times.append(time.perf_counter() - t)
        out[name] = {
            "first_s": round(first, 3),
            "median_s": round(statistics.median(times), 3),
            "min_s": round(min(times), 3),
            "max_s": round(max(times), 3),
            "found": len(page.records),
            "files_read": page.files,
        }
        r = out[name]
        print(
            f"  {name}: median {r['median_s']:.3f} s ({r['min_s']:.3f}-{r['max_s']:.3f}), "
            f"first {first:.3f} s, {page.files} files, {len(page.records)} found",
            flush=True,
        )
    return out


def pyarrow_search(lake: Path, f: Filters, limit: int = 100) -> int:
    """The same search with pyarrow datasets over the same committed files (the engine
    the search did not pick): the number of records found."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    files = LakeSearch(lake).files(f)
    part = ds.HivePartitioning(pa.schema([("date", pa.string()), ("severity", pa.string())]))
    d = ds.dataset(files, format="parquet", partitioning=part, partition_base_dir=str(lake))
    cond = pc.scalar(True)
    kind = d.schema.field("ts").type  # INT96 reads as timestamp[ns] without a zone

    def at(t: Any) -> Any:
        value = t if kind.tz else t.astimezone(UTC).replace(tzinfo=None)
        return pa.scalar(value, pa.timestamp("us", tz=kind.tz)).cast(kind)

    if f.since is not None:
        cond &= pc.field("ts") >= at(f.since)
    if f.until is not None:
        cond &= pc.field("ts") < at(f.until)
    for column, values in (("severity", f.severities), ("app", f.apps), ("host", f.hosts),
                           ("facility", f.facilities)):  # fmt: skip
        if values:
            cond &= pc.field(column).isin(list(values))
    if f.text:
        cond &= pc.match_substring(pc.field("message"), f.text, ignore_case=True)
    table = d.to_table(filter=cond).sort_by([("ts", "descending")]).slice(0, limit)
    return table.num_rows


def compare(lake: Path, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, spec in SEARCHES.items():
        if not any(k in spec for k in ("severities", "apps", "hosts")):
            continue  # the filtered searches only
        f = _filters(spec)
        found = pyarrow_search(lake, f)
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            pyarrow_search(lake, f)
            times.append(time.perf_counter() - t)
        out[name] = {"median_s": round(statistics.median(times), 3), "found": found,
                     "min_s": round(min(times), 3), "max_s": round(max(times), 3)}  # fmt: skip
        print(f"  pyarrow, {name}: median {out[name]['median_s']:.3f} s", flush=True)
    return out


def _shape(lake: Path) -> dict[str, Any]:
    log = SinkLog(lake)
    log.refresh()
    meta = list((lake / "_spark_metadata").iterdir())
    return {
        "files": len(log.files),
        "bytes": sum(f.size for f in log.files.values()),
        "log_files": len(meta),
        "log_bytes": sum(p.stat().st_size for p in meta),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path("/var/tmp/leveret-search-bench"))
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--per-trigger", type=int, default=50_000)
    ap.add_argument("--generate", action="store_true")
    ap.add_argument(
        "--synthesize",
        action="store_true",
        help="write the lake in the ingest's layout with pyarrow (no broker, no Spark)",
    )
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--compare", action="store_true", help="also run the filtered searches with pyarrow"
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    if args.generate:
        generate(args.root, args.records, args.per_trigger)
    elif args.synthesize:
        synthesize(args.root, args.records, args.per_trigger)
    if args.measure:
        work = args.root / "measured"
        if work.exists():
            shutil.rmtree(work)
        shutil.copytree(args.root / "lake", work)
        result: dict[str, Any] = {"load_before": os.getloadavg()}
        result["before"] = {"shape": _shape(work)}
        print(f"before compaction: {result['before']['shape']}", flush=True)
        result["before"]["searches"] = measure(work, args.rounds)
        if args.compare:
            result["before"]["pyarrow"] = compare(work, max(2, args.rounds // 2))
        t = time.perf_counter()
        while True:
            change = compaction.compact(work)
            if not change.partitions:
                break
        compaction.finish_removals(work, grace=0)
        result["compaction_s"] = round(time.perf_counter() - t, 1)
        result["after"] = {"shape": _shape(work)}
        print(f"after compaction ({result['compaction_s']} s): {result['after']['shape']}")
        result["after"]["searches"] = measure(work, args.rounds)
        result["load_after"] = os.getloadavg()
        print(json.dumps(result, indent=1))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
