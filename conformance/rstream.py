"""rstream, the Python client of RabbitMQ's stream protocol: how scripts/conformance runs its
own tests against Leveret in its RabbitMQ 4.2 mode (issue 38).

The stream features those tests reach — single active consumer, super streams, filtering,
the commands RabbitMQ 3.11 to 3.13 added — are not in RabbitMQ 3.10.8, the broker that runs
here, so the suite runs against Leveret alone and what does not pass is listed with its
reason in conformance/rstream.txt.

The code: the repository's tag ``0.28.0`` (commit f858d85). Its package says version 0.20.8:
the tag is the 0.20.8 release as published (five commits after "bump to 0.20.8", e615819,
that change only the CI's publishing files), and PyPI has no sdist of 0.20.8. As upstream's
CI does (.github/workflows/test.yaml: ``poetry install --no-root``, then ``poetry run
pytest`` in the repository's root), the tests import the tag's own ``rstream`` package from
the tree, with the dependencies at the versions of the tag's poetry.lock.

The broker, as that workflow starts it: RabbitMQ 3.13.1 with the rabbitmq_stream plugin on
5552, management on 15672, guest/guest, and ``-rabbitmq_stream advertised_host localhost``:
a stream's leader is advertised as ``localhost``, where the tests dial (rstream checks that a
producer's or consumer's connection reached the host and port the metadata names, and
reconnects until it does). Leveret takes those places in a network namespace of its own:
the same ports, ``stream_advertised_host = "localhost"``.
"""

from __future__ import annotations

from pathlib import Path

from conformance.leveretonly import GitTree, LeveretOnly, Rule

HERE = Path(__file__).resolve().parent

# The tag's poetry.lock: the library's dependencies and the test tools (not the linters its
# CI also runs); pytest-timeout, which scripts/conformance runs every suite with.
INSTALL = (
    "requests==2.31.0",
    "urllib3==2.0.2",
    "certifi==2021.10.8",
    "charset-normalizer==3.1.0",
    "idna==3.4",
    "mmh3==4.0.0",
    "typing-extensions==4.11.0",
    "pytest==7.4.0",
    "pytest-asyncio==0.15.1",
    "pytest-timeout==2.4.0",
)

TREE = GitTree(
    repo_env="LEVERET_RSTREAM_REPO",
    repo_default="/work/.mirror/qweeze+rstream/repo",
    tag="0.28.0",
    commit="f858d8597c8967fbc9f57c519e2731dc47c19e3c",
    # the package the tests import, the tests, and pyproject.toml (pytest's root)
    paths=("rstream", "tests", "pyproject.toml"),
)


def config(tree: Path) -> str:
    return "\n".join(
        (
            "# rstream 0.20.8's CI broker (.github/workflows/test.yaml)",
            'stream_advertised_host = "localhost"',
            "",
        )
    )


PRODUCT = (
    'asserts that the server\'s peer properties say product "RabbitMQ": Leveret names '
    "itself in the stream protocol's peer properties (only AMQP 1.0's open says "
    '"RabbitMQ", which RabbitMQ\'s official AMQP 1.0 clients refuse to do without)'
)
FRAME_TOO_LARGE = (
    "the test's producer sends one Publish frame of about 1.5 MB after agreeing a frame_max "
    "of 1 MiB: RabbitMQ 4.2 (since 4.2.6: rabbit_stream_core's frame_size_ok, v4.2.9) closes "
    'the connection with FRAME_TOO_LARGE, "frame too large", and so does Leveret in its 4.2 '
    "mode; the RabbitMQ 3.13.1 of rstream's CI did not check"
)
FILTER_ENCODING = (
    "rstream 0.20.8 encodes an AMQP message with a str body wrongly (any broker): its own "
    'amqp_decoder returns another body, and fails from application property "id": "10" on, '
    "which ends the client's reading of a chunk at its 11th message; the test then finds one "
    'id "1" per chunk and waits for 10, one per Publish frame. Its 10 frames are sent without '
    "waiting, and Leveret makes one chunk of the frames it reads at once, as osiris's writer "
    "makes one of the messages waiting for it: 3 chunks here"
)
CHUNKING = (
    "counts the chunks the broker made of one Publish frame of 4,999 messages: Leveret "
    "stores one frame as one chunk (up to 512 KiB), where osiris's writer cuts its batches "
    "by its own timing, so the last chunk holds other messages; not a 4.2 feature"
)

TIMED = (
    "sends 10,000 messages and checks, after a fixed 1 s, that the consumers got them all; "
    "the client sends them from a timer every 0.5 s, over a connection per partition that "
    "it opens when the first message for it comes, partition by partition: alone it passes "
    "(the last partition's messages reach the broker about 0.5 s before the check), but in "
    "a full run of the test suite on this 2-core machine the last partition's 3,297 came "
    "too late, in two runs and in a run again at once after one of them: the client's own "
    "pace, on any broker"
)

RULES = (
    Rule(PRODUCT, test=r"test_peer_properties$"),
    Rule(FRAME_TOO_LARGE, test=r"test_publishing_several_messages"),
    Rule(FILTER_ENCODING, test=r"test_consume_filtering$"),
    Rule(CHUNKING, test=r"test_offset_type_last$"),
    Rule(TIMED, test=r"test_consume_superstream_with_(sac|callback)_"),
)

SUITE = LeveretOnly(
    listing=HERE / "rstream.txt",
    tree=TREE,
    mode=("--rabbitmq-version", "4.2"),
    rules=RULES,
    config=config,
    from_tree=True,
)
