"""Fuzzed AMQP sessions against a live Leveret: valid sessions (handshake, channels,
every client method with drawn arguments and field tables of every type, publishes with
drawn content headers and bodies, heartbeats), mutated at the frame layer (type, channel,
size, frame-end octet, truncation, duplication, garbage) and cut into sends anywhere.

After every case the broker is up, its log holds no traceback or error, and a witness
connection opened before the fuzzing (a consumer with messages waiting, a durable queue
of persistent messages) has noticed nothing. At the end the witness's messages are all
delivered intact, and the durable ones survive a restart.

In the suite: 400 derandomized cases (~20-40 s). ``LEVERET_FUZZ_EXAMPLES=N`` (with
``LEVERET_FUZZ_SECONDS``, default 3600) runs a campaign instead that records every
distinct failure with the smallest example it saw, minimizes each, and writes them to
``$LEVERET_FUZZ_DIR/amqp.json`` (default ./fuzz-campaign)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given

from tests.support.fuzzing import (
    CAMPAIGN_EXAMPLES,
    Campaign,
    LogWatch,
    Witness,
    describe_exception,
    durable_after_restart,
    fresh_broker,
    fuzz_cases,
    harm,
    in_suite_settings,
    run_amqp_case,
)

IN_SUITE_EXAMPLES = 400


class Target:
    """The broker under fuzzing, its witness and its log."""

    def __init__(self) -> None:
        self.broker = fresh_broker()
        self.witness = Witness(self.broker)
        self.watch = LogWatch(self.broker)

    def restart(self) -> None:
        self.witness.close()
        self.broker.stop()
        self.__init__()  # type: ignore[misc]

    def stop(self) -> None:
        self.witness.close()
        self.broker.stop()

    def failure(self, chunks: list[bytes]) -> tuple[str, str] | None:
        """Run one case; what went wrong, as (signature, detail), or None."""
        try:
            outcome = run_amqp_case(self.broker, chunks)
        except OSError as exc:
            outcome = f"socket: {describe_exception(exc)}"
        harmed = harm(self.watch, self.witness)
        if harmed is not None:
            return harmed
        if outcome not in ("eof", "reset"):
            return f"connection: {outcome}", outcome
        return None


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    t = Target()
    yield t
    t.stop()


@pytest.mark.skipif(CAMPAIGN_EXAMPLES > 0, reason="the campaign runs instead")
@in_suite_settings(IN_SUITE_EXAMPLES, HealthCheck.large_base_example)
@given(case=fuzz_cases())
def test_fuzzed_sessions_leave_the_broker_and_others_alone(
    target: Target, case: list[bytes]
) -> None:
    assert target.failure(case) is None


def test_the_witness_messages_are_all_deliverable_and_survive_a_restart(target: Target) -> None:
    target.witness.check()
    target.witness.deliverable()
    target.witness.close()
    durable_after_restart(target.broker).stop()


# ------------------------------------------------------------------ the campaign
def minimize(t: Target, chunks: list[bytes], sig: str, budget: int = 400) -> list[bytes]:
    """A smaller input with the same failure: the sends joined into one, then bytes
    removed (delta debugging), ``budget`` runs at most."""
    runs = 0

    def fails(candidate: list[bytes]) -> bool:
        nonlocal runs
        runs += 1
        got = t.failure(candidate)
        if got is not None and got[0].startswith("witness"):
            t.restart()
        return got is not None and got[0] == sig

    if fails([b"".join(chunks)]):
        chunks = [b"".join(chunks)]
    data = b"".join(chunks)
    if len(chunks) > 1:
        return chunks
    n = 2
    while len(data) >= 2 and runs < budget:
        size = len(data) // n
        reduced = False
        for i in range(n):
            candidate = data[: i * size] + data[(i + 1) * size :]
            if runs >= budget:
                break
            if candidate and fails([candidate]):
                data, n, reduced = candidate, max(n - 1, 2), True
                break
        if not reduced:
            if n >= len(data):
                break
            n = min(len(data), n * 2)
    return [data]


@pytest.mark.skipif(CAMPAIGN_EXAMPLES == 0, reason="LEVERET_FUZZ_EXAMPLES runs a campaign")
@pytest.mark.timeout(0)  # it runs for LEVERET_FUZZ_SECONDS, past the suite's per-test limit
def test_campaign() -> None:
    campaign = Campaign("amqp")
    t = Target()

    def check(case: list[bytes]) -> None:
        got = t.failure(case)
        if got is not None:
            sig, detail = got
            campaign.record(sig, detail, case, sum(map(len, case)))
            if sig.startswith(("witness", "connection: socket")) or (
                t.broker.process is not None and t.broker.process.poll() is not None
            ):
                t.restart()

    try:
        campaign.drive(fuzz_cases(), check)
        for failure in campaign.failures.values():
            failure.example = {
                "smallest seen": failure.example,
                "minimized": minimize(t, failure.example, failure.signature),
            }
        campaign.save()
    finally:
        t.stop()
    assert not campaign.failures, [f.signature for f in campaign.failures.values()]
