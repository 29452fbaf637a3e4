"""Topic exchange: dot-separated words, ``*`` matches one word, ``#`` zero or more.

Bindings live in a trie of words; lookups are cached per routing key and the cache is
dropped whenever a binding changes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.broker.exchanges.base import Binding, Destination, Exchange

if TYPE_CHECKING:
    from leveret.broker.message import Message

_CACHE_MAX = 4096


def words(key: str) -> list[str]:
    """A key's words; the empty key has none (so '*' does not match it, '#' does)."""
    return key.split(".") if key else []


class _Node:
    __slots__ = ("children", "destinations")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.destinations: dict[Destination, int] = {}


def _match(node: _Node, words: list[str], i: int, out: dict[Destination, None]) -> None:
    children = node.children
    if i == len(words):
        for d in node.destinations:
            out[d] = None
        hash_node = children.get("#")
        if hash_node is not None:
            _match(hash_node, words, i, out)
        return
    hash_node = children.get("#")
    if hash_node is not None:
        # '#' swallows zero or more words.
        for j in range(i, len(words) + 1):
            _match(hash_node, words, j, out)
    word_node = children.get(words[i])
    if word_node is not None:
        _match(word_node, words, i + 1, out)
    star = children.get("*")
    if star is not None:
        _match(star, words, i + 1, out)


class TopicExchange(Exchange):
    type_name = "topic"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._root = _Node()
        self._cache: dict[str, list[Destination]] = {}

    def _index_add(self, binding: Binding) -> None:
        node = self._root
        for word in words(binding.routing_key):
            node = node.children.setdefault(word, _Node())
        node.destinations[binding.destination] = node.destinations.get(binding.destination, 0) + 1
        self._cache.clear()

    def _index_remove(self, binding: Binding) -> None:
        path: list[tuple[_Node, str]] = []
        node = self._root
        for word in words(binding.routing_key):
            nxt = node.children.get(word)
            if nxt is None:
                return
            path.append((node, word))
            node = nxt
        count = node.destinations.get(binding.destination, 0) - 1
        if count > 0:
            node.destinations[binding.destination] = count
        else:
            node.destinations.pop(binding.destination, None)
        # prune empty branches
        for parent, word in reversed(path):
            child = parent.children[word]
            if child.children or child.destinations:
                break
            del parent.children[word]
        self._cache.clear()

    def route(self, message: Message) -> list[Destination]:
        key = message.routing_key
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        out: dict[Destination, None] = {}
        _match(self._root, words(key), 0, out)
        result = list(out)
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[key] = result
        return result


def topic_matches(binding_key: str, routing_key: str) -> bool:
    """Whether one binding key matches one routing key (used by tests and tools)."""
    node = _Node()
    cursor = node
    for word in words(binding_key):
        cursor = cursor.children.setdefault(word, _Node())
    sentinel = _Node()
    cursor.destinations[sentinel] = 1  # type: ignore[index]
    out: dict[Destination, None] = {}
    _match(node, words(routing_key), 0, out)
    return bool(out)
