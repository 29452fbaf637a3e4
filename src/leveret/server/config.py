"""Server configuration: defaults as RabbitMQ's, overridden by a TOML file, then by
``LEVERET_*`` environment variables, then by command-line flags. Everything is checked
and typed when it loads; a bad file is one :class:`ConfigError` line naming what is wrong."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from leveret.protocol import spec


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


@dataclass
class Config:
    amqp_port: int = 5672
    # The plain AMQP listener; off leaves only amqps (RabbitMQ's listeners.tcp = none).
    tcp_listener: bool = True
    # amqps: listens once a certificate is configured ([tls] certfile or --tls-cert).
    amqps_port: int = 5671
    tls: TlsConfig = field(default_factory=TlsConfig)
    # HTTPS for the management API, dashboard and metrics: with [management_tls]'s files,
    # else [tls]'s.
    http_tls: bool = False
    management_tls: TlsConfig | None = None
    # Who a client certificate logs in as with SASL EXTERNAL (RabbitMQ's key).
    ssl_cert_login_from: str = "common_name"
    # The SASL mechanisms offered; EXTERNAL only on a TLS listener that verifies peers.
    auth_mechanisms: tuple[str, ...] = ("PLAIN", "AMQPLAIN")
    max_message_size: int = spec.DEFAULT_MAX_MESSAGE_SIZE
    handshake_timeout: int = 10000  # milliseconds, as RabbitMQ's key
    # Most connections at once; more wait in the listen backlog (RabbitMQ's connection_max).
    connection_max: int | None = None
    # The management API and dashboard, and Prometheus's /metrics (0 picks a free port).
    http_port: int = 15672
    prometheus_port: int = 15692
    bind: str = "0.0.0.0"
    # Where durable state lives; None keeps everything in memory.
    data_dir: Path | None = Path("leveret-data")
    frame_max: int = spec.DEFAULT_FRAME_MAX
    channel_max: int = spec.DEFAULT_CHANNEL_MAX
    heartbeat: int = spec.DEFAULT_HEARTBEAT
    # Block publishers when queued message bytes exceed this (RabbitMQ's memory alarm).
    memory_high_watermark: int = 2 * 1024 * 1024 * 1024
    users: list[UserConfig] = field(default_factory=list)
    permissions: list[PermissionConfig] = field(default_factory=list)
    vhosts: list[VhostConfig] = field(default_factory=list)
    default_user: bool = True  # create guest/guest on an empty broker, as RabbitMQ does
    # RabbitMQ's node name (RABBITMQ_NODENAME); empty: rabbit@<short host name>
    node_name: str = ""
    # Users who may connect only from the local host (RabbitMQ's loopback_users: guest
    # by default). In a file: a list of names, "none", or a table of name = true/false
    # (as rabbitmq.conf's loopback_users.<name>); in LEVERET_LOOPBACK_USERS: names
    # separated by commas, or none.
    loopback_users: tuple[str, ...] = ("guest",)

    ENV_PREFIX = "LEVERET_"
    _TABLES = ("users", "permissions", "vhosts", "tls", "management_tls")
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
        if key not in names or key in self._TABLES:
            raise ConfigError(f"unknown setting '{key}'")
        if key == "auth_mechanisms":
            self.auth_mechanisms = _mechanisms(value)
            return
        if key == "connection_max":
            self.connection_max = _connection_max(value)
            return
        if key == "loopback_users":
            self.loopback_users = _loopback_users(value)
            return
        current = getattr(self, key)
        try:
            if isinstance(current, bool):
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
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"invalid value for '{key}': {value!r}") from exc
        setattr(self, key, value)
        self._check(key)

    def _check(self, key: str) -> None:
        """RabbitMQ's bounds on the settings that have them."""
        if key == "ssl_cert_login_from" and self.ssl_cert_login_from not in CERT_LOGIN_FROM:
            raise ConfigError(
                f"invalid value for 'ssl_cert_login_from': {self.ssl_cert_login_from!r} "
                f"(one of {', '.join(CERT_LOGIN_FROM)})"
            )
        if key == "max_message_size" and not 0 < self.max_message_size <= 536870912:
            raise ConfigError("invalid value for 'max_message_size': between 1 and 512MB")
        if key == "frame_max" and not spec.FRAME_MIN_SIZE <= self.frame_max <= 2**32 - 1:
            raise ConfigError(f"invalid value for 'frame_max': at least {spec.FRAME_MIN_SIZE}")
        if key == "channel_max" and not 0 < self.channel_max <= 65535:
            raise ConfigError("invalid value for 'channel_max': between 1 and 65535")
        if key == "handshake_timeout" and self.handshake_timeout <= 0:
            raise ConfigError("invalid value for 'handshake_timeout': a positive number of ms")
        if key in ("amqp_port", "amqps_port", "http_port", "prometheus_port") and not (
            0 <= getattr(self, key) <= 65535
        ):
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
        names = [f.name for f in fields(self) if f.name not in self._TABLES]
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
        try:
            for section in ("server", "amqp"):
                table = data.pop(section, None) or {}
                if not isinstance(table, dict):
                    raise ConfigError(f"[{section}] must be a table")
                for key, value in table.items():
                    self.set(key.replace("-", "_"), value)
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
    known = ("PLAIN", "AMQPLAIN", "EXTERNAL")
    for item in items:
        if item not in known:
            raise ConfigError(f"unknown auth mechanism '{item}' (one of {', '.join(known)})")
    return tuple(items)


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
