"""basic.publish (and the management API's publish): every check RabbitMQ makes of a
message before it routes it, then the vhost's routing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.broker import errors as rabbit
from leveret.broker.operations.authorization import check_access
from leveret.broker.operations.topics import authorize_topic
from leveret.broker.reply_to import REPLY_PREFIX, REPLY_QUEUE
from leveret.broker.sender_routes import might_name_routes, with_sender_routes
from leveret.protocol import errors, properties, table

if TYPE_CHECKING:
    from leveret.broker.exchanges import Exchange
    from leveret.broker.message import Message
    from leveret.broker.operations.actor import Actor
    from leveret.broker.routing import PublishResult
    from leveret.broker.trace import Tap
    from leveret.broker.vhost import VirtualHost

_EXPIRATION_FLAG = 0x01  # byte 0 of the property flags: expiration (0x0100)
_REPLY_TO_FLAG = 0x02  # byte 0: reply-to (0x0200)
_REPLY_TO_PSEUDO_QUEUE = b"\x15" + REPLY_QUEUE.encode()  # as a short string
_USER_ID_FLAG = 0x10  # byte 1: user-id (0x0010)
# Property bytes seen to need none of the checks below (well-formed, no reply-to, no
# expiration, no user-id, no CC or BCC): publishers repeat theirs.
_PLAIN: dict[bytes, None] = {}
_PLAIN_SIZE = 4096


def authorize_publish(
    vhost: VirtualHost,
    actor: Actor,
    exchange_name: str,
    message: Message,
    reply_suffix: str | None = None,
) -> tuple[Exchange, Message]:
    """Every check RabbitMQ makes of a publish, in its order (size, write permission, the
    exchange, internal, direct reply-to, user-id, expiration, CC/BCC): the exchange to
    route through and the message as the queues will hold it (reply-to rewritten for the
    publishing channel's ``reply_suffix``, BCC removed, the incoming interceptors'
    headers added)."""
    exchange, message = _checked(vhost, actor, exchange_name, message, reply_suffix)
    interceptors = vhost.interceptors
    if interceptors is not None:
        message = interceptors.intercept(message, vhost.node)
    return exchange, message


def _checked(
    vhost: VirtualHost,
    actor: Actor,
    exchange_name: str,
    message: Message,
    reply_suffix: str | None,
) -> tuple[Exchange, Message]:
    if len(message.body) > vhost.max_message_size:
        raise errors.precondition_failed(
            f"message size {len(message.body)} is larger than configured max size "
            f"{vhost.max_message_size}"
        )
    permission = actor.permission  # check_access, inline: this is the hot path
    if permission is None or not permission.allows("write", exchange_name or "amq.default"):
        check_access(vhost, actor, "write", "exchange", exchange_name)  # raises
    exchange = vhost.exchanges.get(exchange_name)
    if exchange is None:
        raise rabbit.no_exchange(exchange_name, vhost.name)
    if exchange.internal:
        raise errors.access_refused(
            f"cannot publish to internal exchange '{exchange_name}' in vhost '{vhost.name}'"
        )
    if vhost.topic_permissions:
        authorize_topic(vhost, exchange, actor.username, message.routing_key, "write")
    props = message.properties
    if props in _PLAIN:
        return exchange, message
    # rabbit_binary_parser:ensure_content_decoded: properties it cannot decode crash the
    # channel (541, connection closed)
    unknown_mode = None if props in properties.ACCEPTED else properties.verdict(props)
    if unknown_mode == properties.MALFORMED:
        raise errors.Crash()
    if props[0] & _REPLY_TO_FLAG and _REPLY_TO_PSEUDO_QUEUE in props:
        message = _with_reply_address(message, reply_suffix)
        props = message.properties
    if props[0] & _EXPIRATION_FLAG or (len(props) > 2 and props[1] & _USER_ID_FLAG):
        _check_properties(message, actor.username)
    if unknown_mode is not None:  # rabbit_basic:message -> is_message_persistent
        raise errors.precondition_failed(
            f"invalid message: {{delivery_mode_unknown,{unknown_mode}}}"
        )
    if might_name_routes(props):
        message = with_sender_routes(message)
    elif (
        unknown_mode is None
        and not props[0] & (_REPLY_TO_FLAG | _EXPIRATION_FLAG)
        and not (len(props) > 2 and props[1] & _USER_ID_FLAG)
        and len(props) <= 256
    ):
        if len(_PLAIN) >= _PLAIN_SIZE:
            _PLAIN.clear()
        _PLAIN[props] = None
    return exchange, message


def publish(
    vhost: VirtualHost,
    actor: Actor,
    exchange_name: str,
    message: Message,
    mandatory: bool = False,
    reply_suffix: str | None = None,
    tap: Tap | None = None,
) -> PublishResult:
    """Check, route and enqueue one message. AMQP's session calls the two halves apart
    (a transaction routes at the publish and delivers at the commit)."""
    exchange, message = authorize_publish(vhost, actor, exchange_name, message, reply_suffix)
    return vhost.publish_to(exchange, message, mandatory, tap)


def _with_reply_address(message: Message, reply_suffix: str | None) -> Message:
    """A reply_to of exactly 'amq.rabbitmq.reply-to' names the publishing channel's reply
    consumer: rewritten to its address, refused when the channel has none."""
    if table.short_property(message.properties, table.REPLY_TO_FLAG) != REPLY_QUEUE:
        return message
    if reply_suffix is None:
        raise errors.precondition_failed("fast reply consumer does not exist")
    return message.with_properties(
        table.with_short_property(
            message.properties, table.REPLY_TO_FLAG, REPLY_PREFIX + reply_suffix
        )
    )


def _check_properties(message: Message, username: str) -> None:
    props = message.props
    if props.user_id and props.user_id != username:
        raise errors.precondition_failed(
            f"user_id property set to '{props.user_id}' but authenticated user was '{username}'"
        )
    if props.expiration is not None and props.expiration != "":
        exp = props.expiration
        if not exp.isdigit():
            raise errors.precondition_failed(
                f"invalid expiration '{exp}': {{value_negative,{exp}}}"
                if exp.startswith("-") and exp[1:].isdigit()
                else f"invalid expiration '{exp}': no_integer"
            )
