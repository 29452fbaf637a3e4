"""Publishing log records from a process of its own, so the application never waits.

A ``Publisher`` on a background *thread* shares the application's interpreter: whenever
its I/O thread runs Python (pika's frame encoding, confirm callbacks), the application's
threads wait for the GIL, up to CPython's 5 ms switch interval. benchmarks/logs.py measured
that tail (0.3-0.9 % of logging calls over 1 ms). So ``AMQPHandler`` runs its publisher in a
child process, the *shipper* (``leveret.logs.shipper.main``), and the application's
side of it (``ShipperClient``) holds no thread that runs Python while records flow:

- ``put()`` frames a record and writes it to the shipper's stdin pipe without blocking
  (one ``write`` system call; the pipe is enlarged to 1 MiB where Linux allows). If the pipe
  is full, the record waits in a bounded in-process queue (oldest dropped and counted when
  it overflows) and a drainer thread, which spends its time blocked in ``select`` outside the
  GIL, writes it once the shipper has read.
- The shipper reads records into its own ``Publisher`` (bounded buffer, drop-oldest,
  confirms, reconnect with backoff). It never stops reading while the broker is away, so
  drops happen there, oldest first, and are counted.
- ``flush``, ``stats`` and ``close`` are requests in the same pipe, behind every record
  written before them; the shipper answers each with one JSON line on its stdout.
- When the application dies, the shipper reads end-of-file, flushes for up to ``timeout``
  seconds and exits. It runs in its own session, so a Ctrl-C at the terminal reaches only
  the application, whose ``logging.shutdown`` then flushes through it.

Frames on the pipe: ``kind (1 byte) · flags (1) · key length (2) · body length (4)``, then the
key and the body. ``R`` is a record (flag 1: persistent); ``F`` flush, ``S`` stats, ``C``
close carry a JSON request as body.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import asdict
from typing import Any

from leveret.logs.amqp import LogsError, Urls, split_urls
from leveret.logs.publisher import Publisher, PublisherStats
from leveret.logs.superstream import SuperStreamRoute

_HEAD = struct.Struct(">cBHI")
_PIPE_SIZE = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_RESPAWN_AFTER = 1.0  # seconds between attempts to replace a shipper that died
# not ``-m leveret.logs.shipper``: the package imports this module first, and runpy warns
_ENTRY = "import sys; from leveret.logs.shipper import main; sys.exit(main())"


def _frame(kind: bytes, body: bytes, key: bytes = b"", flags: int = 0) -> bytes:
    return _HEAD.pack(kind, flags, len(key), len(body)) + key + body


class ShipperClient:
    """The application's side of a shipper process. ``put`` never blocks."""

    def __init__(
        self,
        url: Urls,
        exchange: str,
        exchange_type: str,
        *,
        durable_exchange: bool = False,
        capacity: int = 100_000,
        timeout: float = 5.0,
        super_stream: SuperStreamRoute | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be positive")
        urls = split_urls(url)  # LogsError for a bad URL, here rather than in the shipper
        self.url = urls[0]
        self.exchange = exchange
        self._config = {
            "url": urls,
            "exchange": exchange,
            "exchange_type": exchange_type,
            "durable_exchange": durable_exchange,
            "capacity": capacity,
            "timeout": timeout,
            "super_stream": None if super_stream is None else asdict(super_stream),
        }
        self._capacity = capacity
        self._closed = False
        self._start()

    # ------------------------------------------------------------------ process

    def _start(self) -> None:
        self._pid = os.getpid()
        self._write_lock = threading.Lock()  # one writer of the pipe at a time
        self._control_lock = threading.Lock()  # one request/answer at a time
        self._wake = threading.Event()
        self._pending: deque[bytes] = deque()  # framed records the pipe had no room for
        self._partial = b""  # the unwritten rest of a frame (owned by the write lock)
        self._accepted = 0
        self._dropped = 0  # here; the shipper counts its own
        self._dead: str | None = None
        self._spawned_at = time.monotonic()
        self._replies = bytearray()
        self._drainer: threading.Thread | None = None
        self._request_ids = 0
        env = dict(os.environ)
        path = [p for p in sys.path if p]
        if env.get("PYTHONPATH"):
            path.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(path)
        if not sys.executable:
            raise LogsError("cannot start the log shipper: sys.executable is unknown")
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _ENTRY, json.dumps(self._config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,  # a terminal's Ctrl-C is for the application
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._fd = self._proc.stdin.fileno()
        self._out = self._proc.stdout.fileno()
        with contextlib.suppress(OSError):
            fcntl.fcntl(self._fd, _F_SETPIPE_SZ, _PIPE_SIZE)
        os.set_blocking(self._fd, False)

    def _check_fork(self) -> None:
        # A forked child must not write into its parent's shipper: it gets its own.
        if os.getpid() != self._pid and not self._closed:
            self._start()

    def _died(self, why: str) -> None:
        self._dead = why
        self._dropped += len(self._pending)
        self._pending.clear()
        self._partial = b""

    def _respawn_if_due(self) -> None:
        if time.monotonic() - self._spawned_at >= _RESPAWN_AFTER:
            with contextlib.suppress(OSError):
                self._proc.kill()
            with contextlib.suppress(Exception):
                self._proc.wait(1)
            self._close_pipes()
            accepted, dropped = self._accepted, self._dropped
            self._start()
            self._accepted, self._dropped = accepted, dropped

    def _close_pipes(self) -> None:
        for f in (self._proc.stdin, self._proc.stdout):
            with contextlib.suppress(OSError):
                if f is not None:
                    f.close()

    # ------------------------------------------------------------------ records

    def put(self, routing_key: str, body: bytes, persistent: bool = False) -> None:
        """Hand one record to the shipper without blocking."""
        if self._closed:
            raise LogsError("the log handler is closed")
        self._check_fork()
        if self._dead is not None:
            self._respawn_if_due()
            if self._dead is not None:
                self._accepted += 1
                self._dropped += 1
                return
        self._accepted += 1
        self._pending.append(_frame(b"R", body, routing_key.encode(), 1 if persistent else 0))
        if len(self._pending) > self._capacity:
            self._pending.popleft()
            self._dropped += 1
        if self._write_lock.acquire(blocking=False):
            try:
                self._write_some()
            finally:
                self._write_lock.release()
        if self._pending or self._partial:
            self._wake_drainer()

    def _write_some(self) -> bool:
        """Write what the pipe takes without waiting; True when nothing is left. Caller
        holds the write lock."""
        while self._partial or self._pending:
            if not self._partial:
                # join what is queued, so a backlog leaves in few system calls (put may
                # drop the oldest meanwhile, from another thread)
                parts: list[bytes] = []
                with contextlib.suppress(IndexError):
                    while self._pending and len(parts) < 512:
                        parts.append(self._pending.popleft())
                if not parts:
                    return True
                self._partial = b"".join(parts)
            try:
                sent = os.write(self._fd, self._partial)
            except BlockingIOError:
                return False
            except (BrokenPipeError, OSError) as exc:
                self._died(f"log shipper process is gone ({exc.strerror or exc})")
                return True
            self._partial = self._partial[sent:]
        return True

    def _wake_drainer(self) -> None:
        if self._drainer is None or not self._drainer.is_alive():
            self._drainer = threading.Thread(
                target=self._drain_forever, name="leveret-logs-drainer", daemon=True
            )
            self._drainer.start()
        self._wake.set()

    def _drain_forever(self) -> None:
        fd = self._fd
        while not self._closed and self._dead is None and fd == self._fd:
            self._wake.wait()
            self._wake.clear()
            with self._write_lock:
                while not self._write_some():
                    select.select([], [fd], [], 1.0)  # blocks outside the GIL

    def _write_all(self, deadline: float) -> None:
        """Write everything queued, waiting for room until ``deadline``. Caller holds the
        write lock."""
        while not self._write_some():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            select.select([], [self._fd], [], left)

    # ------------------------------------------------------------------ requests

    def _request(self, kind: bytes, wait: float, **fields: Any) -> dict[str, Any] | None:
        """Send a request behind every record so far; its answer, or None when the
        shipper did not answer in time or is gone."""
        self._check_fork()
        if self._dead is not None:
            return None
        deadline = time.monotonic() + wait
        with self._control_lock:
            self._request_ids += 1
            rid = self._request_ids
            body = json.dumps({"id": rid, **fields}).encode()
            with self._write_lock:
                self._pending.append(_frame(kind, body))
                try:
                    self._write_all(deadline)
                except TimeoutError:
                    return None
            if self._dead is not None:
                return None
            return self._answer(rid, deadline)

    def _answer(self, rid: int, deadline: float) -> dict[str, Any] | None:
        while True:
            line_end = self._replies.find(b"\n")
            while line_end >= 0:
                line = bytes(self._replies[:line_end])
                del self._replies[: line_end + 1]
                reply: dict[str, Any] = json.loads(line)
                if reply.get("id") == rid:
                    return reply
                line_end = self._replies.find(b"\n")
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._out], [], [], left)
            if not ready:
                return None
            data = os.read(self._out, 65536)
            if not data:
                self._died(f"log shipper process exited ({self._proc.poll()})")
                return None
            self._replies += data

    def _stats_from(self, reply: dict[str, Any] | None) -> PublisherStats:
        if reply is None:
            why = self._dead or "the log shipper process did not answer"
            return PublisherStats(
                accepted=self._accepted,
                confirmed=0,
                nacked=0,
                dropped=self._dropped,
                buffered=len(self._pending),
                in_flight=0,
                connected=False,
                reconnects=0,
                last_error=why,
            )
        s = reply["stats"]
        return PublisherStats(
            accepted=self._accepted,
            confirmed=s["confirmed"],
            nacked=s["nacked"],
            dropped=self._dropped + s["dropped"],
            buffered=len(self._pending) + s["buffered"],
            in_flight=s["in_flight"],
            connected=s["connected"],
            reconnects=s["reconnects"],
            last_error=s["last_error"],
            unconfirmed=s.get("unconfirmed", 0),
            node=s.get("node"),
        )

    @property
    def stats(self) -> PublisherStats:
        """Counts since the handler was made, the shipper's included."""
        if self._closed:
            return self._final
        return self._stats_from(self._request(b"S", 10.0))

    def flush(self, timeout: float) -> bool:
        """Wait until every record put so far is confirmed, nacked or dropped."""
        if self._closed:
            return True
        reply = self._request(b"F", timeout + 5.0, timeout=timeout)
        return bool(reply and reply["ok"])

    def close(self, timeout: float) -> bool:
        """Flush up to ``timeout``, then stop the shipper."""
        if self._closed:
            return True
        reply = self._request(b"C", timeout + 5.0, timeout=timeout)
        self._final = self._stats_from(reply)
        self._closed = True
        self._wake.set()
        with contextlib.suppress(OSError):
            self._proc.stdin.close()  # type: ignore[union-attr]
        try:
            self._proc.wait(timeout + 5.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._close_pipes()
        return bool(reply and reply["ok"])


# ---------------------------------------------------------------------- the shipper


def _reply(rid: int, ok: bool, publisher: Publisher) -> None:
    line = json.dumps({"id": rid, "ok": ok, "stats": asdict(publisher.stats)})
    os.write(1, line.encode() + b"\n")


def serve(config: dict[str, Any]) -> int:
    """The shipper: records from stdin into a ``Publisher``, requests answered on stdout."""
    logging.getLogger().addHandler(logging.NullHandler())  # nothing of pika's on stderr
    timeout = float(config["timeout"])
    publisher = Publisher(
        config["url"],
        config["exchange"],
        config["exchange_type"],
        durable_exchange=bool(config["durable_exchange"]),
        capacity=int(config["capacity"]),
        overflow="drop-oldest",
        reconnect=True,
        name="leveret-logs-shipper",
        super_stream=SuperStreamRoute(**route) if (route := config.get("super_stream")) else None,
    )
    publisher.start()
    buf = bytearray()
    head = _HEAD.size
    while True:
        data = os.read(0, 1 << 20)
        if not data:  # the application is gone: ship what we have, then go
            publisher.close(timeout)
            return 0
        buf += data
        pos = 0
        end = len(buf)
        while end - pos >= head:
            kind, flags, klen, blen = _HEAD.unpack_from(buf, pos)
            stop = pos + head + klen + blen
            if stop > end:
                break
            key = bytes(buf[pos + head : pos + head + klen])
            body = bytes(buf[pos + head + klen : stop])
            pos = stop
            if kind == b"R":
                publisher.put(key.decode(), body, bool(flags & 1))
                continue
            request = json.loads(body)
            rid = int(request["id"])
            if kind == b"S":
                _reply(rid, publisher.error is None, publisher)
            elif kind == b"F":
                _reply(rid, publisher.flush(float(request["timeout"])), publisher)
            elif kind == b"C":
                ok = publisher.close(float(request["timeout"]))
                _reply(rid, ok, publisher)
                return 0
        del buf[:pos]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: leveret-logs-shipper CONFIG_JSON", file=sys.stderr)
        return 2
    try:
        return serve(json.loads(args[0]))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
