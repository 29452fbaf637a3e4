"""The AMQP 1.0 type codec, for stream messages: it lives in
:mod:`leveret.protocol.amqp10.types` (one codec for the AMQP 1.0 protocol and the osiris
chunks' messages); this module keeps the stream code's imports working."""

from __future__ import annotations

from leveret.protocol.amqp10.types import (
    _FIXED,
    AMQP_SEQUENCE,
    AMQP_VALUE,
    APPLICATION_PROPERTIES,
    DATA,
    DELIVERY_ANNOTATIONS,
    FOOTER,
    HEADER,
    MESSAGE_ANNOTATIONS,
    PROPERTIES,
    DecodeError,
    Value,
    decode,
    encode,
    section,
    sections,
    value_end,
)

__all__ = [
    "AMQP_SEQUENCE",
    "AMQP_VALUE",
    "APPLICATION_PROPERTIES",
    "DATA",
    "DELIVERY_ANNOTATIONS",
    "FOOTER",
    "HEADER",
    "MESSAGE_ANNOTATIONS",
    "PROPERTIES",
    "_FIXED",
    "DecodeError",
    "Value",
    "decode",
    "encode",
    "section",
    "sections",
    "value_end",
]
