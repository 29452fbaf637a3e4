"""Server configuration: defaults as RabbitMQ's, overridden by a TOML file, then by
``LEVERET_*`` environment variables, then by command-line flags. Everything is checked
and typed when it loads; a bad file is one :class:`ConfigError` line naming what is wrong."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
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

    ENV_PREFIX = "LEVERET_"
    _TABLES = ("users", "permissions", "vhosts")

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
        names = {f.name for f in fields(self)}
        if key not in names or key in self._TABLES:
            raise ConfigError(f"unknown setting '{key}'")
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

    def apply_env(self, env: Mapping[str, str]) -> None:
        for f in fields(self):
            if f.name in self._TABLES:
                continue
            raw = env.get(self.ENV_PREFIX + f.name.upper())
            if raw is not None and raw != "":
                self.set(f.name, raw)

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
            for key, value in data.items():
                self.set(key.replace("-", "_"), value)
        except ConfigError as exc:
            raise ConfigError(f"config file {path}: {exc}") from exc


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
