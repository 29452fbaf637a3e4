"""The stream protocol's numbers: command keys, response codes, offset types, defaults.
Version 1 of every command is RabbitMQ 3.10's; the commands from ConsumerUpdate on, version
2 of Publish (a filter value per message) and of Deliver (the committed chunk id), and the
SASL codes 20 and 21 came with RabbitMQ 3.11-3.13 (v3.13.7
deps/rabbitmq_stream_common/include/rabbit_stream.hrl, deps/rabbitmq_stream/docs/
PROTOCOL.adoc)."""

from __future__ import annotations

from enum import IntEnum

VERSION_1 = 1
VERSION_2 = 2
RESPONSE = 0x8000  # set on a key: the frame is a response


class Key(IntEnum):
    DECLARE_PUBLISHER = 0x0001
    PUBLISH = 0x0002
    PUBLISH_CONFIRM = 0x0003
    PUBLISH_ERROR = 0x0004
    QUERY_PUBLISHER_SEQUENCE = 0x0005
    DELETE_PUBLISHER = 0x0006
    SUBSCRIBE = 0x0007
    DELIVER = 0x0008
    CREDIT = 0x0009
    STORE_OFFSET = 0x000A
    QUERY_OFFSET = 0x000B
    UNSUBSCRIBE = 0x000C
    CREATE = 0x000D
    DELETE = 0x000E
    METADATA = 0x000F
    METADATA_UPDATE = 0x0010
    PEER_PROPERTIES = 0x0011
    SASL_HANDSHAKE = 0x0012
    SASL_AUTHENTICATE = 0x0013
    TUNE = 0x0014
    OPEN = 0x0015
    CLOSE = 0x0016
    HEARTBEAT = 0x0017
    ROUTE = 0x0018
    PARTITIONS = 0x0019
    CONSUMER_UPDATE = 0x001A
    EXCHANGE_COMMAND_VERSIONS = 0x001B
    STREAM_STATS = 0x001C
    CREATE_SUPER_STREAM = 0x001D
    DELETE_SUPER_STREAM = 0x001E


class Code(IntEnum):
    OK = 1
    STREAM_DOES_NOT_EXIST = 2
    SUBSCRIPTION_ID_ALREADY_EXISTS = 3
    SUBSCRIPTION_ID_DOES_NOT_EXIST = 4
    STREAM_ALREADY_EXISTS = 5
    STREAM_NOT_AVAILABLE = 6
    SASL_MECHANISM_NOT_SUPPORTED = 7
    AUTHENTICATION_FAILURE = 8
    SASL_ERROR = 9
    SASL_CHALLENGE = 10
    SASL_AUTHENTICATION_FAILURE_LOOPBACK = 11
    VIRTUAL_HOST_ACCESS_FAILURE = 12
    UNKNOWN_FRAME = 13
    FRAME_TOO_LARGE = 14
    INTERNAL_ERROR = 15
    ACCESS_REFUSED = 16
    PRECONDITION_FAILED = 17
    PUBLISHER_DOES_NOT_EXIST = 18
    NO_OFFSET = 19
    SASL_CANNOT_CHANGE_MECHANISM = 20
    SASL_CANNOT_CHANGE_USERNAME = 21


class OffsetType(IntEnum):
    NONE = 0  # a consumer update response: the subscription's own offset
    FIRST = 1
    LAST = 2
    NEXT = 3
    OFFSET = 4
    TIMESTAMP = 5


DEFAULT_FRAME_MAX = 1_048_576  # RabbitMQ's stream.frame_max
DEFAULT_HEARTBEAT = 60
# Before tune, a peer may send frames up to this size (the handshake frames are small).
HANDSHAKE_FRAME_MAX = 1_048_576
