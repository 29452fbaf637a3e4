"""Run the whole broker: the AMQP server plus the management API and the Prometheus
listener, on one event loop, until SIGINT or SIGTERM.

The server knows nothing of management; this module composes them."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from leveret.management.app import make_app
from leveret.management.context import Management
from leveret.management.metrics import make_metrics_app
from leveret.management.stats import Stats
from leveret.server.app import Server
from leveret.server.config import Config
from leveret.server.listen import ListenError
from leveret.server.tls import server_context


@dataclass
class Running:
    """What a started broker listens on (its AMQP and stream listeners: ``server``)."""

    server: Server
    management: Management
    http_host: str
    http_port: int
    prometheus_host: str
    prometheus_port: int
    https: bool = False

    @property
    def http_url(self) -> str:
        scheme = "https" if self.https else "http"
        return f"{scheme}://{self.http_host}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        scheme = "https" if self.https else "http"
        return f"{scheme}://{self.prometheus_host}:{self.prometheus_port}/metrics"


async def _listen(
    app: web.Application,
    bind: str,
    port: int,
    context: ssl.SSLContext | None = None,
    listener: str = "http",
) -> tuple[web.AppRunner, str, int]:
    # Request bodies as sent: the OTLP endpoint reads Content-Encoding itself (to answer a
    # bad gzip body with OTLP's 400), and RabbitMQ's API does not decompress bodies either.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, auto_decompress=False)
    await runner.setup()
    host: str | None = bind if bind not in ("", "::") else None
    site = web.TCPSite(runner, host, port, reuse_address=True, ssl_context=context)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ListenError(listener, bind, port, exc) from exc
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    if sockets:
        name = sockets[0].getsockname()
        return runner, str(name[0]), int(name[1])
    return runner, bind, port


class ManagedServer:
    """The AMQP server with its management and metrics listeners."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.server = Server(config)
        self.running: Running | None = None
        self._runners: list[web.AppRunner] = []
        self._sampler: asyncio.TimerHandle | None = None

    async def start(self) -> Running:
        await self.server.start()
        stats = Stats(self.server.broker)
        management = Management(self.server, stats)
        context = None
        if self.config.http_tls:
            context = server_context(*self.config.http_tls_config())
        try:
            http, http_host, http_port = await _listen(
                make_app(management), self.config.bind, self.config.http_port, context
            )
            self._runners.append(http)
            metrics, prom_host, prom_port = await _listen(
                make_metrics_app(management),
                self.config.bind,
                self.config.prometheus_port,
                context,
                "prometheus",
            )
            self._runners.append(metrics)
        except BaseException:
            await self.stop()
            raise
        node = self.server.broker.node_name
        management.listeners = [
            {"node": node, "protocol": proto, "ip_address": host, "port": port, "socket_opts": {}}
            for proto, host, port in (
                *self.server.listeners,
                ("https" if context else "http", http_host, http_port),
                ("https/prometheus" if context else "http/prometheus", prom_host, prom_port),
            )
        ]
        stats.sample()
        loop = asyncio.get_running_loop()

        def tick() -> None:
            self._sampler = loop.call_later(stats.interval, tick)
            stats.sample()

        self._sampler = loop.call_later(stats.interval, tick)
        self.running = Running(
            self.server, management, http_host, http_port, prom_host, prom_port, context is not None
        )
        return self.running

    async def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()
        await self.server.stop()

    async def serve_forever(self, on_ready: Callable[[Running], Any] | None = None) -> None:
        running = await self.start()
        # what start-up made lives as long as the server: out of the collector's way, so
        # that full collections (which pause the loop) scan only what came since
        gc.freeze()
        if on_ready is not None:
            on_ready(running)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await self.stop()


def run(config: Config, on_ready: Callable[[Running], Any] | None = None) -> None:
    """Run until SIGINT or SIGTERM (with uvloop when it is there)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(ManagedServer(config).serve_forever(on_ready))
    else:
        uvloop.run(ManagedServer(config).serve_forever(on_ready))
