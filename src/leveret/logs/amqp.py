"""What the log tools share about the broker: URLs, exchange types, routing keys, and
turning a client library failure into one plain sentence."""

from __future__ import annotations

import re
import socket
from collections.abc import Sequence
from enum import StrEnum
from urllib.parse import urlsplit, urlunsplit

import pika
import pika.exceptions

DEFAULT_URL = "amqp://guest:guest@localhost:5672/"
DEFAULT_EXCHANGE = "logs"
#: basic's content-header properties in the specification's order, by the names the
#: management API (and Spark's columns) give them.
PROPERTY_NAMES = (
    "content_type",
    "content_encoding",
    "headers",
    "delivery_mode",
    "priority",
    "correlation_id",
    "reply_to",
    "expiration",
    "message_id",
    "timestamp",
    "type",
    "user_id",
    "app_id",
    "cluster_id",
)


class ExchangeType(StrEnum):
    """The exchange types the log system routes with."""

    fanout = "fanout"
    direct = "direct"
    topic = "topic"


class LogsError(Exception):
    """A failure to show as one line. ``transient`` ones (the broker went away, refused a
    connection) may pass on a retry; the others (bad URL, refused login, 406) will not."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


def routing_key(exchange_type: str, severity: str, facility: str) -> str:
    """The key a record is published with: ``severity`` for direct, ``facility.severity``
    for topic, and the severity for fanout too (ignored there, handy when bound elsewhere)."""
    if exchange_type == ExchangeType.topic:
        return f"{facility}.{severity}"
    return severity


def redact(url: str) -> str:
    """The URL with its password replaced by ``***``, fit to print (each of several
    separated by commas)."""
    if "," in url:
        return ", ".join(redact(part.strip()) for part in url.split(",") if part.strip())
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rsplit("@", 1)
        user = netloc[0].split(":", 1)[0]
        return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))
    except ValueError:
        return "<invalid URL>"


def parameters(url: str, **overrides: object) -> pika.URLParameters:
    """pika connection parameters for an ``amqp://`` or ``amqps://`` URL, or LogsError."""
    shown = redact(url)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise LogsError(f"invalid URL {shown}: {exc}") from None
    if parts.scheme not in ("amqp", "amqps"):
        raise LogsError(f"invalid URL {shown}: it must start with amqp:// or amqps://")
    if not parts.hostname:
        raise LogsError(f"invalid URL {shown}: no host")
    try:
        params = pika.URLParameters(url)
    except (ValueError, TypeError, IndexError) as exc:
        raise LogsError(f"invalid URL {shown}: {exc}") from None
    for name, value in overrides.items():
        setattr(params, name, value)
    return params


Urls = str | Sequence[str]


def split_urls(urls: Urls) -> list[str]:
    """Broker URLs, from a list or one string (separated by commas or whitespace, as an
    environment variable holds them): the nodes of one cluster, tried in order, the next
    one when a connection is lost. LogsError for none, or for any that is not valid."""
    items = [urls] if isinstance(urls, str) else list(urls)
    out: list[str] = []
    for item in items:
        parts = [u for u in re.split(r"[\s,]+", item.strip()) if u]
        if len(parts) > 1 and not all(_SCHEME.match(u) for u in parts):
            # not a list of URLs but one with spaces in it: say so of the whole of it
            raise LogsError(f"invalid URL {item.strip()!r}: it must start with amqp:// or amqps://")
        out += parts
    if not out:
        raise LogsError("no broker URL given")
    for url in out:
        parameters(url)
    return out


_SCHEME = re.compile(r"amqps?://", re.IGNORECASE)


def shown(urls: Sequence[str]) -> str:
    """URLs fit to print (passwords replaced), one or a list."""
    return ", ".join(redact(u) for u in urls)


# ConnectionClosedByBroker: (403) 'ACCESS_REFUSED - Login was refused ...'
_CLOSE_TEXT = re.compile(r"\((\d+)\) ['\"](.*)['\"]", re.S)

# Reply codes after which trying again later can work: the broker is shutting down or
# restarting (320), or it dropped the connection while busy.
_TRANSIENT_CODES = {320, 505, 541}


def _unwrap(exc: BaseException) -> BaseException:
    """The root failure inside pika's connection-workflow wrappers."""
    for _ in range(10):
        inner: object = None
        many = getattr(exc, "exceptions", None)
        if isinstance(many, tuple) and many:
            inner = many[-1]
        elif isinstance(getattr(exc, "exception", None), BaseException):
            inner = exc.exception  # type: ignore[attr-defined]
        elif (
            type(exc) is pika.exceptions.AMQPConnectionError
            and exc.args
            and isinstance(exc.args[0], BaseException)
        ):
            inner = exc.args[0]
        if not isinstance(inner, BaseException):
            return exc
        exc = inner
    return exc


def describe(exc: BaseException, url: str) -> LogsError:
    """One plain sentence for a connection or channel failure, with its retry class."""
    shown = redact(url)
    root = _unwrap(exc)
    if isinstance(root, pika.exceptions.ConnectionClosed):
        code, text = root.reply_code, root.reply_text
        if isinstance(root, pika.exceptions.ConnectionClosedByBroker):
            return LogsError(f"{shown}: {text}", transient=code in _TRANSIENT_CODES)
        return LogsError(f"connection to {shown} closed: {text}", transient=True)
    if isinstance(root, pika.exceptions.ChannelClosed):
        return LogsError(root.reply_text, transient=root.reply_code in _TRANSIENT_CODES)
    if isinstance(
        root,
        pika.exceptions.ProbableAuthenticationError | pika.exceptions.AuthenticationError,
    ):
        return LogsError(f"{shown}: {_broker_text(root) or 'login refused'}")
    if isinstance(root, pika.exceptions.ProbableAccessDeniedError):
        return LogsError(f"{shown}: {_broker_text(root) or 'access to the vhost refused'}")
    if isinstance(root, pika.exceptions.IncompatibleProtocolError):
        return LogsError(f"{shown}: the server does not speak AMQP 0-9-1")
    if isinstance(root, pika.exceptions.StreamLostError | pika.exceptions.AMQPHeartbeatTimeout):
        return LogsError(f"connection to {shown} lost", transient=True)
    if isinstance(root, socket.gaierror):
        host = urlsplit(url).hostname
        return LogsError(f"cannot connect to {shown}: unknown host {host!r}", transient=True)
    if isinstance(root, OSError):
        why = root.strerror or str(root) or type(root).__name__
        return LogsError(f"cannot connect to {shown}: {why.lower()}", transient=True)
    if isinstance(root, pika.exceptions.AMQPConnectionError):
        return LogsError(f"cannot connect to {shown}: {_text(root)}", transient=True)
    return LogsError(f"{shown}: {_text(root)}", transient=True)


def _broker_text(exc: BaseException) -> str | None:
    match = _CLOSE_TEXT.search(" ".join(str(a) for a in exc.args))
    return match.group(2) if match else None


def _text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
