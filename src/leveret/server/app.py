"""Start-up, the listener, resource alarms and shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import ssl
from collections.abc import Callable
from typing import Any

from leveret.broker import consumer_timeout, plugins
from leveret.broker.broker import LOG_EXCHANGE, BrokerCore
from leveret.broker.delayed import Scheduler, fsync_paths
from leveret.broker.event_exchange import EventExchange
from leveret.broker.events import Observers
from leveret.broker.exchanges.delayed import PLUGIN as DELAYED
from leveret.broker.interceptors import Interceptors
from leveret.broker.operations import seed_internal_cluster_id
from leveret.server.amqp import AMQPEdge
from leveret.server.commit import Committer
from leveret.server.config import Config, ConfigError
from leveret.server.listen import ListenError
from leveret.server.log_exchange import LogExchangeHandler
from leveret.server.log_intake import LogIntake
from leveret.server.resources import ResourceMonitor
from leveret.server.schedule import ScheduleTimer
from leveret.server.state import Limits, Listener, ServerState, Slots
from leveret.server.stream import StreamEdge
from leveret.server.syslog import SyslogListener
from leveret.server.tls import server_context
from leveret.store.messages import FsyncJob
from leveret.store.setup import Persistence

log = logging.getLogger(__name__)

ALARM_CHECK_INTERVAL = 0.2


class Server:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.observers = Observers()
        self.persistence = Persistence(config.data_dir) if config.data_dir is not None else None
        if self.persistence is not None:
            self.observers.subscribe(self.persistence.observe)
        # the RabbitMQ it behaves as: first, a bad version is the one line said
        rabbit = config.compat()
        self.broker = BrokerCore(
            node_name=config.node_name or None,
            observers=self.observers,
            storage=self.persistence,
            max_message_size=config.message_size_limit(),
            compat=rabbit,
        )
        self.broker.log_exchange = config.log_exchange
        self.broker.plugins = plugins.enabled(config.plugins)
        self.broker.consumer_timeout = config.consumer_timeout
        self.broker.anonymous_login = (config.anonymous_login_user, config.anonymous_login_pass)
        self.broker.interceptors = Interceptors(**dict(config.message_interceptors))
        # delayed messages: on disk with a data directory, else in memory
        self.scheduler = Scheduler(
            self.broker.vhosts.get,
            self.persistence.plugin_dir(DELAYED) / "schedule" if self.persistence else None,
        )
        self.broker.extensions[DELAYED] = self.scheduler
        # rabbitmq_event_exchange, when enabled: amq.rabbitmq.event in vhost /
        self.events = (
            EventExchange(self.broker) if plugins.EVENT_EXCHANGE in self.broker.plugins else None
        )
        self._schedule_timer: ScheduleTimer | None = None
        self._ticks = 0
        self._log_handler: LogExchangeHandler | None = None
        self.broker.users.loopback_users = set(config.loopback_users)
        self.broker.auth_attempts.track_source = config.track_auth_attempt_source
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.committer = Committer(self._write)
        self.state = ServerState(
            self.broker,
            Limits(
                config.frame_max,
                config.channel_max,
                config.heartbeat,
                handshake_timeout=config.handshake_timeout / 1000,
                frame_min=rabbit.frame_min_size,
            ),
            self.after_batch,
            self.commit,
            self.committer.when_durable,
            mechanisms=config.mechanisms(),
            cert_login_from=config.ssl_cert_login_from,
        )
        # AMQP 1.0 is RabbitMQ 4's core protocol; RabbitMQ 3.10 serves it by its plugin
        self.state.amqp10 = rabbit.v4 or plugins.AMQP_1_0 in self.broker.plugins
        self.resources = ResourceMonitor(config, self.state, self.broker)
        self._servers: list[asyncio.base_events.Server] = []
        # (protocol, host, port) of each listener, as the management API lists them
        self.listeners: list[tuple[str, str, int]] = []
        self.tls_port = 0
        self._alarm_handle: asyncio.TimerHandle | None = None
        self.port = 0
        self.host = config.bind
        self.stream_port = 0
        self.stream_tls_port = 0
        self.stream_host = config.bind
        # syslog and OTLP records go into the log system's exchange through this one piece
        self.log_intake = LogIntake(
            self.broker, config.log_sources_vhost, config.log_sources_exchange
        )
        self.syslog: SyslogListener | None = None
        self.syslog_host = config.bind
        self.syslog_port = 0

    def setup_broker(self) -> None:
        """Stored state, then the users, vhosts and permissions of the configuration."""
        if self.persistence is not None:
            self.persistence.restore(self.broker)
        b = self.broker
        c = self.config
        for vh in c.vhosts:
            b.add_vhost(vh.name, vh.description)
        fresh = not b.vhosts
        if fresh:
            b.add_vhost("/", "Default virtual host")  # as RabbitMQ names it
        if fresh and c.default_user and "guest" not in b.users.users:
            b.add_user("guest", "guest", ["administrator"])
            b.set_permissions("guest", "/", ".*", ".*", ".*")
        for u in c.users:
            b.add_user(u.name, u.password, list(u.tags), password_hash=u.password_hash)
        for p in c.permissions:
            b.set_permissions(p.user, p.vhost, p.configure, p.write, p.read)

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.committer.start(self.loop)
        config = self.config
        tls_context = server_context(config.tls) if config.tls.enabled else None
        if not config.tcp_listener and tls_context is None:
            raise ConfigError("no listener: the TCP listener is off and no TLS certificate is set")
        self.setup_broker()
        try:
            if config.tcp_listener:
                plain = Listener(slots=Slots(config.connection_max))
                self.host, self.port = await self._listen(config.amqp_port, plain, None)
            if tls_context is not None:
                verify = config.tls.verify == "verify_peer"
                secure = Listener("amqp/ssl", True, verify, Slots(config.connection_max))
                host, self.tls_port = await self._listen(config.amqps_port, secure, tls_context)
                if not config.tcp_listener:
                    self.host, self.port = host, self.tls_port
            if config.stream_listener:
                self.stream_host, self.stream_port = await self._listen_stream(
                    config.stream_port, None
                )
                if tls_context is not None:
                    _, self.stream_tls_port = await self._listen_stream(
                        config.stream_tls_port, tls_context
                    )
            if config.syslog_port is not None:
                syslog = SyslogListener(self.log_intake, lambda: bool(self.state.alarms))
                self.syslog_host, self.syslog_port = await syslog.start(
                    config.bind, config.syslog_port
                )
                self.syslog = syslog
                self.listeners.append(("syslog", self.syslog_host, self.syslog_port))
        except BaseException:
            for server in self._servers:
                server.close()
            raise
        # kept in the definitions from the first start on; logged once the listeners are
        # up, so that a port in use is the only line a failed start prints
        seed_internal_cluster_id(self.broker)
        self.resources.log_limits()
        self.resources.check()
        self._alarm_handle = self.loop.call_later(ALARM_CHECK_INTERVAL, self._tick)
        self._schedule_timer = ScheduleTimer(self.loop, self.scheduler)
        if self.events is not None:
            events, loop = self.events, self.loop

            def flush_soon() -> None:
                loop.call_soon(events.flush)

            events.schedule = flush_soon
        if config.log_exchange:
            self._log_handler = LogExchangeHandler.install(
                self.broker, self.loop, config.log_exchange_level
            )
            log.info("Logging to exchange '%s' in vhost '/' ready", LOG_EXCHANGE)

    async def _listen(
        self, port: int, listener: Listener, context: ssl.SSLContext | None
    ) -> tuple[str, int]:
        return await self._serve(
            lambda: AMQPEdge(self.state, listener), listener.protocol, port, context
        )

    async def _listen_stream(self, port: int, context: ssl.SSLContext | None) -> tuple[str, int]:
        """RabbitMQ's stream protocol, plain or over TLS, under connection_max as every
        listener of RabbitMQ's (tcp_listener_sup). Clients connect to the host and port a
        stream's metadata advertises: the configured host, else this machine's name, as
        RabbitMQ's plugin does, and the port actually bound."""
        config = self.config
        advertised_host = config.stream_advertised_host or socket.gethostname()
        limits = self.state.limits
        tls = context is not None
        listener = Listener(
            "stream/ssl" if tls else "stream",
            tls,
            tls and config.tls.verify == "verify_peer",
            Slots(config.connection_max),
        )
        bound = [0]  # the port, once bound: the metadata the protocol answers names it
        host, port = await self._serve(
            lambda: StreamEdge(
                self.state, listener, (advertised_host, bound[0]), 1_048_576, limits.heartbeat
            ),
            listener.protocol,
            port,
            context,
        )
        bound[0] = port
        return host, port

    async def _serve(
        self,
        factory: Callable[[], asyncio.Protocol],
        name: str,
        port: int,
        context: ssl.SSLContext | None,
    ) -> tuple[str, int]:
        """A listener of ``name`` (as RabbitMQ lists it) on the configured address; a port
        it cannot have is a :class:`ListenError` naming it. Returns the address bound."""
        host: str | None = self.config.bind
        if host in ("", "::"):
            host = None
        try:
            server = await self.loop.create_server(
                factory,
                host=host,
                port=port,
                reuse_address=True,
                backlog=1024,
                ssl=context,
                ssl_handshake_timeout=self.state.limits.handshake_timeout if context else None,
            )
        except OSError as exc:
            raise ListenError(name, self.config.bind, port, exc) from exc
        self._servers.append(server)
        for sock in server.sockets:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        bound_host, bound_port = server.sockets[0].getsockname()[:2]
        self.listeners.append((name, str(bound_host), int(bound_port)))
        return str(bound_host), int(bound_port)

    @property
    def disk_alarm(self) -> bool:
        return self.resources.disk_alarm

    @property
    def url(self) -> str:
        scheme = "amqp" if self.config.tcp_listener else "amqps"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def tls_url(self) -> str | None:
        return f"amqps://{self.host}:{self.tls_port}" if self.tls_port else None

    def after_batch(self) -> None:
        """Make what was published durable now (the loop waits for the disk)."""
        if self.persistence is not None:
            self.committer.sync()

    def commit(self) -> int:
        """After a batch of publishes: write what it stored and start its fsync (group
        commit); the generation its confirms wait for, 0 when durable already."""
        if self.persistence is None:
            return 0
        return self.committer.commit()

    def _write(self) -> FsyncJob | None:
        assert self.persistence is not None
        job = self.persistence.write()
        self.scheduler.flush()  # confirmed delayed messages survive a kill -9
        return job

    def _tick(self) -> None:
        """Periodic housekeeping: message and queue expiry, memory and disk (alarms,
        paging), and making buffered store writes durable (in the fsync thread: no one
        waits for these, the loop does not either)."""
        self._alarm_handle = self.loop.call_later(ALARM_CHECK_INTERVAL, self._tick)
        self.housekeeping()
        self.resources.check()
        self.commit()

    def housekeeping(self) -> None:
        """What the broker does when time passes: expire messages and queues, close
        channels past their consumer timeout."""
        for vhost in self.broker.vhosts.values():
            vhost.expire()
        consumer_timeout.check(self.broker)
        if self.scheduler.tick() and self._schedule_timer is not None:
            self._schedule_timer.rearm()
        if self.events is not None:
            self.events.flush()
        self._ticks += 1
        self.scheduler.flush()
        if self._ticks % 5 == 0 and self.loop is not None:
            # durable within a second; fsync in a thread, never holding up the loop
            paths = self.scheduler.dirty_paths()
            if paths:
                self.loop.run_in_executor(None, fsync_paths, paths)

    async def stop(self, reason: str = "shutdown") -> None:
        for source, c in self.log_intake.counts.items():
            if c.received:
                log.info(
                    "Log source %s: %d records received, %d published, %d refused",
                    source, c.received, c.published, c.refused,
                )  # fmt: skip
        if self._log_handler is not None:
            self._log_handler.uninstall()
            self._log_handler = None
        if self._alarm_handle is not None:
            self._alarm_handle.cancel()
        if self._schedule_timer is not None:
            self._schedule_timer.close()
            self._schedule_timer = None
        for server in self._servers:
            server.close()
        if self.syslog is not None:
            self.syslog.close()
        for p in list(self.state.connections):
            p.shutdown(reason)
        # give clients a moment to read the close and answer close-ok
        for _ in range(20):
            if not self.state.connections:
                break
            await asyncio.sleep(0.05)
        for p in list(self.state.connections):
            p.abort()
        if self.persistence is not None:
            self.committer.sync()  # what waits for an fsync too
        self.committer.close()
        if self.persistence is not None:
            self.persistence.close()
        self.resources.close()
        for server in self._servers:
            await server.wait_closed()
        if self.syslog is not None:
            await self.syslog.wait_closed()
            self.syslog = None

    async def serve_forever(self, on_ready: Any = None) -> None:
        await self.start()
        gc.freeze()  # start-up's objects live as long as the server: out of the collector's way
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
