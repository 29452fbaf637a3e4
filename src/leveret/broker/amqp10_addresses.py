"""AMQP 1.0 addresses as RabbitMQ 4.2 reads them (rabbit_amqp_session's ensure_target and
ensure_source, rabbit_routing_parser for the v1 forms).

Version 2, RabbitMQ 4's own:

- target ``/exchanges/:exchange/:routing-key``, ``/exchanges/:exchange`` (the routing key is
  empty), ``/queues/:queue`` (the default exchange, the queue's name as key), or no address
  at all: the anonymous terminus, each message's ``to`` naming one of the two
  ``/exchanges/`` forms;
- source ``/queues/:queue``.

The names are percent-encoded (RFC 3986); the default exchange is not named
(``/exchanges/`` and ``/exchanges/amq.default`` are bad addresses).

Version 1, RabbitMQ 3.x's plugin's, which RabbitMQ 4 still accepts (deprecated feature
``amqp_address_v1``): ``/exchange/X/key``, ``/exchange/X``, ``/topic/key`` (amq.topic),
``/amq/queue/Q`` (an existing queue), ``/queue/Q`` (declared if missing), ``/queue``
(target: the message's subject is the key)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from leveret.protocol.amqp10 import definitions as d

#: the routing key a v1 target takes from each message's subject
SUBJECT = object()


class BadAddress(ValueError):
    """An address RabbitMQ refuses; the attach is refused with ``error``."""

    def __init__(self, error: d.Error) -> None:
        super().__init__(error.description)
        self.error = error


def _refused(term: str) -> BadAddress:
    return BadAddress(d.Error(d.INVALID_FIELD, f"Attach refused: {term}"))


def _binary(text: str) -> str:
    return '<<"' + text.replace("\\", "\\\\").replace('"', '\\"') + '">>'


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a publisher's messages go: an exchange (None: each message's ``to``) and a
    routing key (:data:`SUBJECT`: each message's subject); ``queue``: the queue a
    ``/queues/`` or ``/amq/queue/`` address names, which must exist; ``declare``: a v1
    ``/queue/Q`` whose queue is declared if missing."""

    exchange: str | None
    routing_key: object
    queue: str | None = None
    declare: bool = False


def parse_v2_string(address: str) -> tuple[str, str, str | None] | None:
    """(exchange, routing key, queue) of a v2 target string, None when it is not one."""
    try:
        if address.startswith("/exchanges/"):
            parts = address[len("/exchanges/") :].split("/")
            if parts[0] in ("", "amq.default") or len(parts) > 2:
                return None
            exchange = unquote(parts[0], errors="strict")
            key = unquote(parts[1], errors="strict") if len(parts) == 2 else ""
            return exchange, key, None
        if address.startswith("/queues/"):
            rest = address[len("/queues/") :]
            if not rest:
                return None
            queue = unquote(rest, errors="strict")
            return "", queue, queue
    except UnicodeDecodeError:
        return None
    return None


def is_v2(address: str | None) -> bool:
    return address is None or address.startswith(("/exchanges/", "/queues/"))


def target(address: str | None) -> Destination:
    """A publisher's target address. BadAddress when RabbitMQ refuses it."""
    if address is None:
        return Destination(None, None)  # the anonymous terminus
    if is_v2(address):
        parsed = parse_v2_string(address)
        if parsed is None:
            raise _refused("{bad_address_string," + _binary(address) + "}")
        exchange, key, queue = parsed
        return Destination(exchange, key, queue)
    return _target_v1(address)


def _string(text: str) -> str:
    """A charlist as Erlang's ~tp prints it."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_endpoint(address: str, anonymous_queue: bool) -> tuple[str, str | None, str | None]:
    """rabbit_routing_parser:parse_endpoint: (kind, name, pattern) of a v1 address, kind
    one of exchange, queue, topic, temp_queue, amqqueue; BadAddress for others."""
    parts = address.split("/")
    if len(parts) == 1:
        return "queue", _unescape(parts[0]), None
    if parts[0] == "" and parts[1] in ("exchange", "queue", "topic", "temp-queue"):
        kind, rest = parts[1].replace("-", "_"), parts[2:]
    elif parts[:3] == ["", "amq", "queue"]:
        kind, rest = "amqqueue", parts[3:]
    else:
        raise _refused("{unknown_destination," + _string(address) + "}")
    if kind == "exchange" and rest and rest[0] and len(rest) in (1, 2):
        return kind, _unescape(rest[0]), _unescape(rest[1]) if len(rest) == 2 else None
    if kind == "queue" and not rest and anonymous_queue:
        return kind, None, None
    if len(rest) == 1 and rest[0] and kind != "exchange":
        return kind, _unescape(rest[0]), None
    url = "/" + "/".join(rest) if rest else ""
    raise _refused(f"{{invalid_destination,{kind},{_string(url)}}}")


def _unescape(text: str) -> str:
    return text.replace("%2F", "/")


def _target_v1(address: str) -> Destination:
    kind, name, pattern = parse_endpoint(address, True)
    if kind == "exchange":
        assert name is not None
        return Destination(name, pattern if pattern else SUBJECT)
    if kind == "topic":
        return Destination("amq.topic", name or SUBJECT)
    if kind == "amqqueue":
        return Destination("", name, name)
    if kind == "queue":
        return Destination("", name if name else SUBJECT, name, declare=name is not None)
    raise _refused("{unknown_destination," + _string(address) + "}")


@dataclass(frozen=True, slots=True)
class Origin:
    """What a consumer reads: a queue, or (v1) a binding to make from an exchange to a
    new queue of the link's own (``exchange``, ``routing_key``), or a queue to declare."""

    queue: str | None
    exchange: str | None = None
    routing_key: str = ""
    declare: bool = False


def source(address: str | None) -> Origin:
    """A consumer's source address. BadAddress when RabbitMQ refuses it."""
    if address is None:
        raise _refused("source_required")
    if address.startswith("/queues/"):
        rest = address[len("/queues/") :]
        try:
            queue = unquote(rest, errors="strict")
        except UnicodeDecodeError:
            raise _refused("{bad_address,{utf8," + _binary(address) + "}}") from None
        if not queue:
            raise _refused("{bad_address,{utf8," + _binary(address) + "}}")
        return Origin(queue)
    kind, endpoint, pattern = parse_endpoint(address, False)
    name = endpoint
    if kind == "amqqueue":
        return Origin(name)
    if kind == "queue":
        return Origin(name, declare=True)
    if kind == "exchange":
        return Origin(None, name, pattern or "")
    if kind == "topic":
        return Origin(None, "amq.topic", name or "")
    raise _refused("{unknown_source," + _string(address) + "}")
