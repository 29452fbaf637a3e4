"""The node's count of login attempts, as rabbit_core_metrics keeps them
(auth_attempt_metrics, and auth_attempt_detailed_metrics when ``track_source`` is on,
rabbit.track_auth_attempt_source): per protocol ("amqp091", "amqp10", "stream", "http"), and per
remote address, user name and protocol. A connection's protocol handler tells of each
attempt through :mod:`leveret.broker.login`; management serves them at
``/api/auth/attempts/{node}`` and ``/metrics``."""

from __future__ import annotations

from typing import Any

# [total, succeeded, failed], as the ETS rows hold them
_Row = list[int]


class AuthAttempts:
    def __init__(self) -> None:
        self.track_source = False  # rabbit.track_auth_attempt_source: off by default
        self.by_protocol: dict[str, _Row] = {}
        self.by_source: dict[tuple[str, str, str], _Row] = {}

    def count(self, protocol: str, address: str, username: str, ok: bool) -> None:
        """One attempt (rabbit_core_metrics:update_auth_attempt): a source without an
        address and a user name is counted for its protocol only."""
        rows = [self.by_protocol.setdefault(protocol, [0, 0, 0])]
        if self.track_source and (address or username):
            rows.append(self.by_source.setdefault((address, username, protocol), [0, 0, 0]))
        for row in rows:
            row[0] += 1
            row[1 if ok else 2] += 1

    def overturn(self, protocol: str, address: str, username: str) -> None:
        """An attempt counted as succeeded that failed after all (the management API's
        authorisation of the resource, which RabbitMQ checks as part of the login)."""
        rows = [self.by_protocol.get(protocol)]
        if self.track_source:
            rows.append(self.by_source.get((address, username, protocol)))
        for row in rows:
            if row is not None and row[1]:
                row[1] -= 1
                row[2] += 1

    def reset(self) -> None:
        """rabbit_core_metrics:reset_auth_attempt_metrics."""
        self.by_protocol.clear()
        self.by_source.clear()

    def protocols(self) -> list[dict[str, Any]]:
        """get_auth_attempts, as the management API shows it."""
        return [_row({"protocol": p}, row) for p, row in self.by_protocol.items()]

    def sources(self) -> list[dict[str, Any]]:
        """get_auth_attempts_by_source (empty while the source is not tracked)."""
        return [
            _row({"remote_address": a, "username": u, "protocol": p}, row)
            for (a, u, p), row in self.by_source.items()
        ]


def _row(key: dict[str, Any], row: _Row) -> dict[str, Any]:
    total, succeeded, failed = row
    return {
        **key,
        "auth_attempts": total,
        "auth_attempts_failed": failed,
        "auth_attempts_succeeded": succeeded,
    }
