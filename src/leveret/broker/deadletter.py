"""Dead-lettering, as rabbit_dead_letter: the message a queue republishes to its
dead-letter exchange when a message is rejected, expires, overflows or passes its
delivery limit, with RabbitMQ's ``x-death`` history, and the cycles RabbitMQ refuses to
follow.

Headers are edited as wire bytes (:mod:`leveret.protocol.table`) so that everything the
publisher sent keeps its type; like RabbitMQ, each change sorts the headers table by key."""

from __future__ import annotations

import logging
import time

from leveret.broker.message import Message
from leveret.protocol import table
from leveret.protocol.table import Field

log = logging.getLogger(__name__)

REASONS = ("rejected", "expired", "maxlen", "delivery_limit")
_COUNT_1 = ("count", table.long(1))


def dead_lettered(
    message: Message,
    queue: str,
    reason: str,
    exchange: str,
    routing_key: str | None,
    now_s: int | None = None,
    v4: bool = False,
) -> Message:
    """``message`` as dead-lettered from ``queue`` for ``reason`` to ``exchange``: routed
    with ``routing_key``, or with the message's own keys when None. ``v4``: as RabbitMQ 4
    records the death (:func:`_update_x_death_v4`)."""
    raw = message.properties
    headers = table.headers(raw) or []
    keys = [message.routing_key, *_cc_keys(headers)]
    info: list[Field] = [
        ("reason", table.longstr(reason)),
        ("queue", table.longstr(queue)),
        ("time", table.timestamp(int(time.time()) if now_s is None else now_s)),
        ("exchange", table.longstr(message.exchange)),
        ("routing-keys", table.array([table.longstr(k) for k in keys])),
    ]
    expiration = table.short_property(raw, table.EXPIRATION_FLAG)
    if v4:
        if expiration is not None:  # mc_amqpl:death_table puts it first
            info.insert(0, ("original-expiration", table.longstr(expiration)))
        if message.foreign_deaths:
            headers = table.delete(headers, "x-death")
        headers = _update_x_death_v4(info, headers, queue, reason, message.exchange)
    else:
        if expiration is not None:
            info.append(("original-expiration", table.longstr(expiration)))
        headers = _update_x_death(info, headers, queue, reason, message.exchange)
    if routing_key is None:
        death_keys = message.routing_keys
    else:
        death_keys = (routing_key,)
        headers = table.delete(headers, "CC")
    props = table.with_headers(raw, headers)
    if expiration is not None:
        props = table.with_short_property(props, table.EXPIRATION_FLAG, None)
    return message.with_route(exchange, death_keys, props)


def _cc_keys(headers: list[Field]) -> list[str]:
    """The keys of the CC header (BCC was removed at publish)."""
    out: list[str] = []
    for name in ("CC", "BCC"):
        value = table.lookup(headers, name)
        elements = table.array_elements(value) if value is not None else None
        if elements:
            out.extend(k for k in map(table.text, elements) if k is not None)
    return out


def _update_x_death(
    info: list[Field], headers: list[Field], queue: str, reason: str, exchange: str
) -> list[Field]:
    existing = table.lookup(headers, "x-death")
    if existing is None:
        # The first death also gets top-level headers (rabbitmq-server#1332).
        headers = table.store(headers, "x-first-death-reason", table.longstr(reason))
        headers = table.store(headers, "x-first-death-queue", table.longstr(queue))
        headers = table.store(headers, "x-first-death-exchange", table.longstr(exchange))
        return table.store(headers, "x-death", table.array([table.table([_COUNT_1, *info])]))
    elements = table.array_elements(existing)
    if elements is None:
        log.warning(
            "Message has invalid x-death header (type: %s). Resetting header",
            chr(existing[0]),
        )
        return table.store(headers, "x-death", table.array([table.table([_COUNT_1, *info])]))
    grouped = _group_by_queue_and_reason(elements)
    matches = [e for e in grouped if _is_death_of(e, queue, reason)]
    others = [e for e in grouped if not _is_death_of(e, queue, reason)]
    if matches:
        fields = table.table_fields(matches[0]) or []
        updated = _increment_count(fields)
    else:
        updated = [_COUNT_1, *info]
    return table.store(headers, "x-death", table.array([table.table(table.sort(updated)), *others]))


def _update_x_death_v4(
    info: list[Field], headers: list[Field], queue: str, reason: str, exchange: str
) -> list[Field]:
    """RabbitMQ 4's death history (v4.2.9 mc.erl:387-461 record_death, mc_amqpl.erl:618-685
    deaths_to_headers and death_table): what the publisher sent as x-death is not read
    (the caller drops it); each (queue, reason) has one entry, the latest death first,
    its fields in death_table's order (original-expiration, count, reason, queue, time,
    exchange, routing-keys) and its time the first death's. The first death also sets
    x-first-death-reason/queue/exchange, every death x-last-death-reason/queue/exchange
    (from 3.13)."""
    last = (
        ("x-last-death-reason", table.longstr(reason)),
        ("x-last-death-queue", table.longstr(queue)),
        ("x-last-death-exchange", table.longstr(exchange)),
    )
    existing = table.lookup(headers, "x-death")
    elements = table.array_elements(existing) if existing is not None else None
    if not elements:
        headers = table.store(headers, "x-first-death-reason", table.longstr(reason))
        headers = table.store(headers, "x-first-death-queue", table.longstr(queue))
        headers = table.store(headers, "x-first-death-exchange", table.longstr(exchange))
        records = [table.table([*info[:-5], _COUNT_1, *info[-5:]])]
    else:
        matches = [e for e in elements if _is_death_of(e, queue, reason)]
        others = [e for e in elements if not _is_death_of(e, queue, reason)]
        if matches:
            fields = _increment_count(table.table_fields(matches[0]) or [])
            records = [table.table(fields), *others]
        else:
            records = [table.table([*info[:-5], _COUNT_1, *info[-5:]]), *others]
    for key, value in last:
        headers = table.store(headers, key, value)
    return table.store(headers, "x-death", table.array(records))


def _key(element: bytes) -> tuple[str | None, str | None]:
    fields = table.table_fields(element)
    if fields is None:
        return None, None
    q = table.lookup(fields, "queue")
    r = table.lookup(fields, "reason")
    return (table.text(q) if q else None), (table.text(r) if r else None)


def _is_death_of(element: bytes, queue: str, reason: str) -> bool:
    return element[:1] == b"F" and _key(element) == (queue, reason)


def _group_by_queue_and_reason(elements: list[bytes]) -> list[bytes]:
    """rabbit_dead_letter:group_by_queue_and_reason, literally: one entry per (queue,
    reason) for histories written before RabbitMQ grouped them. With more than one entry
    it gives them back in reverse order, as RabbitMQ does."""
    if len(elements) <= 1:
        return list(elements)
    seen: set[tuple[str | None, str | None]] = set()
    acc: list[bytes] = []
    for element in elements:
        key = _key(element)
        same = [e for e in elements if e[:1] == b"F" and _key(e) == key]
        augmented = same[0] if same else element
        fields = table.table_fields(augmented)
        if fields is not None and table.lookup(fields, "count") is None:
            augmented = table.table([("count", table.long(len(same))), *fields])
        if not acc or key not in seen:
            acc.insert(0, augmented)
        seen.add(key)
    return acc


def _increment_count(fields: list[Field]) -> list[Field]:
    count = table.lookup(fields, "count")
    n = table.long_value(count) if count is not None else None
    if n is None:
        return [_COUNT_1, *fields]
    return [(k, table.long(n + 1) if k == "count" else v) for k, v in fields]


def is_cycle(queue: str, deaths: list[bytes]) -> bool:
    """rabbit_dead_letter:is_cycle: the message already died in ``queue`` and every death
    since (and that one) was automatic, none a rejection."""
    for i, element in enumerate(deaths):
        fields = table.table_fields(element)
        q = table.lookup(fields, "queue") if fields is not None else None
        if q is not None and table.text(q) == queue:
            for death in deaths[: i + 1]:
                death_fields = table.table_fields(death)
                if death_fields is None:
                    return False  # a client put it there: not fully automatic
                r = table.lookup(death_fields, "reason")
                if r is not None and table.text(r) == "rejected":
                    return False
            return True
    return False


def deaths(message: Message) -> list[bytes]:
    """The entries of a message's x-death header (none when it has no such array)."""
    headers = table.headers(message.properties) or []
    value = table.lookup(headers, "x-death")
    return (table.array_elements(value) or []) if value is not None else []


def death_queues(deaths: list[bytes]) -> list[str]:
    out: list[str] = []
    for element in deaths:
        fields = table.table_fields(element)
        q = table.lookup(fields, "queue") if fields is not None else None
        name = table.text(q) if q is not None else None
        if name is not None:
            out.append(name)
    return out
