"""The whole broker inside a Python process.

``Broker`` runs the server in a background thread with an event loop of its own, for
synchronous code and tests::

    with leveret.Broker() as broker:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))

``serve`` runs it on the caller's running loop, for asyncio applications::

    async with leveret.serve() as broker:
        connection = await aio_pika.connect(broker.url)

Both keep everything in memory unless ``data_dir`` is given, listen on 127.0.0.1 on a free
port unless told otherwise, and take the server's settings: a TOML config file (the one
``leveret server --config`` reads) and any of its settings as keyword arguments. They do not
read ``LEVERET_*`` environment variables: an embedded broker is configured by its caller.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import os
import re
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar
from urllib.parse import quote

from leveret.broker.clock import Clock, ManualClock
from leveret.broker.clock import install as install_clock
from leveret.broker.definitions import export_definitions, import_definitions
from leveret.server.app import Server
from leveret.server.config import (
    Config,
    ConfigError,
    MemoryWatermark,
    PermissionConfig,
    UserConfig,
    VhostConfig,
)

if TYPE_CHECKING:
    from leveret.broker.broker import BrokerCore as Core
    from leveret.management.runner import ManagedServer

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")
StrPath = str | os.PathLike[str]

# Settings that have an argument of their own.
_ARGUMENTS = {
    "amqp_port": "port",
    "bind": "host",
    "data_dir": "data_dir",
    "http_port": "management_port",
    "prometheus_port": "management_port",
}
# Settings that are lists of entries, as [[users]], [[vhosts]], [[permissions]] in a file.
_TABLES: dict[str, type[UserConfig] | type[VhostConfig] | type[PermissionConfig]] = {
    "users": UserConfig,
    "vhosts": VhostConfig,
    "permissions": PermissionConfig,
}
# What reset() keeps: the broker's users, vhosts and permissions as they were at start.
_KEPT = ("users", "vhosts", "permissions")
STOP_TIMEOUT = 30.0


def _url_host(host: str) -> str:
    if host in ("", "0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class Broker:
    """A Leveret broker in this process.

    ``port`` 0 (the default) picks a free port; ``host`` is the address to listen on.
    ``data_dir`` keeps durable definitions and persistent messages on disk there (as
    ``leveret server --data-dir``); without it everything is in memory and gone at
    ``stop()``. ``management`` starts the management HTTP API on ``management_port`` (0: a
    free port) and Prometheus metrics on a free port (``metrics_url``). ``config`` is a TOML
    file in the format of ``leveret server --config`` (users, vhosts, permissions,
    settings); keyword arguments set any of its settings (``heartbeat=10``,
    ``frame_max=...``, ``users=[{...}]``, ``default_user=False``,
    ``rabbitmq_version="4.2"`` to behave as RabbitMQ 4.2) after the file, and lists
    add to the file's. The addresses are
    the arguments' (a file's ports and bind address are not used); a file's ``data_dir`` is
    used when the argument is not given.

    ``start()`` runs it in a background thread with its own event loop and returns once it
    accepts connections; ``stop()`` closes every connection (320 CONNECTION_FORCED, as a
    RabbitMQ shutting down) and waits for the thread. ``with Broker() as b:`` does both.
    """

    def __init__(
        self,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        data_dir: StrPath | None = None,
        management: bool = False,
        management_port: int = 0,
        config: StrPath | None = None,
        clock: str | Clock | None = None,
        **settings: Any,
    ) -> None:
        for key in settings:
            if key in _ARGUMENTS:
                raise TypeError(f"set '{key}' with the {_ARGUMENTS[key]}= argument")
        cfg = Config()
        cfg.data_dir = None
        if config is not None:
            cfg.apply_file(Path(config))
        for key, value in settings.items():
            if key in _TABLES:
                getattr(cfg, key).extend(_entries(key, value))
            else:
                cfg.set(key, value)
        cfg.compat()  # the version and deprecated-feature settings go together
        cfg.amqp_port = int(port)
        # free ports for the stream protocol: in-process brokers run side by side
        if "stream_port" not in settings:
            cfg.stream_port = 0
        if "stream_tls_port" not in settings:
            cfg.stream_tls_port = 0
        cfg.bind = host
        cfg.http_port = int(management_port)
        cfg.prometheus_port = 0  # a listener of its own: metrics_url says where
        if data_dir is not None:
            cfg.data_dir = Path(data_dir)
        self.config = cfg
        self.management = management
        if clock == "manual":
            clock = ManualClock()
        elif clock in (None, "system"):
            clock = None
        elif not isinstance(clock, Clock):
            raise ValueError(f"clock must be 'manual' or 'system', not {clock!r}")
        self.clock: Clock | None = clock
        self._server: Server | None = None
        self._composed: ManagedServer | None = None
        self._management_url: str | None = None
        self._metrics_url: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._thread: threading.Thread | None = None
        self._initial: dict[str, Any] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ life cycle
    def start(self) -> Broker:
        """Start in a background thread; returns when the broker accepts connections.
        Raises what starting raised (``OSError`` for a port in use, ``ConfigError``,
        ``leveret.store.lock.DataDirInUse`` for a ``data_dir`` another broker holds)."""
        with self._lock:
            if self._loop is not None:
                raise RuntimeError("the broker is already running")
            loop = _new_loop()
            ready: concurrent.futures.Future[None] = concurrent.futures.Future()
            thread = threading.Thread(
                target=self._run, args=(loop, ready), name="leveret-broker", daemon=True
            )
            thread.start()
            try:
                ready.result()
            except BaseException:
                thread.join()
                raise
            self._thread = thread
        return self

    def _run(self, loop: asyncio.AbstractEventLoop, ready: concurrent.futures.Future[None]) -> None:
        asyncio.set_event_loop(loop)
        try:
            try:
                loop.run_until_complete(self._astart())
            except BaseException as exc:
                ready.set_exception(exc)
                return
            ready.set_result(None)
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def stop(self) -> None:
        """Close every connection, stop listening, make stored data durable, and end the
        background thread. Does nothing when the broker is not running."""
        with self._lock:
            loop, thread = self._loop, self._thread
            if loop is None:
                return
            if thread is None:
                raise RuntimeError("started by serve(): it stops when its 'async with' ends")
            if threading.get_ident() == self._loop_thread:
                raise RuntimeError("stop() cannot be called from the broker's own thread")
            try:
                asyncio.run_coroutine_threadsafe(self._astop(), loop).result(STOP_TIMEOUT)
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(STOP_TIMEOUT)
                self._thread = None

    async def _astart(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        if self.clock is not None:
            install_clock(self.clock)
        try:
            if self.management:
                from leveret.management.runner import ManagedServer

                composed = ManagedServer(self.config)
                self._composed = composed
                self._server = composed.server
                running = await composed.start()
                http, prometheus = _url_host(running.http_host), _url_host(running.prometheus_host)
                self._management_url = f"http://{http}:{running.http_port}"
                self._metrics_url = f"http://{prometheus}:{running.prometheus_port}/metrics"
            else:
                self._server = Server(self.config)
                await self._server.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await self._astop()
            self._forget()
            raise
        self._initial = {k: v for k, v in self._definitions().items() if k in _KEPT}
        log.info("Leveret started in-process; listening on %s", self.url)

    async def _astop(self) -> None:
        try:
            if self._composed is not None:
                await self._composed.stop()
            elif self._server is not None:
                await self._server.stop()
        finally:
            self._forget()

    def _forget(self) -> None:
        if self.clock is not None and threading.get_ident() == self._loop_thread:
            install_clock(None)
        self._server = None
        self._composed = None
        self._management_url = self._metrics_url = None
        self._loop = None
        self._loop_thread = None

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"listening on {self.url}" if self.running else "stopped"
        return f"<leveret.Broker {state}>"

    # ------------------------------------------------------------------ addresses
    @property
    def running(self) -> bool:
        return self._server is not None

    def _started(self) -> Server:
        if self._server is None:
            raise RuntimeError("the broker is not running (start() it first)")
        return self._server

    @property
    def host(self) -> str:
        """The address to connect to (127.0.0.1 when listening on every interface)."""
        return _url_host(str(self._started().host))

    @property
    def port(self) -> int:
        """The AMQP port it listens on (the one picked when started with port 0)."""
        return int(self._started().port)

    @property
    def stream_port(self) -> int:
        """The port of RabbitMQ's stream protocol (a free one unless ``stream_port=`` was
        given; 0 when ``stream_listener=False``)."""
        return int(self._started().stream_port)

    @property
    def syslog_port(self) -> int:
        """The syslog port, UDP and TCP (a free one with ``syslog_port=0``; 0 when the
        listener is off, as by default)."""
        return int(self._started().syslog_port)

    @property
    def rabbitmq_version(self) -> str:
        """The RabbitMQ version it behaves as and reports: 3.10.8, or 4.2.9 when started
        with ``rabbitmq_version="4.2"`` (see docs/compatibility.md)."""
        return self.config.compat().version

    @property
    def url(self) -> str:
        """The AMQP URL of vhost ``/``, with guest's credentials when guest exists."""
        return self.vhost_url("/")

    def vhost_url(self, vhost: str, user: str = "guest", password: str = "guest") -> str:
        """The AMQP URL of ``vhost``, for ``user`` (no credentials when the broker was
        started without its default user and none are given)."""
        creds = ""
        if user and (self.config.default_user or (user, password) != ("guest", "guest")):
            creds = f"{quote(user, safe='')}:{quote(password, safe='')}@"
        return f"amqp://{creds}{self.host}:{self.port}/{quote(vhost, safe='')}"

    @property
    def management_url(self) -> str:
        """The management API's root (``management=True`` only)."""
        return self._with_management(self._management_url)

    @property
    def metrics_url(self) -> str:
        """Prometheus /metrics (``management=True`` only)."""
        return self._with_management(self._metrics_url)

    def _with_management(self, url: str | None) -> str:
        """One of the management plugin's URLs, once started with ``management=True``."""
        self._started()
        if url is None:
            raise RuntimeError("started without management (Broker(management=True))")
        return url

    # ------------------------------------------------------------------ time
    def advance(self, seconds: float) -> None:
        """Move a manual clock (``Broker(clock="manual")``) forward by ``seconds`` and
        let the broker act on the new time before returning: messages past their TTL
        and queues past their expiry go, delayed messages that came due are routed,
        channels past their consumer timeout are closed."""
        if not isinstance(self.clock, ManualClock):
            raise RuntimeError('advance() needs a manual clock: Broker(clock="manual")')
        self.clock.advance(seconds)
        server = self._started()
        self._call(lambda _core: server.housekeeping())

    # -------------------------------------------------------------- resources
    def set_vm_memory_high_watermark(self, value: float | str) -> None:
        """As ``rabbitmqctl set_vm_memory_high_watermark``: a fraction of the machine's
        RAM (``0.4``) or an absolute size (``"512MiB"``). The memory alarm is set or
        cleared at once: a test can see publishers blocked without filling the memory."""
        watermark = MemoryWatermark.parse(value)
        server = self._started()
        self._call(lambda _core: server.resources.set_memory_watermark(watermark))

    # -------------------------------------------------------------- administration
    def _call(self, fn: Callable[[Core], T]) -> T:
        """Run ``fn(broker core)`` on the broker's loop and return its result."""
        server = self._started()
        loop = self._loop
        assert loop is not None
        if threading.get_ident() == self._loop_thread:
            return fn(server.broker)
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not done.set_running_or_notify_cancel():
                return
            try:
                done.set_result(fn(server.broker))
            except BaseException as exc:
                done.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return done.result()

    def _definitions(self) -> dict[str, Any]:
        return self._call(lambda b: export_definitions(b, durable_only=False))

    def vhosts(self) -> list[str]:
        """The names of the broker's vhosts."""
        return self._call(lambda b: sorted(b.vhosts))

    def users(self) -> list[str]:
        """The names of the broker's users."""
        return self._call(lambda b: sorted(b.users.users))

    def add_vhost(self, name: str, description: str = "", tags: list[str] | None = None) -> None:
        """Create a vhost (as ``rabbitmqctl add_vhost``: nobody has permissions in it yet)."""
        if not name:
            raise ValueError("a vhost needs a name")

        def add(b: Core) -> None:
            b.add_vhost(name, description, tags)

        self._call(add)

    def delete_vhost(self, name: str) -> bool:
        """Delete a vhost with everything in it; its connections are closed (320
        CONNECTION_FORCED). False when there was no such vhost."""
        return self._call(lambda b: b.delete_vhost(name))

    def add_user(self, name: str, password: str, tags: list[str] | None = None) -> None:
        """Create a user, or change an existing user's password and tags."""

        def add(b: Core) -> None:
            b.add_user(name, password, list(tags or []))

        self._call(add)

    def delete_user(self, name: str) -> bool:
        """Delete a user. False when there was no such user."""

        return self._call(lambda b: b.delete_user(name))

    def set_permissions(
        self,
        user: str,
        vhost: str = "/",
        configure: str = ".*",
        write: str = ".*",
        read: str = ".*",
    ) -> None:
        """Give ``user`` these permissions (regular expressions) in ``vhost``."""
        for pattern in (configure, write, read):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc

        def grant(b: Core) -> None:
            if user not in b.users.users:
                raise ValueError(f"no user '{user}'")
            if vhost not in b.vhosts:
                raise ValueError(f"no vhost '{vhost}'")
            b.set_permissions(user, vhost, configure, write, read)

        self._call(grant)

    def clear_permissions(self, user: str, vhost: str = "/") -> bool:
        """Take ``user``'s permissions in ``vhost`` away. False when there were none."""

        return self._call(lambda b: b.clear_permissions(user, vhost))

    def reset(self) -> None:
        """Delete everything but the built-ins: every connection is closed, every vhost
        with its queues, exchanges, bindings and messages goes, and the users, vhosts and
        permissions the broker started with (``/``, guest, the config's) are made again,
        fresh. With a ``data_dir`` the stored messages and definitions go too."""
        initial = self._initial

        def reset(b: Core) -> None:
            for name in list(b.vhosts):
                b.delete_vhost(name)
            for name in list(b.users.users):
                b.delete_user(name)
            import_definitions(b, initial)

        self._call(reset)


def _entries(key: str, value: Any) -> list[Any]:
    """``users=[{"name": ..., "password": ...}]`` and the like: tables as in a config file,
    or the config's own entry objects."""
    kind = _TABLES[key]
    if not isinstance(value, list):
        raise ConfigError(f"'{key}' must be a list")
    out: list[Any] = []
    for n, item in enumerate(value, 1):
        if isinstance(item, dict):
            fields = dict(item)
            if "tags" in fields:
                tags = fields["tags"]
                fields["tags"] = tuple(
                    tags.replace(",", " ").split() if isinstance(tags, str) else tags
                )
            try:
                item = kind(**fields)
            except TypeError as exc:
                raise ConfigError(f"{key} entry {n}: {exc}") from exc
        if not isinstance(item, kind):
            raise ConfigError(f"{key} entry {n}: a table or a {kind.__name__}, not {item!r}")
        if isinstance(item, UserConfig) and item.password is None and item.password_hash is None:
            raise ConfigError(f"{key} entry {n}: needs a password or password_hash")
        out.append(item)
    return out


def _arguments_of(make: Callable[P, Broker]) -> Callable[[Callable[..., R]], Callable[P, R]]:
    """Declares that a function takes ``make``'s arguments (to type checkers, and to
    ``help()`` and ``inspect.signature``), without writing them down a second time."""

    def declare(fn: Callable[..., R]) -> Callable[P, R]:
        fn.__signature__ = inspect.signature(make).replace(  # type: ignore[attr-defined]
            return_annotation=inspect.signature(fn).return_annotation
        )
        return fn

    return declare


@_arguments_of(Broker)
@contextlib.asynccontextmanager
async def serve(*args: Any, **kwargs: Any) -> AsyncIterator[Broker]:
    """Run a broker on the running event loop for the ``async with`` block::

        async with leveret.serve() as broker:
            connection = await aio_pika.connect(broker.url)

    Takes ``Broker``'s arguments. The broker's methods (``add_vhost``, ``reset`` …) may be
    called from the loop or from other threads."""
    broker = Broker(*args, **kwargs)
    if broker.running:  # pragma: no cover - a new object
        raise RuntimeError("the broker is already running")
    await broker._astart()
    try:
        yield broker
    finally:
        await broker._astop()
