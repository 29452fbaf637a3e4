"""Start-up, the listener, resource alarms and shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from typing import Any

from leveret.broker.broker import Broker
from leveret.server.amqp import AMQPProtocol
from leveret.server.config import Config, ConfigError
from leveret.server.state import Limits, ServerState

log = logging.getLogger(__name__)

ALARM_CHECK_INTERVAL = 0.2


class Server:
    def __init__(self, config: Config, broker: Broker | None = None) -> None:
        self.config = config
        self.broker = broker or Broker()
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._server: asyncio.base_events.Server | None = None
        self.stores: list[Any] = []
        self.state = ServerState(
            self.broker,
            Limits(config.frame_max, config.channel_max, config.heartbeat),
            self.after_batch,
        )
        self._alarm_handle: asyncio.TimerHandle | None = None
        self.port = 0
        self.host = config.bind
        self._stopped: asyncio.Event | None = None

    def setup_broker(self) -> None:
        """Users, vhosts and permissions from the configuration, then stored state."""
        from leveret.store.setup import attach_stores

        attach_stores(self)
        b = self.broker
        c = self.config
        for vh in c.vhosts:
            if "name" not in vh:
                raise ConfigError("every [[vhosts]] entry needs a name")
            b.add_vhost(str(vh["name"]), str(vh.get("description", "")))
        fresh = not b.vhosts
        if fresh:
            b.add_vhost("/", "Default virtual host")  # as RabbitMQ names it
        if fresh and c.default_user and "guest" not in b.users.users:
            b.users.add_user("guest", "guest", ["administrator"])
            b.users.set_permissions("guest", "/", ".*", ".*", ".*")
        for u in c.users:
            if "name" not in u or ("password" not in u and "password_hash" not in u):
                raise ConfigError(
                    "every [[users]] entry needs a name and a password or password_hash"
                )
            tags = u.get("tags", [])
            if isinstance(tags, str):
                tags = [t for t in tags.replace(",", " ").split() if t]
            b.users.add_user(
                str(u["name"]), u.get("password"), list(tags), password_hash=u.get("password_hash")
            )
        for p in c.permissions:
            if "user" not in p:
                raise ConfigError("every [[permissions]] entry needs a user")
            b.users.set_permissions(
                str(p["user"]),
                str(p.get("vhost", "/")),
                str(p.get("configure", ".*")),
                str(p.get("write", ".*")),
                str(p.get("read", ".*")),
            )

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.setup_broker()
        host: str | None = self.config.bind
        if host in ("", "0.0.0.0", "::"):
            host = None if host != "0.0.0.0" else "0.0.0.0"
        self._server = await self.loop.create_server(
            lambda: AMQPProtocol(self.state),
            host=host,
            port=self.config.amqp_port,
            reuse_address=True,
            backlog=1024,
        )
        sock = self._server.sockets[0]
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.host, self.port = sock.getsockname()[:2]
        self._alarm_handle = self.loop.call_later(ALARM_CHECK_INTERVAL, self._tick)

    @property
    def memory_alarm(self) -> bool:
        return "memory" in self.state.alarms

    @property
    def url(self) -> str:
        return f"amqp://{self.host}:{self.port}"

    def after_batch(self) -> None:
        """Make what was published durable before confirms go out (fsync batching)."""
        for store in self.stores:
            store.sync()

    def _tick(self) -> None:
        """Periodic housekeeping: message and queue expiry, the memory alarm, and making
        buffered store writes durable."""
        self._alarm_handle = self.loop.call_later(ALARM_CHECK_INTERVAL, self._tick)
        for vhost in self.broker.vhosts.values():
            vhost.expire()
        self._check_alarms()
        self.after_batch()

    def _check_alarms(self) -> None:
        used = 0
        for vhost in self.broker.vhosts.values():
            for q in vhost.queues.values():
                used += q.ready_bytes + 200 * len(q.ready)
        high = self.config.memory_high_watermark
        alarm = used > high if not self.memory_alarm else used > high * 0.8
        if alarm != self.memory_alarm:
            log.warning("memory alarm %s (%d bytes queued)", "set" if alarm else "cleared", used)
            if alarm:
                # publishers are blocked at their next publish, as RabbitMQ does
                self.state.alarms.add("memory")
            else:
                self.state.alarms.discard("memory")
                if not self.state.alarms:
                    for p in list(self.state.connections):
                        p.set_blocked(False, "")

    async def stop(self, reason: str = "shutdown") -> None:
        if self._alarm_handle is not None:
            self._alarm_handle.cancel()
        if self._server is not None:
            self._server.close()
        for p in list(self.state.connections):
            p.shutdown(reason)
        # give clients a moment to read the close and answer close-ok
        for _ in range(20):
            if not self.state.connections:
                break
            await asyncio.sleep(0.05)
        for p in list(self.state.connections):
            p.abort()
        for store in self.stores:
            store.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def serve_forever(self, on_ready: Any = None) -> None:
        await self.start()
        if on_ready is not None:
            on_ready(self)
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                self.loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await self.stop()


def run(config: Config, on_ready: Any = None) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(Server(config).serve_forever(on_ready))
    else:
        uvloop.run(Server(config).serve_forever(on_ready))
