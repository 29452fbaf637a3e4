"""The dashboard's Logs view: the records of a logs exchange, live, pushed to browsers.

A *tap* is an AMQP client of the broker's own AMQP port (aiormq over a socket, in the
broker's event loop), logged in as the dashboard's user: it declares a server-named exclusive
queue, binds it to the exchange as ``leveret receive-logs`` does, and consumes. Browsers read
``GET /api/logs/stream`` (Server-Sent Events); every page of one user on one exchange shares
one tap. A tap exists only while a page is open (and ``LINGER`` seconds after the last one
closes), so a broker nobody watches pays nothing.

Why it can never slow the broker:

- The tap takes at most ``PREFETCH`` records per ``ACK_INTERVAL`` (prefetch plus one
  ``basic.ack(multiple)`` per interval): the work done in the broker's event loop for the view
  is capped at ``MAX_RATE`` records/s, whatever the publish rate.
- Its queue holds at most ``QUEUE_LIMIT`` records (``x-max-length``, drop-head): past it the
  broker drops the oldest as the newest come, so a burst the view cannot keep up with shows
  its first records, then its newest, down to the last one; what was dropped is counted
  (the queue's own count, read in the broker's process) and shown. Publishers are never
  refused, blocked or flow-controlled on the view's account.
- The queue is declared first and bound to the exchange the moment the exchange is
  declared (the broker tells the view while it handles the declaration, before the
  declaring client can publish): a view open before ``emit-log`` declared ``logs`` shows
  the very record that declared it.
- A view opens with the recent past: when a stream queue is bound to the exchange (``logs``,
  which ``leveret up`` and the lake ingest declare, first), the tap reads its last
  ``HISTORY`` records once, then goes on with the live records (a record that is in both,
  published as the tap bound its queue, is shown once, by its ``message_id``).
- The tap checks every ``EXCHANGE_CHECK`` seconds that the exchange it is bound to still
  exists; one deleted (and declared again, perhaps of another type) is waited for and, as
  above, bound anew as it is declared.
- Each browser has its own bounded buffer (``CLIENT_BUFFER`` records, ``CLIENT_BUFFER_BYTES``);
  a browser that reads slowly loses the oldest records of its buffer, counted and shown, and
  never holds up the tap or another browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web

from leveret.broker import operations
from leveret.broker.events import API_ACTOR, BrokerEvent, ExchangeCreated
from leveret.broker.operations import Actor, BindingRequest
from leveret.broker.queues import ClassicQueue, StreamQueue
from leveret.management.context import mgmt
from leveret.management.httputil import bad_request, credentials, current_user
from leveret.management.logsfeed import Subscriber
from leveret.management.logstap import HISTORY_STREAM, MAX_RATE, History, Tap, binding_keys
from leveret.protocol.errors import AMQPError

if TYPE_CHECKING:
    from leveret.management.context import Management

log = logging.getLogger(__name__)

#: the kernel's send buffer for one browser's stream (no autotuning to megabytes)
SEND_BUFFER = 256 * 1024
BATCH_INTERVAL = 0.2
IDLE_BATCH_INTERVAL = 1.0


def _arrival(queue: StreamQueue) -> Callable[[int], int | None]:
    def arrival(offset: int) -> int | None:
        ref = queue.chunk_at(offset)
        return None if ref is None or ref.first > offset else int(ref.timestamp)

    return arrival


class LogsView:
    """The taps of one management app, keyed by (user, vhost, exchange)."""

    def __init__(self, management: Management) -> None:
        self.management = management
        self.taps: dict[tuple[str, str, str], Tap] = {}
        management.broker.observers.subscribe(self._observe)

    def _observe(self, event: BrokerEvent) -> None:
        if isinstance(event, ExchangeCreated) and self.taps:
            self.bind_new(event.exchange.vhost, event.exchange.name)

    def bind_new(self, vhost_name: str, exchange: str) -> None:
        """Bind the waiting taps' queues to an exchange as it is declared, before the
        declaring client can publish to it (the broker tells its observers while it
        handles the declaration): a view open before ``emit-log`` declared ``logs`` shows
        the record ``emit-log`` publishes right after. As the user of each tap, with the
        rights they have (what they may not bind, the tap's own bind refuses later)."""
        broker = self.management.broker
        vhost = broker.vhosts.get(vhost_name)
        x = vhost.exchanges.get(exchange) if vhost is not None else None
        if vhost is None or x is None:
            return
        for tap in list(self.taps.values()):
            queue = vhost.queues.get(tap.queue or "")
            if tap.vhost != vhost_name or tap.exchange != exchange or queue is None:
                continue
            actor = Actor(
                tap.username,
                broker.users.permission(tap.username, vhost_name),
                connection=queue.exclusive_owner,
            )
            who = API_ACTOR.set(tap.username)  # the bindings' events name the tap's user
            try:
                for key in binding_keys(x.type_name):
                    request = BindingRequest(exchange, "queue", queue.name, key)
                    operations.bind(vhost, actor, request)
            except AMQPError as exc:
                log.debug("logs view: cannot bind %s to %s: %s", queue.name, exchange, exc)
            finally:
                API_ACTOR.reset(who)

    def exchange_type(self, vhost_name: str, exchange: str) -> str | None:
        vhost = self.management.broker.vhosts.get(vhost_name)
        x = vhost.exchanges.get(exchange) if vhost is not None else None
        return x.type_name if x is not None else None

    def dropped(self, vhost_name: str, queue_name: str) -> int:
        """How many records the broker dropped from the head of a tap's queue."""
        vhost = self.management.broker.vhosts.get(vhost_name)
        queue = vhost.queues.get(queue_name) if vhost is not None else None
        return queue.dropped_head if isinstance(queue, ClassicQueue) else 0

    def amqp_address(self) -> tuple[str, int]:
        for listener in self.management.listeners:
            if listener.get("protocol") == "amqp":
                host = str(listener["ip_address"])
                if host in ("0.0.0.0", ""):
                    host = "127.0.0.1"
                elif host == "::":
                    host = "::1"
                return host, int(listener["port"])
        server = self.management.server
        return "127.0.0.1", int(server.port)

    def tap(self, username: str, password: str, vhost: str, exchange: str) -> Tap:
        key = (username, vhost, exchange)
        host, port = self.amqp_address()
        netloc = f"[{host}]" if ":" in host else host
        url = (
            f"amqp://{quote(username, safe='')}:{quote(password, safe='')}@{netloc}:{port}/"
            f"{quote(vhost, safe='')}"
        )
        tap = self.taps.get(key)
        if tap is None:
            tap = Tap(
                url,
                vhost,
                exchange,
                username,
                self._forget,
                lambda: self.history_source(vhost, exchange),
                lambda queue: self.dropped(vhost, queue),
                lambda: self.exchange_type(vhost, exchange),
            )
            self.taps[key] = tap
            tap.start()
        else:
            tap.url = url  # the password the user logged in with last
        return tap

    def history_source(self, vhost: str, exchange: str) -> History | None:
        """The stream queue bound to ``exchange`` that a view opens with: ``logs`` when it
        is bound there, else the first by name."""
        v = self.management.broker.vhosts.get(vhost)
        x = v.exchanges.get(exchange) if v is not None else None
        if v is None or x is None:
            return None
        bound = {b.destination.name for b in x.bindings.values() if b.destination.kind == "queue"}
        for name in sorted(bound, key=lambda n: (n != HISTORY_STREAM, n)):
            q = v.queues.get(name)
            if isinstance(q, StreamQueue):
                return History(name, int(q.log.first), int(q.log.next_offset), _arrival(q))
        return None

    def _forget(self, tap: Tap) -> None:
        key = (tap.username, tap.vhost, tap.exchange)
        if self.taps.get(key) is tap:
            del self.taps[key]

    async def close(self) -> None:
        taps = list(self.taps.values())
        self.taps.clear()
        for tap in taps:
            await tap.close()


LOGS_VIEW: web.AppKey[LogsView] = web.AppKey("logs_view", LogsView)


def _batch(tap: Tap, sub: Subscriber, records: list[bytes]) -> bytes:
    head = {
        "status": tap.status,
        "error": tap.error,
        "queue": tap.queue,
        "max_rate": MAX_RATE,
        "dropped": {
            "broker": tap.dropped_by_broker - sub.broker_dropped_base,
            "server": sub.dropped,
        },
    }
    meta = json.dumps(head, separators=(",", ":")).encode()
    return b"data: " + meta[:-1] + b',"records":[' + b",".join(records) + b"]}\n\n"


async def stream(request: web.Request) -> web.StreamResponse:
    """``GET /api/logs/stream?vhost=/&exchange=logs``: Server-Sent Events, one ``data:``
    line per batch: ``{"status", "error", "dropped": {"broker", "server"}, "records": [...]}``."""
    m = mgmt(request)
    vhost = request.query.get("vhost", "/")
    exchange = request.query.get("exchange", "logs")
    if not exchange:
        raise bad_request("exchange must not be empty")
    m.vhost(request, vhost)
    creds = credentials(request)
    assert creds is not None  # the middleware let the request in
    view = request.app[LOGS_VIEW]
    tap = view.tap(current_user(request).name, creds[1], vhost, exchange)
    sub = tap.subscribe()
    resp = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None:
        with contextlib.suppress(OSError, AttributeError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    try:
        await resp.prepare(request)
        await resp.write(b"retry: 2000\n\n")
        last_sent = 0.0
        while not sub.closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(sub.wake.wait(), IDLE_BATCH_INTERVAL)
            if sub.closed:
                break
            records = sub.take()
            now = time.monotonic()
            if records or now - last_sent >= IDLE_BATCH_INTERVAL:
                await resp.write(_batch(tap, sub, records))
                last_sent = now
            await asyncio.sleep(BATCH_INTERVAL)
    except ConnectionResetError:
        pass
    finally:
        tap.unsubscribe(sub)
    return resp


async def live(request: web.Request) -> dict[str, Any] | None:
    """The live counts of this user's tap on (vhost, exchange), if one is running."""
    view = request.app[LOGS_VIEW]
    vhost = request.query.get("vhost", "/")
    exchange = request.query.get("exchange", "logs")
    tap = view.taps.get((current_user(request).name, vhost, exchange))
    return tap.live() if tap is not None else None


def setup(app: web.Application, management: Management) -> None:
    view = LogsView(management)
    app[LOGS_VIEW] = view

    async def on_shutdown(_: web.Application) -> None:
        await view.close()

    app.on_shutdown.append(on_shutdown)
    app.router.add_get("/api/logs/stream", stream)
