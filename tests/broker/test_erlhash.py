"""Erlang's phash2 and the consistent-hash exchange's jump hash, reproduced: values an
Erlang/OTP 25 VM gave (erlang:phash2/1; rand:seed_s(exs1024, {H,H,H}) and the jump hash of
rabbit_exchange_type_consistent_hash)."""

from __future__ import annotations

import pytest

from leveret.broker.exchanges.erlhash import Atom, Exs1024, jump_consistent_hash, phash2

PHASH2 = [
    (b"", 13708901),
    (b"a", 112802447),
    (b"abc", 98228475),
    (b"key-1", 5452885),
    (b"hello world, this is long", 86224811),
    (b"0123456789ab", 115360506),
    (b"0123456789abc", 67923675),
    (Atom("undefined"), 45914356),
    ((Atom("longstr"), b"abc"), 101716503),
    ((Atom("signedint"), 5), 40839585),
    ((Atom("signedint"), -5), 39932925),
    ((Atom("bool"), True), 32030443),
]

JUMP = {
    b"": (0, 0, 9, 45),
    b"a": (1, 1, 6, 47),
    b"abc": (1, 1, 5, 88),
    b"key-1": (1, 1, 1, 64),
    b"hello world, this is long": (1, 2, 2, 36),
    b"0123456789ab": (1, 1, 5, 5),
    b"0123456789abc": (1, 2, 7, 58),
}


@pytest.mark.parametrize(("term", "expected"), PHASH2)
def test_phash2(term: object, expected: int) -> None:
    assert phash2(term) == expected


@pytest.mark.parametrize("key", list(JUMP))
def test_jump_consistent_hash(key: bytes) -> None:
    got = tuple(jump_consistent_hash(phash2(key), n) for n in (2, 3, 10, 100))
    assert got == JUMP[key]


def test_exs1024_draws() -> None:
    rng = Exs1024(7, 7, 7)
    assert f"{rng.uniform():.17g} {rng.uniform():.17g}" == (
        "0.37838308512588215 0.98850308901766903"
    )
