"""What every management handler shares: the server, its broker and the statistics,
reached from a request. Handler modules import this, never each other."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from leveret.broker.operations import Actor, check_access
from leveret.management.httputil import (
    ApiError,
    access_refused,
    current_user,
    is_admin,
    not_found,
)

if TYPE_CHECKING:
    from leveret.broker.amqp10_presence import DirectConnection
    from leveret.broker.amqp10_session import Amqp10Session
    from leveret.broker.broker import BrokerCore
    from leveret.broker.channel import Channel
    from leveret.broker.session import Session
    from leveret.broker.stream_session import StreamSession
    from leveret.broker.users import Permission, User
    from leveret.broker.vhost import VirtualHost
    from leveret.management.stats import Stats
    from leveret.server.app import Server


class Management:
    """State shared by the handlers: the server, its broker and the stats window."""

    def __init__(self, server: Server, stats: Stats) -> None:
        self.server = server
        self.broker: BrokerCore = server.broker
        self.stats = stats
        self.listeners: list[dict[str, Any]] = []

    # --------------------------------------------------------------- lookups
    def vhost(self, request: web.Request, name: str | None = None) -> VirtualHost:
        """The request's vhost as rabbit_mgmt_util:is_authorized_vhost lets a user at it:
        an administrator, or a user with permissions in it (401 for anyone else, a
        monitoring user too); 404 when there is no such vhost."""
        name = request.match_info["vhost"] if name is None else name
        v = self.broker.vhosts.get(name)
        if v is None:
            raise not_found()
        if not is_admin(request) and self.permission(request, name) is None:
            raise ApiError(401, "not_authorised", "User not authorised to access virtual host")
        return v

    def visible_vhost(self, request: web.Request) -> VirtualHost:
        """The request's vhost for the listings every management user may ask about,
        when the user can see it (404 otherwise)."""
        name = request.match_info["vhost"]
        v = self.broker.vhosts.get(name)
        if v is None or not self.can_see(request, name):
            raise not_found()
        return v

    def permission(self, request: web.Request, vhost: str) -> Permission | None:
        return self.broker.users.permission(current_user(request).name, vhost)

    def open_vhost(self, request: web.Request, v: VirtualHost) -> Permission:
        """What RabbitMQ's API checks when it opens a channel for the user (publish,
        get): access to the vhost, which an administrator without permissions lacks."""
        perm = self.permission(request, v.name)
        if perm is None:
            raise access_refused()
        return perm

    def can_see(self, request: web.Request, vhost: str) -> bool:
        if is_admin(request) or "monitoring" in current_user(request).tags:
            return True
        return self.broker.users.permission(current_user(request).name, vhost) is not None

    def visible_vhosts(self, request: web.Request) -> list[VirtualHost]:
        return [v for name, v in sorted(self.broker.vhosts.items()) if self.can_see(request, name)]

    def actor(
        self, request: web.Request, v: VirtualHost, permission: Permission | None = None
    ) -> Actor:
        """The user of a request as the broker's operations see them: their permission
        in ``v`` (or ``permission``), on no connection of their own."""
        if permission is None:
            permission = self.permission(request, v.name)
        return Actor(current_user(request).name, permission)

    def check(self, request: web.Request, v: VirtualHost, what: str, kind: str, name: str) -> None:
        """The user's permission for ``what`` (configure, write, read) on a resource, as
        AMQP checks it (an AMQPError; the middleware answers it as RabbitMQ's API does)."""
        check_access(v, self.actor(request, v), what, kind, name)

    def sessions(self, request: web.Request) -> list[Session]:
        user = current_user(request)
        everyone = is_admin(request) or "monitoring" in user.tags
        out = [s for s in self.stats.sessions() if everyone or s.username == user.name]
        return sorted(out, key=lambda s: s.name)

    def stream_sessions(self, request: web.Request) -> list[StreamSession]:
        """The open stream-protocol connections the user may see (all of them for an
        administrator or a monitoring user, their own for anyone else), by name."""
        user = current_user(request)
        everyone = is_admin(request) or "monitoring" in user.tags
        out = [s for s in self.stats.stream_sessions() if everyone or s.username == user.name]
        return sorted(out, key=lambda s: s.name)

    def amqp10(self, request: web.Request) -> list[DirectConnection | Amqp10Session]:
        """The AMQP 1.0 connections (as /api/connections lists them) the user may see,
        by name."""
        user = current_user(request)
        everyone = is_admin(request) or "monitoring" in user.tags
        out = [c for c in self.stats.amqp10() if everyone or c.username == user.name]
        return sorted(out, key=lambda c: c.name)

    def amqp10_named(self, request: web.Request) -> DirectConnection | Amqp10Session | None:
        """The AMQP 1.0 connection the path names, if it names one. A name two sessions'
        direct connections share names none: 404 (RabbitMQ 3.10.8's management
        database finds no single connection by it)."""
        name = request.match_info["name"]
        found = [c for c in self.amqp10(request) if c.name == name]
        if len(found) > 1:
            raise not_found()
        return found[0] if found else None

    def channels(self, request: web.Request) -> list[Channel]:
        return [ch for s in self.sessions(request) for _, ch in sorted(s.channels.items())]

    def user(self, request: web.Request) -> User:
        """The user the path names (``{user}``); 404 when there is none."""
        user = self.broker.users.users.get(request.match_info["user"])
        if user is None:
            raise not_found()
        return user

    def session_named(self, request: web.Request) -> Session:
        name = request.match_info["name"]
        for s in self.sessions(request):
            if s.name == name:
                return s
        raise not_found()


MANAGEMENT: web.AppKey[Management] = web.AppKey("management", Management)


def mgmt(request: web.Request) -> Management:
    return request.app[MANAGEMENT]
