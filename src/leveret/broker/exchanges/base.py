"""The interface every exchange type implements, and the binding value."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from leveret.broker.policies import Governed, policy_value

if TYPE_CHECKING:
    from leveret.broker.message import Message


class Destination(Protocol):
    """A queue or an exchange: something a binding points at."""

    name: str
    kind: str  # "queue" or "exchange"
    durable: bool  # a binding is a definition when both its ends are durable


def freeze(value: Any) -> Any:
    """A hashable, order-insensitive image of a field-table value."""
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


@dataclass(eq=False, slots=True)
class Binding:
    source: str
    destination: Destination
    routing_key: str
    arguments: dict[str, Any] = field(default_factory=dict)
    key: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        self.key = (
            self.destination.kind,
            self.destination.name,
            self.routing_key,
            freeze(self.arguments),
        )


@dataclass(eq=False, repr=False)
class Exchange(Governed):
    """An exchange: a name, flags, and a routing index kept by its type."""

    # (class attributes, not fields: no annotations)
    type_name = ""
    kind = "exchange"
    # what /api/overview's exchange_types says of a plugin's type (AMQP's: generated)
    description = ""

    name: str
    vhost: str
    durable: bool = False
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.arguments = self.arguments.copy()  # its own, whoever declared it
        self.bindings: dict[tuple[Any, ...], Binding] = {}
        # How many bindings lead to other exchanges: routing takes a slower path then.
        self.exchange_bindings = 0
        self.user_who_performed_action = ""
        self.policy = None
        self.operator_policy = None
        # The alternate exchange routing falls back to: the argument's, else a policy's
        # (rabbit_policy:get_arg: the argument wins).
        self.alternate: str | None = None
        # counters for management: messages published to it, and the queue deliveries
        # they made (publish_in / publish_out)
        self.published_in = 0
        self.published_out = 0
        self.configure()

    def configure(self) -> None:
        arg = self.arguments.get("alternate-exchange")
        if arg is not None:
            self.alternate = (
                bytes(arg).decode("utf-8", "replace")
                if isinstance(arg, (bytes, bytearray))
                else (arg if isinstance(arg, str) else None)
            )
            return
        value = policy_value("alternate-exchange", self.policy, self.operator_policy)
        self.alternate = value if isinstance(value, str) else None

    # -- the part a type implements -------------------------------------------------
    def attach(self, vhost: Any) -> None:
        """The exchange joins ``vhost`` (a VirtualHost: declared, or restored at start)."""

    def detach(self) -> None:
        """The exchange is deleted."""

    def info(self) -> dict[str, Any]:
        """Fields a plugin's type adds to the exchange's listing (its info/1)."""
        return {}

    def validate_binding(self, binding: Binding) -> None:
        """Raise an AMQPError if the type cannot take this binding."""

    def _index_add(self, binding: Binding) -> None:
        raise NotImplementedError

    def _index_remove(self, binding: Binding) -> None:
        raise NotImplementedError

    def route(self, message: Message) -> list[Destination]:
        """Destinations for a message, each at most once."""
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------
    def bind(self, binding: Binding) -> bool:
        """Add a binding; False if an identical one exists."""
        if binding.key in self.bindings:
            return False
        self.validate_binding(binding)
        self.bindings[binding.key] = binding
        self._index_add(binding)
        if binding.destination.kind == "exchange":
            self.exchange_bindings += 1
        return True

    def unbind(self, binding_key: tuple[Any, ...]) -> Binding | None:
        binding = self.bindings.pop(binding_key, None)
        if binding is not None:
            self._index_remove(binding)
            if binding.destination.kind == "exchange":
                self.exchange_bindings -= 1
        return binding

    @property
    def is_builtin(self) -> bool:
        return self.name == "" or self.name.startswith("amq.")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} in {self.vhost!r}>"
