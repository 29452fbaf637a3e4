"""What a consumer's attach asks of its queue beyond the address, as RabbitMQ 4.2 reads it
(rabbit_amqp_session's parse_attach_properties, parse_filter and parse_filters at
v4.2.9): the link property ``rabbitmq:priority`` (the consumer's ``x-priority``) and the
source's filter map.

A filter is put in place or left out: the attach the broker sends back names, in its
source's filter map, only the filters it put in place (AMQP 1.0 §3.5.3), each as the
client sent it, and a client that needs one checks for it there. The filters, each under
a name of the client's choosing (a symbol) but SQL's:

- ``rabbitmq:stream-offset-spec``: where a stream consumer starts (``first``, ``last``,
  ``next``, an offset, a timestamp, or an interval such as ``10m``), the AMQP 0-9-1
  consumer argument ``x-stream-offset`` (a timestamp in seconds, as AMQP 0-9-1 has them);
- ``rabbitmq:stream-filter`` (a string, or a list whose strings count) and
  ``rabbitmq:stream-match-unfiltered`` (a boolean): ``x-stream-filter`` and
  ``x-stream-match-unfiltered``, the chunk-level Bloom filter of RabbitMQ 3.13's stream
  filtering (a chunk none of whose filter values is wanted is skipped; the messages of
  a chunk that may match all go out);
- property filter expressions (``amqp:properties-filter``,
  ``amqp:application-properties-filter``: :mod:`amqp10_filter_prop`), one of each kind;
- a SQL filter expression, named ``sql-filter`` (:mod:`amqp10_sql`).

Property and SQL expressions are evaluated on each message of a stream; they exclude
each other. The map is read from its end, as Erlang's ``lists:foldr``: of two property
filters of one kind, or of SQL and property filters, the later in the map is kept. The
``rabbitmq:stream-*`` filters sent without a descriptor are taken as described by their
name (the deprecated feature ``amqp_filter_set_bug``, permitted by default), and echoed
described."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from leveret.broker import amqp10_filter_prop, amqp10_sql_eval
from leveret.broker.amqp10_filter_msg import FilterMessage
from leveret.broker.amqp10_filter_prop import PropertyExpression
from leveret.broker.amqp10_sql_eval import SqlExpression
from leveret.protocol.amqp10.types import Symbol, Typed, Value, tag

OFFSET_SPEC = "rabbitmq:stream-offset-spec"
STREAM_FILTER = "rabbitmq:stream-filter"
MATCH_UNFILTERED = "rabbitmq:stream-match-unfiltered"
PRIORITY = "rabbitmq:priority"
_INTEGERS = frozenset(("ubyte", "ushort", "uint", "ulong", "byte", "short", "int", "long", "char"))


@dataclass(frozen=True, slots=True)
class MessageFilter:
    """The expressions a stream's message must pass (rabbit_amqp_filter:eval): property
    filters (each, all), or one SQL expression."""

    expressions: tuple[PropertyExpression | SqlExpression, ...]

    def matches(self, entry: bytes) -> bool:
        message = FilterMessage(entry)
        if not message.ok:
            return False
        return all(e.matches(message) for e in self.expressions)


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """The filters in place (the map to answer with; None when the client sent none),
    the consumer arguments they make, and the per-message filter (None: every message)."""

    filter: dict[Any, Any] | None
    arguments: dict[str, Any] = field(default_factory=dict)
    message_filter: MessageFilter | None = None
    #: the filters in place as the management API lists them (rabbit_amqp_session's
    #: format_filter: name, descriptor, value)
    listed: tuple[dict[str, Any], ...] = ()


def _offset(value: Value) -> Any:
    """The ``x-stream-offset`` of an offset spec's value, None when RabbitMQ ignores it."""
    kind, v = value
    if kind == "timestamp":
        return datetime.datetime.fromtimestamp(int(v) // 1000, datetime.UTC)
    if kind in ("string", "symbol"):  # first, last, next, 10m...
        return str(v)
    if kind in _INTEGERS and int(v) >= 0:
        return int(v)
    return None


def _echo(value: Value) -> Any:
    """A tagged value in a form the plain encoder writes back with its own types."""
    return Typed(value[0], value[1])


def _tagged(filters: dict[Any, Any]) -> Value:
    return tag(filters)


def consumer_spec(
    filters: dict[Any, Any] | None,
    properties: dict[Any, Any] | None,
    filter_types: Value | None = None,
    v4: bool = True,
) -> ConsumerSpec:
    """The consumer an attach asks for, from its source's filter map (``filter_types``:
    the map in the tagged view, its types as sent; else the plain ``filters``) and its
    link properties. Not ``v4`` (RabbitMQ 3.10.8's plugin, Leveret's default mode): the
    offset spec only, described."""
    arguments: dict[str, Any] = {}
    priority = (properties or {}).get(Symbol(PRIORITY))
    # parse_attach_properties: an int (the plain view keeps no width; any integer here)
    if isinstance(priority, int) and not isinstance(priority, bool):
        arguments["x-priority"] = int(priority)
    if filters is None:
        return ConsumerSpec(None, arguments)
    pairs = (filter_types if filter_types is not None else _tagged(filters))[1]
    filter_args: dict[str, Any] = {}
    effective: list[tuple[str, Value]] = []
    properties_seen: set[bool] = set()  # the kinds of property filter in place
    expressions: list[PropertyExpression | SqlExpression] = []
    sql = False
    for key, value in reversed(pairs):  # lists:foldr
        if key[0] != "symbol":
            continue
        name = key[1]
        if not v4 and (value[0] != "described" or value[1][0] != ("symbol", OFFSET_SPEC)):
            continue
        if name.startswith("rabbitmq:stream-") and value[0] != "described":
            value = ("described", (("symbol", name), value))  # amqp_filter_set_bug
        descriptor = value[1][0] if value[0] == "described" else None
        if descriptor == ("symbol", OFFSET_SPEC):
            offset = _offset(value[1][1])
            if offset is None:
                continue
            filter_args["x-stream-offset"] = offset  # the first in the map wins
        elif descriptor == ("symbol", STREAM_FILTER):
            inner = value[1][1]
            if inner[0] == "list":
                wanted: Any = [v for k, v in inner[1] if k == "string"]
            elif inner[0] == "string":
                wanted = inner[1]
            else:
                continue
            filter_args["x-stream-filter"] = wanted
        elif descriptor == ("symbol", MATCH_UNFILTERED) and value[1][1][0] == "bool":
            filter_args["x-stream-match-unfiltered"] = bool(value[1][1][1])
        elif name == amqp10_sql_eval.FILTER_NAME:
            if expressions:
                continue  # SQL and property filter expressions exclude each other
            parsed_sql = amqp10_sql_eval.parse(value)
            if parsed_sql is None:
                continue
            expressions.append(parsed_sql)
            sql = True
        else:
            parsed = amqp10_filter_prop.parse(value)
            if parsed is None or sql or parsed.application in properties_seen:
                continue
            properties_seen.add(parsed.application)
            expressions.append(parsed)
        effective.append((name, value))
    effective.reverse()
    # the consumer's arguments: x-priority, then the filters' in the map's order
    arguments.update(reversed(list(filter_args.items())))
    echoed = {Symbol(name): _echo(value) for name, value in effective}
    message_filter = MessageFilter(tuple(reversed(expressions))) if expressions else None
    listed = tuple(
        {"name": name, "descriptor": value[1][0][1], "value": _listed(value[1][1])}
        for name, value in effective
    )
    return ConsumerSpec(echoed, arguments, message_filter, listed)


def _listed(value: Value) -> Any:
    """format_filter_value: a value as the management API's JSON shows it (a map as
    key/value pairs of its text keys)."""
    kind, v = value
    if kind in ("list", "array"):
        return [_listed(item) for item in v]
    if kind == "map":
        return [
            {"key": str(k[1]), "value": _listed(item)}
            for k, item in v
            if k[0] in ("string", "symbol")
        ]
    if kind == "described":
        return _listed(v[1])
    if kind in ("binary", "uuid"):
        return bytes(v).decode("utf-8", "replace")
    return v
