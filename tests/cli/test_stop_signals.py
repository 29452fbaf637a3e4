"""The ingest's signal handler (leveret ingest, as ``leveret up`` runs it): Ctrl-C to the
process group and then ``up``'s own SIGTERM are one request to stop, and a signal that
comes while the handler is still setting the event must not wait for the event's lock."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest

from leveret.cli.pipeline import _stop_on_signals


@pytest.fixture
def handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def handle(signum: int) -> None:
    handler = signal.getsignal(signum)
    assert callable(handler)
    handler(signum, None)


def test_a_second_signal_while_the_first_sets_the_event_does_not_wait(handlers: None) -> None:
    stop = _stop_on_signals()
    handle(signal.SIGINT)
    assert stop.is_set()
    # The main thread inside Event.set (its lock held) when up's SIGTERM comes: the handler
    # runs on that same thread, so any wait for the lock there is forever. Here the lock is
    # held by this thread and the handler runs on another, which must come back at once.
    done = threading.Event()
    with stop._cond:  # type: ignore[attr-defined]
        worker = threading.Thread(target=lambda: (handle(signal.SIGTERM), done.set()))
        worker.start()
        worker.join(10)
        came_back = done.is_set()
    worker.join()
    assert came_back


def test_the_same_signal_again_interrupts_at_once(handlers: None) -> None:
    stop = _stop_on_signals()
    handle(signal.SIGTERM)
    handle(signal.SIGINT)  # up's Ctrl-C after its SIGTERM: the same request
    assert stop.is_set()
    with pytest.raises(KeyboardInterrupt):
        handle(signal.SIGTERM)
