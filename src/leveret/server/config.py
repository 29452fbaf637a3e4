"""Server configuration: defaults as RabbitMQ's, overridden by a TOML file, then by
``LEVERET_*`` environment variables, then by command-line flags."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


class ConfigError(Exception):
    """A configuration file or value that cannot be used."""


@dataclass
class Config:
    amqp_port: int = 5672
    # The management API and dashboard, and Prometheus's /metrics (0 picks a free port).
    http_port: int = 15672
    prometheus_port: int = 15692
    bind: str = "0.0.0.0"
    data_dir: Path = Path("leveret-data")
    frame_max: int = 131072
    channel_max: int = 2047
    heartbeat: int = 60
    # Block publishers when queued message bytes exceed this (RabbitMQ's memory alarm).
    memory_high_watermark: int = 2 * 1024 * 1024 * 1024
    users: list[dict[str, Any]] = field(default_factory=list)
    permissions: list[dict[str, Any]] = field(default_factory=list)
    vhosts: list[dict[str, Any]] = field(default_factory=list)
    default_user: bool = True  # create guest/guest on an empty broker, as RabbitMQ does

    ENV_PREFIX = "LEVERET_"

    @classmethod
    def load(
        cls, path: Path | None = None, env: dict[str, str] | None = None, **overrides: Any
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
        names = {f.name: f for f in fields(self)}
        if key not in names:
            raise ConfigError(f"unknown setting '{key}'")
        current = getattr(self, key)
        try:
            if isinstance(current, bool):
                value = (
                    value
                    if isinstance(value, bool)
                    else str(value).lower() in ("1", "true", "yes", "on")
                )
            elif isinstance(current, int):
                value = int(value)
            elif isinstance(current, Path):
                value = Path(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"invalid value for '{key}': {value!r}") from exc
        setattr(self, key, value)

    def apply_env(self, env: Any) -> None:
        for f in fields(self):
            if f.name in ("users", "permissions", "vhosts"):
                continue
            raw = env.get(self.ENV_PREFIX + f.name.upper())
            if raw is not None and raw != "":
                self.set(f.name, raw)

    def apply_file(self, path: Path) -> None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError as exc:
            raise ConfigError(f"config file not found: {path}") from exc
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
        for section in ("server", "amqp"):
            for key, value in (data.pop(section, None) or {}).items():
                self.set(key.replace("-", "_"), value)
        for key in ("users", "permissions", "vhosts"):
            items = data.pop(key, None)
            if items is not None:
                if not isinstance(items, list):
                    raise ConfigError(f"'{key}' must be a list of tables")
                getattr(self, key).extend(items)
        for key, value in data.items():
            self.set(key.replace("-", "_"), value)
