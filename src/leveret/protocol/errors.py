"""Typed AMQP errors that carry their reply code and whether they close a channel or
the whole connection. They are raised anywhere below the server and turned into
``channel.close`` / ``connection.close`` in one place."""

from __future__ import annotations

from functools import partial

from leveret.protocol import spec


class AMQPError(Exception):
    """An error with an AMQP reply code.

    ``text`` is the explanation without the code's name; :attr:`reply_text` formats it
    as RabbitMQ does: ``"NOT_FOUND - no exchange 'x' in vhost '/'"``.
    """

    code: int = spec.INTERNAL_ERROR

    def __init__(self, text: str, class_id: int = 0, method_id: int = 0, code: int | None = None):
        super().__init__(text)
        if code is not None:
            self.code = code
        self.text = text
        self.class_id = class_id
        self.method_id = method_id

    @property
    def reply_text(self) -> str:
        name = spec.REPLY_NAMES[self.code]
        return truncate(f"{name} - {self.text}" if self.text else name)

    @property
    def is_hard(self) -> bool:
        """Hard errors close the connection, soft ones only the channel."""
        return self.code in spec.HARD_ERRORS

    def with_method(self, class_id: int, method_id: int) -> AMQPError:
        if not self.class_id:
            self.class_id, self.method_id = class_id, method_id
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reply_text!r}, {self.class_id}, {self.method_id})"


def truncate(text: str) -> str:
    """A reply text fits a short string: RabbitMQ cuts a longer one to 252 bytes and
    appends '...'."""
    raw = text.encode("utf-8", "surrogateescape")
    if len(raw) <= 255:
        return text
    return raw[:252].decode("utf-8", "ignore") + "..."


def error(code: int, text: str, class_id: int = 0, method_id: int = 0) -> AMQPError:
    return AMQPError(text, class_id, method_id, code=code)


# The errors of one reply code each, from their text.
not_found = partial(error, spec.NOT_FOUND)
precondition_failed = partial(error, spec.PRECONDITION_FAILED)
access_refused = partial(error, spec.ACCESS_REFUSED)
resource_locked = partial(error, spec.RESOURCE_LOCKED)
not_allowed = partial(error, spec.NOT_ALLOWED)
command_invalid = partial(error, spec.COMMAND_INVALID)
channel_error = partial(error, spec.CHANNEL_ERROR)
frame_error = partial(error, spec.FRAME_ERROR)
syntax_error = partial(error, spec.SYNTAX_ERROR)
unexpected_frame = partial(error, spec.UNEXPECTED_FRAME)
not_implemented = partial(error, spec.NOT_IMPLEMENTED)


class Crash(AMQPError):
    """What a client sees when RabbitMQ's channel process crashes: the connection closes
    with 541 INTERNAL_ERROR naming no method."""

    code = spec.INTERNAL_ERROR

    def __init__(self) -> None:
        super().__init__("")

    def with_method(self, class_id: int, method_id: int) -> AMQPError:
        return self
