"""One contract for every message store: what was added and not removed comes back, in
order, after a reopen."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from leveret.store.messages import FileMessageStore


def file_store(path: Path) -> tuple[Any, Callable[[], Any]]:
    store = FileMessageStore(path)

    def reopen() -> Any:
        store.close()
        return FileMessageStore(path)

    return store, reopen


@pytest.mark.parametrize("make", [file_store])
def test_store_contract(tmp_path: Path, make: Callable[[Path], Any]) -> None:
    store, reopen = make(tmp_path)
    for i in range(6):
        store.add("/", "q", i + 1, "ex", "rk", b"\x00\x00", f"m{i}".encode())
    store.add("/", "other", 7, "", "other", b"\x00\x00", b"o")
    store.add("v", "q", 8, "", "q", b"\x00\x00", b"v")
    store.remove("/", "q", 2)
    store.drop_queue("/", "other")
    store.sync()
    store = reopen()
    records = store.load()
    assert [(r[0], r[1], r[2], r[6]) for r in records] == [
        ("/", "q", 1, b"m0"),
        ("/", "q", 3, b"m2"),
        ("/", "q", 4, b"m3"),
        ("/", "q", 5, b"m4"),
        ("/", "q", 6, b"m5"),
        ("v", "q", 8, b"v"),
    ]
    assert records[0][3:6] == ("ex", "rk", b"\x00\x00")


def test_file_store_ignores_a_torn_tail(tmp_path: Path) -> None:
    store = FileMessageStore(tmp_path)
    store.add("/", "q", 1, "", "q", b"\x00\x00", b"whole")
    store.close()
    with open(tmp_path / "messages.log", "ab") as f:
        f.write(b"A\x00\x00\x01\x00partial")
    again = FileMessageStore(tmp_path)
    assert [r[6] for r in again.load()] == [b"whole"]
