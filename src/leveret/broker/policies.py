"""Policies and operator policies, as RabbitMQ 3.10.8's ``rabbit_policy``: named,
per vhost, matched against queue and exchange names by a regular expression, the highest
priority winning; their definitions validated as ``rabbit_policies`` validates them.

Which value a queue or exchange ends up with is worked out in two steps, as RabbitMQ:

1. :func:`policy_value` (``rabbit_policy:get``): the policy's value of a key, or the
   operator policy's, or, when both have it, the stricter of the two (the smaller, for the
   keys an operator policy may hold).
2. :func:`resolve` (``rabbit_queue_type_util:args_policy_lookup``): that value against the
   object's own ``x-`` argument, with the rule its type has for the key (the argument
   wins, the policy wins, or the smaller wins), see each queue type's ``POLICY_RULES``."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from leveret.broker.compat import RABBITMQ_3_10, RabbitMQ
from leveret.broker.erlterms import pairs, term, tuple_term

APPLY_TO = ("all", "exchanges", "queues")
# From 3.12 (RabbitMQ 4.2 mode here) a policy may apply to one queue type: each type's
# policy_apply_to_name (v4.2.9 rabbit_classic_queue.erl:773, rabbit_quorum_queue.erl:2474,
# rabbit_stream_queue.erl:1614), by x-queue-type
APPLY_TO_TYPES = {"classic_queues": "classic", "quorum_queues": "quorum", "streams": "stream"}
APPLY_TO_4 = (*APPLY_TO, *APPLY_TO_TYPES)

# The keys an operator policy may hold (rabbit_policies' operator_policy_validator), and
# the keys whose policy and operator-policy values merge to the smaller.
OPERATOR_KEYS = frozenset(
    (
        "expires",
        "message-ttl",
        "max-length",
        "max-length-bytes",
        "max-in-memory-length",
        "max-in-memory-bytes",
        "delivery-limit",
    )
)

MAX_STREAM_SEGMENT_SIZE = 3_000_000_000  # ?MAX_STREAM_MAX_SEGMENT_SIZE
_MAX_AGE = re.compile(r"^(\d+)([YMDhms])$")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _non_negative(v: Any) -> bool:
    return _is_int(v) and v >= 0


def _is_binary(v: Any) -> bool:
    return isinstance(v, str)


def _one_of(*values: str) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, str) and v in values


def is_max_age(v: Any) -> bool:
    """rabbit_amqqueue:check_max_age: digits and one of the units Y M D h m s."""
    return isinstance(v, str) and _MAX_AGE.match(v) is not None


# key -> (what a valid value is, what rabbit_policies says of an invalid one). These are
# the keys Leveret's queue types and exchanges act on; every other key is refused as
# RabbitMQ refuses a key no validator knows.
VALIDATORS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "alternate-exchange": (_is_binary, "is not a valid alternate exchange name"),
    "dead-letter-exchange": (_is_binary, "is not a valid dead letter exchange name"),
    "dead-letter-routing-key": (_is_binary, "is not a valid dead letter routing key"),
    "message-ttl": (_non_negative, "is not a valid message TTL"),
    "expires": (lambda v: _is_int(v) and v >= 1, "is not a valid queue expiry"),
    "max-length": (_non_negative, "is not a valid maximum length"),
    "max-length-bytes": (_non_negative, "is not a valid maximum length in bytes"),
    "queue-mode": (_one_of("default", "lazy"), "is not a valid queue-mode value"),
    "overflow": (
        _one_of("drop-head", "reject-publish", "reject-publish-dlx"),
        "is not a valid overflow value",
    ),
    "delivery-limit": (_non_negative, "is not a valid delivery limit"),
    "max-age": (is_max_age, "is not a valid max age"),
    "stream-max-segment-size-bytes": (
        lambda v: _is_int(v) and 0 <= v <= MAX_STREAM_SEGMENT_SIZE,
        "is not a valid segment size",
    ),
}


# The keys RabbitMQ 4.2 validates beside those (v4.2.9 rabbit_policies.erl: consumer-timeout
# from 3.12, a non-negative integer)
VALIDATORS_4: dict[str, tuple[Callable[[Any], bool], str]] = {
    **VALIDATORS,
    "consumer-timeout": (_non_negative, "is not a valid consumer timeout"),
}


class PolicyError(ValueError):
    """A policy RabbitMQ would refuse: ``errors`` are its lines, in its order."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors

    @property
    def text(self) -> str:
        """As ``rabbit_runtime_parameters:format_error`` words it."""
        return "Validation failed\n\n" + "".join(e + "\n" for e in self.errors)


@dataclass(frozen=True)
class Policy:
    """One policy (or operator policy) of a vhost."""

    vhost: str
    name: str
    pattern: str
    definition: dict[str, Any]
    priority: int | float = 0
    apply_to: str = "all"
    operator: bool = False
    _regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self._regex is None:
            object.__setattr__(self, "_regex", re.compile(self.pattern))

    def applies_to(self, kind: str, queue_type: str = "") -> bool:
        """rabbit_policy:matches_type and matches_queue_type: ``queue_type`` is a queue's
        x-queue-type, for the apply-to of one queue type."""
        apply_to = self.apply_to
        if apply_to == "all" or apply_to == kind + "s":
            return True
        return kind == "queue" and APPLY_TO_TYPES.get(apply_to) == queue_type

    def matches(
        self,
        kind: str,
        name: str,
        unsupported: frozenset[str] = frozenset(),
        queue_type: str = "",
    ) -> bool:
        """rabbit_policy:matches: the kind (and the queue's type), the queue type's
        unsupported keys, the pattern (an unanchored search, as re:run)."""
        if not self.applies_to(kind, queue_type):
            return False
        if unsupported and any(key in unsupported for key in self.definition):
            return False
        assert self._regex is not None
        return self._regex.search(name) is not None

    def as_json(self) -> dict[str, Any]:
        """As the management API shows it."""
        return {
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to,
            "definition": dict(self.definition),
            "priority": self.priority,
        }


# --------------------------------------------------------------------- validation
def regex_error(pattern: str) -> str | None:
    """Why RabbitMQ's re:compile refuses ``pattern`` (PCRE's words for the errors Python
    and PCRE share), or None when it compiles."""
    try:
        re.compile(pattern)
        return None
    except re.error as exc:
        message, at = _pcre_error(pattern, exc)
    return tuple_term(
        "pattern should be regular expression but is invalid: ", [f'"{message}"', str(at)]
    )


def _pcre_error(pattern: str, exc: re.error) -> tuple[str, int]:
    msg, pos = exc.msg, exc.pos or 0
    end = len(pattern)
    if msg == "unterminated character set":
        return "missing terminating ] for character class", end
    if msg.startswith("missing ), unterminated subpattern"):
        return "missing )", end
    if msg in ("nothing to repeat", "multiple repeat"):
        return "nothing to repeat", pos
    if msg == "unbalanced parenthesis":
        return "unmatched parentheses", pos
    if msg == "min repeat greater than max repeat":
        close = pattern.find("}", pos)
        return "numbers out of order in {} quantifier", close if close >= 0 else end
    if msg.startswith("bad escape (end of pattern)"):
        return "\\\\ at end of pattern", end
    if msg.startswith("missing >, unterminated name"):
        return "syntax error in subpattern name (missing terminator)", end
    if msg.startswith("bad character range"):
        shown = msg.removeprefix("bad character range ")
        return "range out of order in character class", pos + len(shown) - 1
    return msg, pos


def validate_definition(
    definition: Any, operator: bool, compat: RabbitMQ = RABBITMQ_3_10
) -> str | None:
    """rabbit_policy:validation: what is wrong with a definition, or None. From 4.0 a
    delivery limit may be negative: no limit (v4.2.9 rabbit_policies.erl
    validate_policy0(<<"delivery-limit">>) takes any integer)."""
    if not isinstance(definition, dict):
        return f"definition must be a dictionary: {term(definition)}"
    if not definition:
        return "no policy provided"
    validators = VALIDATORS_4 if compat.v4 else VALIDATORS
    known = OPERATOR_KEYS & validators.keys() if operator else validators.keys()
    for key in sorted(definition):  # rabbit_policies validates in the map's key order
        if key in known:
            valid, says = validators[key]
            if key == "delivery-limit" and compat.v4:
                valid = _is_int
            if not valid(definition[key]):
                return f"{term(definition[key])} {says}"
    unknown = [(k, definition[k]) for k in sorted(definition) if k not in known]
    if unknown:
        return f"{pairs(unknown)} are not recognised policy settings"
    return None


def make_policy(
    vhost: str,
    name: str,
    pattern: Any,
    definition: Any,
    priority: Any = None,
    apply_to: Any = None,
    operator: bool = False,
    compat: RabbitMQ = RABBITMQ_3_10,
) -> Policy:
    """A policy from what an API or CLI sent, or :class:`PolicyError` with RabbitMQ's
    lines (rabbit_parameter_validation:proplist lists its findings last key first)."""
    priority = 0 if priority is None else priority
    apply_to = "all" if apply_to is None else apply_to
    found: list[str] = []
    if isinstance(priority, bool) or not isinstance(priority, (int, float)):
        found.append(f"priority should be a number, actually was {term(priority)}")
    if not isinstance(pattern, str):
        found.append(f"pattern should be a binary but was {term(pattern)}")
    else:
        err = regex_error(pattern)
        if err is not None:
            found.append(err)
    if compat.v4 and apply_to not in APPLY_TO_4:
        # rabbit_policy:apply_to_validation at v4.2.9 (rabbit_policy.erl:600-610)
        found.append(
            f"apply-to '{apply_to}' unrecognised; should be one of: 'queues', "
            "'classic_queues',  'quorum_queues', 'streams', 'exchanges', or 'all'"
        )
    elif not compat.v4 and apply_to not in APPLY_TO:
        found.append(
            f"apply-to '{apply_to}' unrecognised; should be 'queues', 'exchanges' or 'all'"
        )
    err = validate_definition(definition, operator, compat)
    if err is not None:
        found.append(err)
    if found:
        raise PolicyError(list(reversed(found)))
    return Policy(vhost, name, pattern, dict(definition), priority, apply_to, operator)


# ---------------------------------------------------------------- effective values
Rule = Callable[[Any, Any], Any]


def arg_wins(policy: Any, argument: Any) -> Any:
    return argument


def policy_wins(policy: Any, argument: Any) -> Any:
    return policy


def smaller(policy: Any, argument: Any) -> Any:
    return erlang_min(policy, argument)


def erlang_min(a: Any, b: Any) -> Any:
    """erlang:min: numbers order before every binary, so a number always wins."""
    a_num = isinstance(a, (int, float)) and not isinstance(a, bool)
    b_num = isinstance(b, (int, float)) and not isinstance(b, bool)
    if a_num and b_num:
        return a if a <= b else b
    if a_num:
        return a
    if b_num:
        return b
    return a if str(a) <= str(b) else b


def erlang_max(a: Any, b: Any) -> Any:
    """erlang:max: every number orders below every binary."""
    return b if erlang_min(a, b) is a else a


def policy_value(key: str, policy: Policy | None, operator: Policy | None) -> Any:
    """rabbit_policy:get: the value the policies give ``key`` (None: neither has it)."""
    value = policy.definition.get(key) if policy is not None else None
    op_value = operator.definition.get(key) if operator is not None else None
    if value is None:
        return op_value
    if op_value is None:
        return value
    return merge_value(key, value, op_value)


def merge_value(key: str, value: Any, op_value: Any) -> Any:
    """rabbit_policies:merge_policy_value: the smaller for the operator keys, the
    operator's for booleans."""
    if key in OPERATOR_KEYS:
        return erlang_min(value, op_value)
    return op_value


def effective_definition(policy: Policy | None, operator: Policy | None) -> dict[str, Any]:
    """rabbit_policy:effective_definition: both definitions merged key by key, in key
    order; {} when neither policy applies."""
    definition = policy.definition if policy is not None else {}
    op_definition = operator.definition if operator is not None else {}
    return {
        key: policy_value(key, policy, operator)
        for key in sorted(set(definition) | set(op_definition))
    }


class Governed:
    """What policies govern, an exchange or a queue: the policy and operator policy that
    apply to it (VirtualHost.apply_policies sets them), and the settings it takes from
    its arguments and them."""

    policy: Policy | None
    operator_policy: Policy | None

    def apply_policies(self, policy: Policy | None, operator_policy: Policy | None) -> bool:
        """The policies that apply now: when they changed, it takes the settings they
        give at once (rabbit_exchange:policy_changed, rabbit_amqqueue:policy_changed).
        Whether they did."""
        if policy == self.policy and operator_policy == self.operator_policy:
            return False
        self.policy = policy
        self.operator_policy = operator_policy
        self.configure()
        return True

    def configure(self) -> None:
        """Take the settings from arguments and policies: when it is made, and again
        whenever its policies change."""

    @property
    def effective_policy_definition(self) -> dict[str, Any]:
        return effective_definition(self.policy, self.operator_policy)


def resolve(
    key: str,
    arguments: Mapping[str, Any],
    policy: Policy | None,
    operator: Policy | None,
    rule: Rule,
) -> Any:
    """rabbit_queue_type_util:args_policy_lookup: the value an object acts on for
    ``key``: its ``x-`` argument, the policies' value, or, with both, ``rule``."""
    value = policy_value(key, policy, operator) if policy or operator else None
    argument = arguments.get("x-" + key)
    if value is None:
        return argument
    if argument is None:
        return value
    return rule(value, argument)


# ----------------------------------------------------------------------- the store
def by_priority(policies: Iterable[Policy]) -> list[Policy]:
    """Lowest priority first, as RabbitMQ lists them (ties by name)."""
    return sorted(policies, key=lambda p: (p.priority, p.name))


class Policies:
    """The policies and operator policies of one vhost."""

    def __init__(self) -> None:
        self.policies: dict[str, Policy] = {}
        self.operator_policies: dict[str, Policy] = {}

    def table(self, operator: bool) -> dict[str, Policy]:
        return self.operator_policies if operator else self.policies

    def __bool__(self) -> bool:
        return bool(self.policies or self.operator_policies)

    def set(self, policy: Policy) -> bool:
        """Add or replace; whether it changed anything."""
        table = self.table(policy.operator)
        if table.get(policy.name) == policy:
            return False
        table[policy.name] = policy
        return True

    def delete(self, name: str, operator: bool) -> Policy | None:
        return self.table(operator).pop(name, None)

    def match(
        self,
        kind: str,
        name: str,
        unsupported: frozenset[str] = frozenset(),
        queue_type: str = "",
    ) -> tuple[Policy | None, Policy | None]:
        """The policy and the operator policy that apply to the ``kind`` named ``name``
        (a queue of ``queue_type``): the matching one of the highest priority of each
        (rabbit_policy:match)."""
        return (
            _best(self.policies.values(), kind, name, unsupported, queue_type),
            _best(self.operator_policies.values(), kind, name, unsupported, queue_type),
        )


def _best(
    policies: Iterable[Policy],
    kind: str,
    name: str,
    unsupported: frozenset[str],
    queue_type: str = "",
) -> Policy | None:
    best: Policy | None = None
    for p in policies:
        if p.matches(kind, name, unsupported, queue_type) and (
            best is None
            or p.priority > best.priority
            or (p.priority == best.priority and p.name < best.name)
        ):
            best = p
    return best
