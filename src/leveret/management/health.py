"""RabbitMQ 3.10.8's health checks beyond the alarms (those are in :mod:`.api`): virtual
hosts, mirror-sync and quorum criticality, a listener on a port or for a protocol, the
listeners' certificates' expiry, and the deprecated ``/api/healthchecks/node``. Each answers
as its ``rabbit_mgmt_wm_health_check_*`` (``rabbit_mgmt_wm_healthchecks``) resource does:
any management user may ask (``rabbit_mgmt_util:is_authorized``), a pass is 200, a failure
503 with the reply's body and headers (``cache-control`` included), bad input a 400."""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from cryptography import x509

from leveret.management.context import MANAGEMENT, Management, mgmt
from leveret.management.httputil import (
    bad_request,
    check_failed,
    json_response,
    not_found,
    resource,
)


def crashed() -> web.Response:
    """What Cowboy answers when a resource's handler crashes: an empty 500."""
    return web.Response(status=500)


# ------------------------------------------------------------------ listeners
@dataclass(frozen=True, slots=True)
class Listener:
    """One of Leveret's listeners as RabbitMQ's ``#listener{}`` record has it: protocol,
    address and port as bound, and the ``certfile``/``cacertfile`` in its options."""

    protocol: str
    ip_address: str
    port: int
    certfile: Path | None = None
    cacertfile: Path | None = None


# The order of RabbitMQ's rabbit_networking:active_listeners(): rabbit_listener is an
# mnesia bag keyed by node, read back in the order its records were written. The plugins'
# listeners are written as the plugins start (management's http, the stream plugin's
# stream then stream/ssl, the prometheus plugin's: the reference node's order), and the
# 'networking' boot step runs at the very end of start-up (rabbit.erl): clustering, then
# AMQP's TCP listeners, then its TLS ones. Leveret has no clustering listener; its syslog
# listener (none in RabbitMQ) comes last.
_RANK = {
    "http": 0,
    "https": 0,
    "stream": 1,
    "stream/ssl": 1,
    "http/prometheus": 2,
    "https/prometheus": 2,
    "amqp": 3,
    "amqp/ssl": 4,
}


def listeners(m: Management) -> list[Listener]:
    """Leveret's listeners (those it bound: the management app's list), in RabbitMQ's
    order, with the certificate files RabbitMQ's check would find in their options: AMQP's
    and the stream plugin's TLS listeners have ``ssl_options`` among theirs, and so has
    prometheus' HTTPS one (its ``ssl_config`` is its listener); the management HTTPS
    listener keeps its files under ``ssl_opts``, where the check does not look."""
    config = m.server.config
    files: dict[str, tuple[Path | None, Path | None]] = {
        "amqp/ssl": (config.tls.certfile, config.tls.cacertfile),
        "stream/ssl": (config.tls.certfile, config.tls.cacertfile),
    }
    if config.http_tls:
        http_tls = config.http_tls_config()[0]
        files["https/prometheus"] = (http_tls.certfile, http_tls.cacertfile)
    out = []
    for each in m.listeners:
        protocol = str(each["protocol"])
        certfile, cacertfile = files.get(protocol, (None, None))
        out.append(
            Listener(protocol, str(each["ip_address"]), int(each["port"]), certfile, cacertfile)
        )
    return sorted(out, key=lambda each: _RANK.get(each.protocol, len(_RANK)))


def binding(request: web.Request, name: str) -> str:
    """A segment the path binds. Cowboy drops a ``.`` or ``..`` segment (and the one
    before a ``..``) before routing, so such a path reaches no check but RabbitMQ's static
    files: 404 (``/api/healthchecks/node/.`` is the node's own check)."""
    value = request.match_info[name]
    if value in (".", ".."):
        raise web.HTTPNotFound()  # the middleware answers it as the router's 404
    return value


# --------------------------------------------------------------------- checks
async def virtual_hosts(request: web.Request) -> web.Response:
    """rabbit_vhost_sup_sup:check() fails on the vhosts whose supervisor or message stores
    are down ("Some virtual hosts are down"). A Leveret vhost is an object of its broker
    with no process or store of its own to go down: while the API answers, every vhost is
    up, so the check passes."""
    return json_response({"status": "ok"})


async def single_node(request: web.Request) -> web.Response:
    """node-is-mirror-sync-critical and node-is-quorum-critical: a node alone in its
    cluster (rabbit_nodes:is_single_node_cluster), as a Leveret node always is, passes."""
    return json_response({"status": "ok", "reason": "single node cluster"})


async def port_listener(request: web.Request) -> web.Response:
    port = _erlang_integer(binding(request, "port"))
    if port is None:
        raise bad_request("Invalid port")
    return _listening(request, "port", port)


async def protocol_listener(request: web.Request) -> web.Response:
    return _listening(request, "protocol", normalize_protocol(binding(request, "protocol")))


def _listening(request: web.Request, field: str, wanted: int | str) -> web.Response:
    """ok when one of the node's listeners has ``wanted`` as its ``field`` (port or
    protocol); else the 503 that names what is missing and what there is."""
    there = [getattr(each, field) for each in listeners(mgmt(request))]
    if wanted in there:
        return json_response({"status": "ok", field: wanted})
    return check_failed(
        {"status": "failed", "reason": "No active listener", "missing": wanted, f"{field}s": there}
    )


# rabbit_mgmt_wm_health_check_protocol_listener:normalize_protocol/1's other names for a
# protocol (the name asked for is lower-cased first; any other name stands for itself)
_SYNONYMS: dict[str, str] = {
    "amqp": "amqp091 amqp0.9.1 amqp0-9-1 amqp0_9_1 amqp10 amqp1.0 amqp1-0 amqp1_0",
    "amqp/ssl": "amqps",
    "mqtt": "mqtt3.1 mqtt3.1.1 mqtt31 mqtt311 mqtt3_1 mqtt3_1_1",
    "mqtt/ssl": "mqtts mqtt+tls mqtt+ssl",
    "stomp": "stomp1.0 stomp1.1 stomp1.2 stomp10 stomp11 stomp12 stomp1_0 stomp1_1 stomp1_2",
    "stomp/ssl": "stomps stomp+tls stomp+ssl",
    "http": "http1 http1.1 http_api management management_ui ui",
    "clustering": "cli distribution",
    "http/web-mqtt": "webmqtt web-mqtt web_mqtt",
    "https/web-mqtt": "webmqtt/tls web-mqtt/tls webmqtt/ssl web-mqtt/ssl"
    " webmqtt+tls web-mqtt+tls webmqtt+ssl web-mqtt+ssl",
    "http/web-stomp": "webstomp web-stomp web_stomp",
    "https/web-stomp": "webstomp/tls web-stomp/tls webstomp/ssl web-stomp/ssl"
    " webstomp+tls web-stomp+tls webstomp+ssl web-stomp+ssl",
}
_NORMAL = {alias: name for name, aliases in _SYNONYMS.items() for alias in aliases.split()}


def normalize_protocol(name: str) -> str:
    """The protocol a name in the path stands for, as RabbitMQ reads it."""
    lowered = name.lower()
    return _NORMAL.get(lowered, lowered)


# ------------------------------------------------------- certificate expiry
_DAY = 86400
# seconds in each unit the check takes (a month is a twelfth of a 365-day year)
_UNITS = {"days": _DAY, "weeks": _DAY * 7, "months": _DAY * (365 / 12), "years": _DAY * 365}
_UNIT_ERROR = "Time unit not recognised. Supported units: days, weeks, months, years."


def _erlang_integer(text: str) -> int | None:
    """binary_to_integer/1: an optional sign and decimal digits, nothing else."""
    return int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else None


async def certificate_expiration(request: web.Request) -> web.Response:
    """Fails when a certificate in a listener's ``certfile`` or ``cacertfile`` expires
    within the window, listing those listeners (the last one first, as RabbitMQ folds
    them) with the expiry dates of the certificates that do."""
    within = _erlang_integer(binding(request, "within"))
    factor = _UNITS.get(binding(request, "unit").lower())
    if within is None:
        raise bad_request("Invalid expiration value.")
    if factor is None:
        raise bad_request(_UNIT_ERROR)
    m = mgmt(request)
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0, tzinfo=None)
    try:
        limit = now + datetime.timedelta(seconds=within * factor)
    except OverflowError:  # a window past the calendar's end (Erlang's integers have none)
        limit = datetime.datetime.max if within > 0 else datetime.datetime.min
    expiring: list[dict[str, Any]] = []
    for each in listeners(m):
        certfile = _expiring(each.certfile, now, limit)
        cacertfile = _expiring(each.cacertfile, now, limit)
        if not certfile and not cacertfile:
            continue
        if each.certfile is None or each.cacertfile is None or None in certfile + cacertfile:
            # RabbitMQ's check crashes on a listener without one of the two files, and on a
            # certificate not valid yet (it cannot print its error as a date)
            return crashed()
        # the keys in the order an Erlang map of atoms has them
        expiring.insert(
            0,
            {
                "cacertfile": str(each.cacertfile),
                "cacertfile_expires_on": [_date(d) for d in cacertfile if d is not None],
                "certfile": str(each.certfile),
                "certfile_expires_on": [_date(d) for d in certfile if d is not None],
                "interface": each.ip_address,
                "node": m.broker.node_name,
                "port": each.port,
                "protocol": each.protocol,
            },
        )
    if expiring:
        return check_failed(
            {"status": "failed", "reason": "Certificates expiring", "expired": expiring}
        )
    return json_response({"status": "ok"})


def _expiring(
    path: Path | None, now: datetime.datetime, limit: datetime.datetime
) -> list[datetime.datetime | None]:
    """The expiry dates before ``limit`` of the certificates in a PEM file (None for one
    not valid yet, which RabbitMQ counts as expiring); none for no file. The file is read
    again at each check, as RabbitMQ reads it: a certificate renewed in place counts."""
    if path is None:
        return []
    try:
        certificates = x509.load_pem_x509_certificates(path.read_bytes())
    except (OSError, ValueError):
        return [None]  # unreadable now: RabbitMQ's check fails on it too
    out: list[datetime.datetime | None] = []
    for cert in certificates:
        if cert.not_valid_before_utc.replace(tzinfo=None) > now:
            out.append(None)
            continue
        expires = cert.not_valid_after_utc.replace(tzinfo=None)
        if expires < limit:
            out.append(expires)
    return out


def _date(when: datetime.datetime) -> str:
    """calendar's date as the check prints it: ``~w-~2.2.0w-~2.2.0w ~w:~2.2.0w:~2.2.0w``."""
    return f"{when:%Y-%m-%d} {when.hour}:{when:%M:%S}"


# ------------------------------------------------------ /api/healthchecks/node
async def node_check(request: web.Request) -> web.Response:
    """rabbit_health_check:local(): channels and queues can be listed (a Leveret broker
    always can), no resource alarm in effect, no partition (a single node has none)."""
    m = mgmt(request)
    name = request.match_info.get("node", ".")
    if name == "..":
        raise web.HTTPNotFound()  # (see binding)
    if name not in (".", m.broker.node_name):
        raise not_found()
    timeout = request.headers.get("timeout")
    if timeout is not None and _erlang_integer(timeout) is None:
        return crashed()  # list_to_integer/1 fails on it
    alarms = m.server.state.alarms
    if alarms:
        in_effect = [key for key in ("disk", "memory") if key in alarms]
        reason = alarm_reason(m.broker.node_name, in_effect)
        return check_failed({"status": "failed", "reason": reason})
    return json_response({"status": "ok"})


_PREFIX = "resource alarm(s) in effect:"
_FITS = 78  # the widest line io_lib:format's ~p leaves whole here (checked against erl)


def alarm_reason(node: str, resources: Sequence[str]) -> str:
    """rabbit_health_check's words for alarms in effect: ``~p`` of rabbit:alarms() (a
    ``{resource_limit, Resource, Node}`` each) after the prefix, laid out as io_lib_pretty
    lays it out from that column, HTML tags escaped."""
    atom = _atom(node)
    items = [f"{{resource_limit,{resource},{atom}}}" for resource in resources]
    flat = f"{_PREFIX}[{','.join(items)}]"
    if len(flat) <= _FITS:
        return _escape_html_tags(flat)
    # one element a line, under the first; one too wide breaks after its resource
    column = len(_PREFIX) + 1
    lines = []
    for i, (kind, item) in enumerate(zip(resources, items, strict=True)):
        last = i == len(items) - 1
        closer = "]" if last else ","
        # a line that ends the list fits as the whole does; one that goes on, a column wider
        if column + len(item) + 1 <= (_FITS if last else _FITS + 1):
            lines.append(item + closer)
        else:
            indent = " " * (column + 4)
            lines.append(f"{{resource_limit,{kind},\n{indent}{atom}}}{closer}")
    return _escape_html_tags(_PREFIX + "[" + ("\n" + " " * column).join(lines))


def _atom(name: str) -> str:
    """An atom as ``~p`` writes it: bare when it may be, quoted otherwise."""
    if re.fullmatch(r"[a-z][A-Za-z0-9_@]*", name):
        return name
    return "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _escape_html_tags(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def routes(app: web.Application) -> None:
    """RabbitMQ 3.10.8's paths (rabbit_mgmt_dispatcher). RabbitMQ 4 has no mirrored
    queues, nor their check."""
    r = app.router
    management = app.get(MANAGEMENT)  # (none: the routes alone are asked for)
    if management is None or not management.broker.compat.v4:
        resource(r, "/api/health/checks/node-is-mirror-sync-critical", single_node)
    for path, get in (
        ("/api/health/checks/virtual-hosts", virtual_hosts),
        ("/api/health/checks/node-is-quorum-critical", single_node),
        ("/api/health/checks/port-listener/{port}", port_listener),
        ("/api/health/checks/protocol-listener/{protocol}", protocol_listener),
        ("/api/health/checks/certificate-expiration/{within}/{unit}", certificate_expiration),
        ("/api/healthchecks/node", node_check),
        ("/api/healthchecks/node/{node}", node_check),
    ):
        resource(r, path, get)
