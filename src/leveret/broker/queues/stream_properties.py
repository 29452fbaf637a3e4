"""What RabbitMQ 3.10's streams do to a message's properties: it stores stream messages as
AMQP 1.0 and converts on the way in and out, so some AMQP 0-9-1 properties do not come
back, and one header type cannot go in at all. Stream queues apply this; it is domain
knowledge of the stream queue type, not of the wire codec."""

from __future__ import annotations

import struct

from leveret.protocol import spec

# The property flags between the headers and cluster-id, in wire order.
_AFTER_HEADERS = (0x1000, 0x0800, 0x0400, 0x0200, 0x0100, 0x0080, 0x0040, 0x0020, 0x0010, 0x0008)


def refused_by_a_stream(raw: bytes) -> bool:
    """True for properties RabbitMQ 3.10 cannot store in a stream: a decimal header value
    (its AMQP 1.0 conversion has no clause for it, and the publishing connection is closed
    with 541 INTERNAL_ERROR)."""
    flags = int.from_bytes(raw[:2], "big")
    if not flags & spec.HEADERS_FLAG or flags & 1:
        return False
    try:
        return any(tag == 0x44 for _, _, tag in spec.headers_entries(raw, flags)[2])  # "D"
    except (IndexError, ValueError, struct.error):
        return False


def as_stored_in_a_stream(raw: bytes) -> bytes:
    """Content-header property bytes as a RabbitMQ 3.10 stream gives them back.

    RabbitMQ stores stream messages as AMQP 1.0 and converts on the way in and out; headers
    whose value is a table or an array have no place in its application properties and are
    dropped, and so is the deprecated cluster-id. Everything else survives unchanged. Bytes
    this cannot walk are returned as they are."""
    flags = int.from_bytes(raw[:2], "big")
    if not flags & (spec.HEADERS_FLAG | spec.CLUSTER_ID_FLAG) or flags & 1:
        return raw
    try:
        if flags & spec.HEADERS_FLAG:
            start, pos, entries = spec.headers_entries(raw, flags)
            kept = [raw[a:b] for a, b, tag in entries if tag not in b"FA"]
            if len(kept) == len(entries) and not flags & spec.CLUSTER_ID_FLAG:
                return raw
            table = b"".join(kept)
            out = [raw[:start], struct.pack(">I", len(table)), table]
        else:
            pos = spec.headers_start(raw, flags)
            out = [raw[:pos]]
        rest = pos
        if flags & spec.CLUSTER_ID_FLAG:  # the last property: cut it off and clear its flag
            for bit in _AFTER_HEADERS:
                if flags & bit:
                    short = bit in spec.PROPERTY_SHORTSTR
                    pos += 1 + raw[pos] if short else spec.PROPERTY_SIZE[bit]
            out.append(raw[rest:pos])
            out[0] = (flags & ~spec.CLUSTER_ID_FLAG).to_bytes(2, "big") + out[0][2:]
        else:
            out.append(raw[rest:])
        return b"".join(out)
    except (IndexError, ValueError, struct.error):
        return raw
