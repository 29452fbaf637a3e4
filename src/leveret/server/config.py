"""Server configuration: defaults as RabbitMQ's, overridden by a TOML file, then by
``LEVERET_*`` environment variables, then by command-line flags. Everything is checked
and typed when it loads; a bad file is one :class:`ConfigError` line naming what is wrong."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from leveret.broker import compat, plugins
from leveret.protocol import spec
from leveret.server import defaults
from leveret.server.limits import (  # re-exported: the config's value types
    DiskFreeLimit,
    MemoryWatermark,
    _non_negative,
    parse_size,
)

__all__ = ["Config", "ConfigError", "DiskFreeLimit", "MemoryWatermark", "parse_size"]

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class ConfigError(Exception):
    """A configuration file or value that cannot be used."""


@dataclass(frozen=True, slots=True)
class VhostConfig:
    name: str
    description: str = ""


@dataclass(frozen=True, slots=True)
class UserConfig:
    name: str
    password: str | None = None
    password_hash: str | None = None
    tags: tuple[str, ...] = ()


TLS_VERSIONS = {"tlsv1.2": "TLSv1_2", "tlsv1.3": "TLSv1_3"}
TLS_VERIFY = ("verify_none", "verify_peer")
CERT_LOGIN_FROM = ("common_name", "distinguished_name")


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """A listener's TLS settings, with the names of RabbitMQ's ``ssl_options``."""

    certfile: Path | None = None
    keyfile: Path | None = None
    cacertfile: Path | None = None
    verify: str = "verify_none"  # verify_peer: ask for a client certificate, check it
    fail_if_no_peer_cert: bool = False  # with verify_peer: refuse a client without one
    versions: tuple[str, ...] = ("tlsv1.3", "tlsv1.2")
    ciphers: tuple[str, ...] = ()  # OpenSSL names; none: OpenSSL's defaults

    @property
    def enabled(self) -> bool:
        return self.certfile is not None


@dataclass(frozen=True, slots=True)
class PermissionConfig:
    user: str
    vhost: str = "/"
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"


_HINTS = {
    "vm_memory_high_watermark": " (a fraction of RAM up to 1.0, or a size such as 512MiB or 2GB)",
    "disk_free_limit": " (a size such as 50MB or 2GiB, or {mem_relative, 1.0})",
    "vm_memory_high_watermark_paging_ratio": " (a fraction such as 0.5)",
}


@dataclass
class Config:
    amqp_port: int = defaults.AMQP_PORT
    # The plain AMQP listener; off leaves only amqps (RabbitMQ's listeners.tcp = none).
    tcp_listener: bool = True
    # amqps: listens once a certificate is configured ([tls] certfile or --tls-cert).
    amqps_port: int = defaults.AMQPS_PORT
    # RabbitMQ's stream protocol (its rabbitmq_stream plugin); 0 picks a free port.
    stream_port: int = defaults.STREAM_PORT
    stream_listener: bool = True
    # The stream protocol over TLS, once a certificate is configured (as amqps).
    stream_tls_port: int = defaults.STREAM_TLS_PORT
    # The host a stream's metadata names (RabbitMQ's stream.advertised_host); empty: this
    # machine's name, as RabbitMQ.
    stream_advertised_host: str = ""
    tls: TlsConfig = field(default_factory=TlsConfig)
    # HTTPS for the management API, dashboard and metrics: with [management_tls]'s files,
    # else [tls]'s; peer verification only as [management_tls] asks (see http_tls_config).
    http_tls: bool = False
    management_tls: TlsConfig | None = None
    # Who a client certificate logs in as with SASL EXTERNAL (RabbitMQ's key).
    ssl_cert_login_from: str = "common_name"
    # The SASL mechanisms offered; EXTERNAL only on a TLS listener that verifies peers.
    # None: the RabbitMQ's default (PLAIN AMQPLAIN; 4.2 adds ANONYMOUS, logging in as
    # anonymous_login_user with anonymous_login_pass)
    auth_mechanisms: tuple[str, ...] | None = None
    anonymous_login_user: str = "guest"
    anonymous_login_pass: str = "guest"
    # None: the default of the RabbitMQ it behaves as (128 MiB for 3.10.8, 16 MiB for 4.2)
    max_message_size: int | None = None
    handshake_timeout: int = 10000  # milliseconds, as RabbitMQ's key
    # Most connections at once; more wait in the listen backlog (RabbitMQ's connection_max).
    connection_max: int | None = None
    # The management API and dashboard, and Prometheus's /metrics (0 picks a free port).
    http_port: int = defaults.HTTP_PORT
    prometheus_port: int = defaults.PROMETHEUS_PORT
    bind: str = "0.0.0.0"
    # Where durable state lives; None keeps everything in memory.
    data_dir: Path | None = Path("leveret-data")
    frame_max: int = spec.DEFAULT_FRAME_MAX
    channel_max: int = spec.DEFAULT_CHANNEL_MAX
    heartbeat: int = spec.DEFAULT_HEARTBEAT
    # The memory alarm: publishers are blocked while the process's resident memory is
    # above this (a fraction of RAM, or an absolute size), as RabbitMQ's.
    vm_memory_high_watermark: MemoryWatermark = field(default_factory=MemoryWatermark)
    # Classic queues page message bodies to disk from this fraction of the watermark.
    vm_memory_high_watermark_paging_ratio: float = 0.5
    # The disk alarm: publishers are blocked while the data directory's disk has less
    # free space than this.
    disk_free_limit: DiskFreeLimit = field(default_factory=DiskFreeLimit)
    users: list[UserConfig] = field(default_factory=list)
    # The file the settings were read from (absolute), as /api/nodes' config_files shows
    # it; not a setting itself.
    config_file: Path | None = None
    permissions: list[PermissionConfig] = field(default_factory=list)
    vhosts: list[VhostConfig] = field(default_factory=list)
    default_user: bool = True  # create guest/guest on an empty broker, as RabbitMQ does
    # log.exchange: the broker's log published to amq.rabbitmq.log (in vhost /), from
    # this level up (log.exchange.level)
    log_exchange: bool = False
    log_exchange_level: str = "info"
    # RabbitMQ's node name (RABBITMQ_NODENAME); empty: rabbit@<short host name>
    node_name: str = ""
    # Users who may connect only from the local host (RabbitMQ's loopback_users: guest
    # by default). In a file: a list of names, "none", or a table of name = true/false
    # (as rabbitmq.conf's loopback_users.<name>); in LEVERET_LOOPBACK_USERS: names
    # separated by commas, or none.
    loopback_users: tuple[str, ...] = ("guest",)
    # RabbitMQ's track_auth_attempt_source: count login attempts per remote address and
    # user as well as per protocol (management's /api/auth/attempts/{node}/source)
    track_auth_attempt_source: bool = False
    # Plugins enabled beyond the built-in and on-by-default ones, by RabbitMQ's names
    # (--plugins, LEVERET_PLUGINS: names separated by commas).
    plugins: tuple[str, ...] = ()
    # RabbitMQ's consumer_timeout: a channel whose oldest unacknowledged delivery is older
    # than this many milliseconds is closed (406); "infinity" turns it off.
    consumer_timeout: int | None = 1_800_000
    # RabbitMQ 3.12+'s message_interceptors.incoming: (name, overwrite) of each in force
    # (set_header_timestamp, set_header_routing_node; see leveret.broker.interceptors). In
    # a file, rabbitmq.conf's keys as TOML:
    # message_interceptors.incoming.set_header_timestamp.overwrite = false; in a flag or
    # LEVERET_MESSAGE_INTERCEPTORS: name=overwrite, separated by commas.
    message_interceptors: tuple[tuple[str, bool], ...] = ()
    # Log sources (docs/log-sources.md): syslog (RFC 5424 and 3164) over UDP and TCP on
    # this port, off by default (None; "off" in a file or LEVERET_SYSLOG_PORT; 0 picks a
    # free port); OpenTelemetry's OTLP/HTTP POST /v1/logs on the management listener. Both
    # publish into this exchange of this vhost (declared as emit-log does when missing).
    syslog_port: int | None = None
    otlp_logs: bool = True
    log_sources_vhost: str = "/"
    log_sources_exchange: str = "logs"
    # The RabbitMQ Leveret behaves as: "3.10.8" (the default) or "4.2" (see
    # leveret.broker.compat and docs/compatibility.md).
    rabbitmq_version: str = compat.DEFAULT_SERIES
    # RabbitMQ 4's deprecated_features.permit.<name> = true|false, as (name, permitted); in a
    # file the TOML table [deprecated_features.permit], in LEVERET_DEPRECATED_FEATURES
    # name=true|false separated by commas. Only with rabbitmq_version = "4.2".
    deprecated_features: tuple[tuple[str, bool], ...] = ()

    ENV_PREFIX = "LEVERET_"

    def compat(self) -> compat.RabbitMQ:
        """The RabbitMQ the broker behaves as, with the deprecated features the
        configuration permits or denies; ConfigError when they do not go together (a
        permit setting with 3.10.8, a frame_max below 4.2's minimum)."""
        try:
            rabbit = compat.rabbitmq(self.rabbitmq_version, self.deprecated_features)
        except compat.CompatError as exc:
            raise ConfigError(str(exc)) from exc
        if self.frame_max < rabbit.frame_min_size:
            raise ConfigError(
                f"invalid value for 'frame_max': at least {rabbit.frame_min_size} "
                f"(RabbitMQ {rabbit.version}'s minimum)"
            )
        if not rabbit.v4 and "ANONYMOUS" in (self.auth_mechanisms or ()):
            raise ConfigError(
                "unknown auth mechanism 'ANONYMOUS' (it came with RabbitMQ 4.0; set "
                'rabbitmq_version = "4.2")'
            )
        return rabbit

    def mechanisms(self) -> tuple[str, ...]:
        """The SASL mechanisms offered: the configured ones, else the RabbitMQ's default
        (rabbit's auth_mechanisms: 4.x adds ANONYMOUS)."""
        if self.auth_mechanisms is not None:
            return self.auth_mechanisms
        return self.compat().auth_mechanisms

    def message_size_limit(self) -> int:
        """max_message_size in force: the configured one, else the RabbitMQ's default."""
        if self.max_message_size is not None:
            return self.max_message_size
        return self.compat().max_message_size

    def http_tls_config(self) -> tuple[TlsConfig, str]:
        """The HTTPS listeners' TLS settings and the table they come from. As RabbitMQ's
        ``management.ssl.*``, they are [management_tls]'s own, its files defaulting to
        [tls]'s; client certificates are asked for only when [management_tls] says
        ``verify = "verify_peer"``. The AMQP listener's ``verify_peer`` and
        ``fail_if_no_peer_cert`` are not the dashboard's: a browser has no client
        certificate to show."""
        base = self.tls
        own = self.management_tls
        if own is None:
            return replace(base, verify="verify_none", fail_if_no_peer_cert=False), "tls"
        return (
            replace(
                own,
                certfile=own.certfile or base.certfile,
                keyfile=own.keyfile or (base.keyfile if own.certfile is None else None),
                cacertfile=own.cacertfile or base.cacertfile,
            ),
            "management_tls",
        )

    _TABLES = ("users", "permissions", "vhosts", "tls", "management_tls")
    # Fields no file, flag or variable sets.
    _NOT_SETTINGS = (*_TABLES, "config_file")
    # Flat names for the [tls] table's keys, as flags and LEVERET_* variables take them.
    _TLS_FLAT = {
        "tls_cert": "certfile",
        "tls_key": "keyfile",
        "tls_ca": "cacertfile",
        "tls_verify_peer": "verify",
        "tls_fail_if_no_peer_cert": "fail_if_no_peer_cert",
    }

    @classmethod
    def load(
        cls, path: Path | None = None, env: Mapping[str, str] | None = None, **overrides: Any
    ) -> Config:
        config = cls()
        if path is not None:
            config.apply_file(path)
        config.apply_env(os.environ if env is None else env)
        for key, value in overrides.items():
            if value is not None:
                config.set(key, value)
        return config

    def set(self, key: str, value: Any) -> None:
        if key in self._TLS_FLAT:
            self._set_tls_flat(key, value)
            return
        names = {f.name for f in fields(self)}
        if key not in names or key in self._NOT_SETTINGS:
            raise ConfigError(f"unknown setting '{key}'")
        parse = _PARSERS.get(key)
        if parse is not None:  # a setting with a reader of its own
            setattr(self, key, parse(value))
            return
        current = getattr(self, key)
        try:
            if key == "vm_memory_high_watermark":
                value = MemoryWatermark.parse(value)
            elif key == "disk_free_limit":
                value = DiskFreeLimit.parse(value)
            elif key == "vm_memory_high_watermark_paging_ratio":
                value = _non_negative(value)
            elif isinstance(current, bool):
                if isinstance(value, bool):
                    pass
                elif str(value).lower() in ("1", "true", "yes", "on"):
                    value = True
                elif str(value).lower() in ("0", "false", "no", "off"):
                    value = False
                else:
                    raise ValueError(value)
            elif isinstance(current, int):
                if isinstance(value, bool):
                    raise ValueError(value)
                value = int(value)
            elif key == "data_dir":
                value = Path(value)
            elif isinstance(current, str) and not isinstance(value, str):
                raise ValueError(value)
            if key == "log_exchange_level" and value not in LOG_LEVELS:
                raise ValueError(value)
        except (TypeError, ValueError) as exc:
            hint = _HINTS.get(key, "")
            raise ConfigError(f"invalid value for '{key}': {value!r}{hint}") from exc
        setattr(self, key, value)
        self._check(key)

    def _check(self, key: str) -> None:
        """RabbitMQ's bounds on the settings that have them."""
        if key == "ssl_cert_login_from" and self.ssl_cert_login_from not in CERT_LOGIN_FROM:
            raise ConfigError(
                f"invalid value for 'ssl_cert_login_from': {self.ssl_cert_login_from!r} "
                f"(one of {', '.join(CERT_LOGIN_FROM)})"
            )
        if key == "frame_max" and not spec.FRAME_MIN_SIZE <= self.frame_max <= 2**32 - 1:
            raise ConfigError(f"invalid value for 'frame_max': at least {spec.FRAME_MIN_SIZE}")
        if key == "channel_max" and not 0 < self.channel_max <= 65535:
            raise ConfigError("invalid value for 'channel_max': between 1 and 65535")
        if key in ("log_sources_vhost", "log_sources_exchange") and not getattr(self, key):
            raise ConfigError(f"invalid value for '{key}': a name, not empty")
        if key == "handshake_timeout" and self.handshake_timeout <= 0:
            raise ConfigError("invalid value for 'handshake_timeout': a positive number of ms")
        if key in (
            "amqp_port",
            "amqps_port",
            "stream_port",
            "stream_tls_port",
            "http_port",
            "prometheus_port",
        ) and not (0 <= getattr(self, key) <= 65535):
            raise ConfigError(f"invalid value for '{key}': a port number (0 picks a free one)")

    def _set_tls_flat(self, key: str, value: Any) -> None:
        name = self._TLS_FLAT[key]
        if name == "certfile":
            self.tls = replace(self.tls, certfile=Path(str(value)))
            return
        if name == "keyfile":
            self.tls = replace(self.tls, keyfile=Path(str(value)))
            return
        if name == "cacertfile":
            self.tls = replace(self.tls, cacertfile=Path(str(value)))
            return
        flag = _flag(key, value)
        if name == "verify":
            self.tls = replace(self.tls, verify="verify_peer" if flag else "verify_none")
        else:
            self.tls = replace(self.tls, fail_if_no_peer_cert=flag)

    def apply_env(self, env: Mapping[str, str]) -> None:
        names = [f.name for f in fields(self) if f.name not in self._NOT_SETTINGS]
        for name in [*names, *self._TLS_FLAT]:
            raw = env.get(self.ENV_PREFIX + name.upper())
            if raw is not None and raw != "":
                self.set(name, raw)

    def apply_file(self, path: Path) -> None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError as exc:
            raise ConfigError(f"config file not found: {path}") from exc
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
        self.config_file = Path(path).absolute()
        try:
            for section in ("server", "amqp", "log"):
                table = data.pop(section, None) or {}
                if not isinstance(table, dict):
                    raise ConfigError(f"[{section}] must be a table")
                for key, value in table.items():
                    # [log] exchange / exchange_level, as rabbitmq.conf's log.exchange...
                    prefix = "log_" if section == "log" else ""
                    self.set(prefix + key.replace("-", "_").replace(".", "_"), value)
            self.vhosts.extend(_entries(data.pop("vhosts", None), "vhosts", _vhost))
            self.users.extend(_entries(data.pop("users", None), "users", _user))
            self.permissions.extend(
                _entries(data.pop("permissions", None), "permissions", _permission)
            )
            for table in ("tls", "management_tls"):
                raw = data.pop(table, None)
                if raw is not None:
                    if not isinstance(raw, dict):
                        raise ConfigError(f"[{table}] must be a table")
                    try:
                        setattr(self, table, _tls(dict(raw)))
                    except ConfigError as exc:
                        raise ConfigError(f"[{table}]: {exc}") from exc
            # [lake] (compaction, retention, alert rules) is read by leveret up and the
            # pipeline, not by the broker
            data.pop("lake", None)
            for key, value in data.items():
                self.set(key.replace("-", "_"), value)
        except ConfigError as exc:
            raise ConfigError(f"config file {path}: {exc}") from exc


def _loopback_users(value: Any) -> tuple[str, ...]:
    """RabbitMQ's loopback_users, as a list, "none", a comma-separated string or a table
    of name = true/false (only the names set true are loopback users, as rabbitmq.conf's
    loopback_users.<name> entries make the list)."""
    if isinstance(value, str):
        if value.strip() == "none":
            return ()
        return tuple(n.strip() for n in value.split(",") if n.strip())
    if isinstance(value, list) and all(isinstance(n, str) for n in value):
        return tuple(value)
    if isinstance(value, dict) and all(isinstance(v, bool) for v in value.values()):
        return tuple(name for name, on in value.items() if on)
    raise ConfigError(
        "invalid value for 'loopback_users': a list of user names, \"none\", or a table "
        f"of name = true/false, not {value!r}"
    )


def _entries(items: Any, table: str, parse: Any) -> list[Any]:
    if items is None:
        return []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ConfigError(f"'{table}' must be a list of tables ([[{table}]])")
    out = []
    for n, item in enumerate(items, 1):
        try:
            out.append(parse(dict(item)))
        except ConfigError as exc:
            raise ConfigError(f"[[{table}]] entry {n}: {exc}") from exc
    return out


def _take_str(item: dict[str, Any], key: str, default: str | None = None) -> str | None:
    value = item.pop(key, default)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"'{key}' must be a string")
    return value


def _no_more(item: dict[str, Any]) -> None:
    if item:
        raise ConfigError(f"unknown key '{sorted(item)[0]}'")


def _vhost(item: dict[str, Any]) -> VhostConfig:
    name = _take_str(item, "name")
    if name is None:
        raise ConfigError("needs a name")
    description = _take_str(item, "description", "") or ""
    _no_more(item)
    return VhostConfig(name, description)


def _user(item: dict[str, Any]) -> UserConfig:
    name = _take_str(item, "name")
    password = _take_str(item, "password")
    password_hash = _take_str(item, "password_hash")
    if name is None or (password is None and password_hash is None):
        raise ConfigError("needs a name and a password or password_hash")
    tags = item.pop("tags", [])
    if isinstance(tags, str):
        tags = [t for t in tags.replace(",", " ").split() if t]
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ConfigError("'tags' must be a list of strings")
    _no_more(item)
    return UserConfig(name, password, password_hash, tuple(tags))


def _permission(item: dict[str, Any]) -> PermissionConfig:
    user = _take_str(item, "user")
    if user is None:
        raise ConfigError("needs a user")
    out = PermissionConfig(
        user,
        _take_str(item, "vhost", "/") or "/",
        _take_str(item, "configure", ".*") or "",
        _take_str(item, "write", ".*") or "",
        _take_str(item, "read", ".*") or "",
    )
    _no_more(item)
    return out


def _flag(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"invalid value for '{key}': {value!r}")


def _mechanisms(value: Any) -> tuple[str, ...]:
    items = value.replace(",", " ").split() if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
        raise ConfigError("invalid value for 'auth_mechanisms': a list of mechanism names")
    known = ("PLAIN", "AMQPLAIN", "EXTERNAL", "ANONYMOUS")
    for item in items:
        if item not in known:
            raise ConfigError(f"unknown auth mechanism '{item}' (one of {', '.join(known)})")
    return tuple(items)


def _consumer_timeout(value: Any) -> int | None:
    """A positive number of milliseconds (RabbitMQ's validator), or "infinity": none."""
    if value in (None, "infinity", "undefined"):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"invalid value for 'consumer_timeout': {value!r} (milliseconds, or infinity)"
        ) from exc
    if number <= 0 or isinstance(value, bool):
        raise ConfigError("invalid value for 'consumer_timeout': a positive number of ms")
    return number


def _bad(key: str, why: str) -> ConfigError:
    return ConfigError(f"invalid value for '{key}': {why}")


def _named_flags(
    key: str,
    value: Any,
    table: str,
    *,
    not_table: str,
    known: Collection[str],
    unknown: Callable[[str], str],
    entry: Callable[[str, Any], Any] = lambda name, item: item,
    suffix: str = "",
) -> tuple[tuple[str, bool], ...]:
    """``key``'s flags by name, from ``name=true,...`` or a TOML table ``{<table> =
    {<name> = <entry>}}`` (``entry`` takes the flag out of one, or refuses it); each name
    one of ``known`` (else ``unknown(name)`` says why not), each flag read by :func:`_flag`
    as ``key.table.<name><suffix>``."""
    pairs: list[tuple[str, Any]] = []
    if isinstance(value, str):
        for item in (i.strip() for i in value.split(",")):
            if item:
                name, sep, flag = item.partition("=")
                if not sep:
                    raise _bad(key, f"{item!r}: name=true or name=false")
                pairs.append((name.strip(), flag.strip()))
    elif isinstance(value, dict) and set(value) <= {table}:
        entries = value.get(table, {})
        if not isinstance(entries, dict):
            raise _bad(key, not_table)
        pairs.extend((name, entry(name, item)) for name, item in entries.items())
    else:
        raise _bad(key, f"a table {key}.{table}.<name>{suffix} = true|false")
    out: dict[str, bool] = {}
    for name, flag in pairs:
        if name not in known:
            raise _bad(key, unknown(name))
        out[name] = _flag(f"{key}.{table}.{name}{suffix}", flag)
    return tuple(out.items())


def _plugins(value: Any) -> tuple[str, ...]:
    try:
        return plugins.parse(value)
    except (plugins.UnknownPlugin, TypeError) as exc:
        raise ConfigError(str(exc)) from exc


def _interceptors(value: Any) -> tuple[tuple[str, bool], ...]:
    """rabbitmq.conf's message_interceptors.incoming.<name>.overwrite entries, as a TOML
    table ``{incoming = {<name> = {overwrite = true}}}`` or ``name=true,...``."""
    from leveret.broker.interceptors import NAMES

    def overwrite(name: str, entry: Any) -> Any:
        if not isinstance(entry, dict) or set(entry) != {"overwrite"}:
            raise _bad(
                "message_interceptors",
                f"message_interceptors.incoming.{name} takes overwrite = true|false",
            )
        return entry["overwrite"]

    return _named_flags(
        "message_interceptors",
        value,
        "incoming",
        not_table="message_interceptors.incoming must be a table",
        known=NAMES,
        unknown=lambda name: f"{name} is invalid (one of {', '.join(NAMES)})",
        entry=overwrite,
        suffix=".overwrite",
    )


def _optional_port(key: str, value: Any) -> int | None:
    """A port number (0 picks a free one), or off: None, "off", "none", false."""
    if (
        value is None
        or value is False
        or (isinstance(value, str) and value.strip().lower() in ("off", "none", "false", "no"))
    ):
        return None
    try:
        if isinstance(value, bool):
            raise ValueError(value)
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if not 0 <= number <= 65535:
        raise ConfigError(
            f"invalid value for '{key}': {value!r} (a port number, 0 picks a free one; or off)"
        )
    return number


def _series(value: Any) -> str:
    """rabbitmq_version: "3.10.8" or "4.2" (a TOML number 4.2 is taken as "4.2")."""
    text = str(value) if isinstance(value, (str, float)) else None
    if text not in compat.SERIES:
        raise ConfigError(
            f"invalid value for 'rabbitmq_version': {value!r} (one of {', '.join(compat.SERIES)})"
        )
    return text


def _deprecated_features(value: Any) -> tuple[tuple[str, bool], ...]:
    """rabbitmq.conf's deprecated_features.permit.<name> = true|false, as a TOML table
    ``{permit = {<name> = true}}`` or ``name=true,...``; each name one RabbitMQ 4.2
    knows."""
    known = compat.DEPRECATED_FEATURES_4_2
    return _named_flags(
        "deprecated_features",
        value,
        "permit",
        not_table="deprecated_features.permit must be a table of name = true|false",
        known=known,
        unknown=lambda name: (
            f"{name} is no deprecated feature of RabbitMQ 4.2 (one of {', '.join(sorted(known))})"
        ),
    )


def _max_message_size(value: Any) -> int:
    """Bytes, between 1 and 512 MiB (rabbit.schema's max_message_size validator)."""
    try:
        if isinstance(value, bool):
            raise ValueError(value)
        number = int(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid value for 'max_message_size': {value!r}") from exc
    if not 0 < number <= 536870912:
        raise ConfigError("invalid value for 'max_message_size': between 1 and 512MB")
    return number


def _connection_max(value: Any) -> int | None:
    if value in (None, "infinity"):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid value for 'connection_max': {value!r}") from exc
    if number < 0 or isinstance(value, bool):
        raise ConfigError("invalid value for 'connection_max': a non-negative integer")
    return number


#: The settings read by a function of their own (the others by their type, in Config.set).
_PARSERS: dict[str, Callable[[Any], Any]] = {
    "auth_mechanisms": _mechanisms,
    "connection_max": _connection_max,
    "loopback_users": _loopback_users,
    "plugins": _plugins,
    "consumer_timeout": _consumer_timeout,
    "message_interceptors": _interceptors,
    "syslog_port": lambda value: _optional_port("syslog_port", value),
    "rabbitmq_version": _series,
    "deprecated_features": _deprecated_features,
    "max_message_size": _max_message_size,
}


def _tls(item: dict[str, Any]) -> TlsConfig:
    out: dict[str, Any] = {}
    for name in ("certfile", "keyfile", "cacertfile"):
        value = _take_str(item, name)
        if value is not None:
            out[name] = Path(value)
    verify = _take_str(item, "verify", "verify_none") or "verify_none"
    if verify not in TLS_VERIFY:
        raise ConfigError(f"'verify' must be one of {', '.join(TLS_VERIFY)}")
    out["verify"] = verify
    fail = item.pop("fail_if_no_peer_cert", False)
    if not isinstance(fail, bool):
        raise ConfigError("'fail_if_no_peer_cert' must be true or false")
    out["fail_if_no_peer_cert"] = fail
    versions = item.pop("versions", ["tlsv1.3", "tlsv1.2"])
    if not isinstance(versions, list) or not versions:
        raise ConfigError('\'versions\' must be a list, such as ["tlsv1.3", "tlsv1.2"]')
    for version in versions:
        if version not in TLS_VERSIONS:
            raise ConfigError(
                f"unsupported TLS version {version!r} (one of {', '.join(TLS_VERSIONS)})"
            )
    out["versions"] = tuple(versions)
    ciphers = item.pop("ciphers", [])
    if not isinstance(ciphers, list) or not all(isinstance(c, str) for c in ciphers):
        raise ConfigError("'ciphers' must be a list of OpenSSL cipher names")
    out["ciphers"] = tuple(ciphers)
    _no_more(item)
    return TlsConfig(**out)
