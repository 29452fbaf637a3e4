"""Osiris's chunk Bloom filter (:mod:`leveret.protocol.stream.bloom`): Erlang's phash2 and
osiris_bloom's filters against vectors the Erlang runtime made (erlang:phash2/1,2 on OTP
25; osiris_bloom.erl of osiris v1.10.3 compiled with erlc), and a matcher's agreement with
the filter it reads."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveret.protocol.stream import bloom

# erlang:phash2(V), erlang:phash2(V, 127), erlang:phash2([V]), erlang:phash2([V], 127)
PHASH2 = [
    (b"", 13708901, 77, 38220213, 9),
    (b"a", 112802447, 100, 53691870, 93),
    (b"apple", 98295965, 4, 100705874, 84),
    (b"banana", 70901321, 85, 80208765, 22),
    (b"hello world!", 25699699, 46, 124688779, 122),
    (b"0123456789abcdef", 121146389, 21, 87452270, 74),
    (b"californiaXYZ123", 128133222, 75, 33999675, 73),
    ("é".encode(), 87215157, 5, 61451803, 2),
]


@pytest.mark.parametrize(("value", "h", "h127", "hl", "hl127"), PHASH2)
def test_phash2_as_erlang_computes_it(value: bytes, h: int, h127: int, hl: int, hl127: int) -> None:
    # phash2/1 is the hash masked to 27 bits
    assert bloom.phash2(value, 1 << 32) & ((1 << 27) - 1) == h
    assert bloom.phash2(value, 127) == h127
    assert bloom.phash2_list(value, 1 << 32) & ((1 << 27) - 1) == hl
    assert bloom.phash2_list(value, 127) == hl127


# osiris_bloom:to_binary of the values inserted into osiris_bloom:init(Size)
FILTERS = [
    ([b"apple"], 16, "04000000000000000000040000000000"),
    ([b"apple", b"banana", b""], 16, "84000100000000000000060000000000"),
    (
        [b"california", b"texas", b"new york"],
        32,
        "0040010000000040000000000400080000000000000000000000000000020000",
    ),
    ([b""], 16, ""),
    ([], 16, ""),
]


@pytest.mark.parametrize(("values", "size", "hexed"), FILTERS)
def test_filters_as_osiris_builds_them(values: list[bytes], size: int, hexed: str) -> None:
    assert bloom.build(values, size).hex() == hexed


def test_a_255_byte_filter() -> None:
    got = bloom.build([b"x"], 255)
    assert len(got) == 255
    assert [i for i, byte in enumerate(got) if byte] == [58, 218]
    assert got[58] == got[218] == 0x02


def test_the_matcher_as_osiris_matches() -> None:
    """is_match of a matcher for banana: false on a filter of apple, true on one of banana
    (osiris_bloom:is_match, the same runtime)."""
    banana = bloom.Matcher([b"banana"])
    assert not banana.matches(bloom.build([b"apple"]))
    assert banana.matches(bloom.build([b"banana"]))
    # no filter: only a reader that takes messages without a value
    assert not banana.matches(b"")
    assert bloom.Matcher([b"banana"], match_unfiltered=True).matches(b"")
    # bit 0: the chunk has a message without a value
    assert bloom.Matcher([b"z"], match_unfiltered=True).matches(bloom.build([b"apple", None]))
    assert not bloom.Matcher([b"z"], match_unfiltered=True).matches(bloom.build([b"apple"]))


def test_sizes_out_of_range_are_refused() -> None:
    for size in (15, 256):
        with pytest.raises(ValueError, match="16 to 255"):
            bloom.build([b"a"], size)


_value = st.binary(min_size=1, max_size=20)


@given(st.lists(_value, min_size=1, max_size=8), _value, st.integers(16, 255))
def test_no_false_negatives(values: list[bytes], probe: bytes, size: int) -> None:
    """A Bloom filter never says no to a value it holds (and a matcher of a value not held
    may say yes: the client filters messages itself)."""
    bits = bloom.build(values, size)
    for v in values:
        assert bloom.Matcher([v]).matches(bits)
        assert bloom.Matcher([probe, v]).matches(bits)
