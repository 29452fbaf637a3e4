"""RabbitMQ's official AMQP 1.0 client for Python (``rabbitmq-amqp-python-client``): how
scripts/conformance runs its own tests and examples against Leveret (issue 36).

The pair: the PyPI release 0.6.0 (the library, installed from its sdist) and the tests and
examples of its repository's tag v0.6.0, the same code (the tag's package is the sdist's,
file for file). The sdists ship no tests (0.6.0's nor 1.0.x's), and 1.0.x has no tag in
the mirror read here, so 0.6.0 is the newest pair that can be matched.

Upstream runs them (.github/workflows/build-test.yaml: ``poetry run pytest`` in the
repository's root) against RabbitMQ 4.2 in Docker, set up by .ci/ubuntu/gha-setup.sh on
localhost: 5672 (AMQP), 5671 (AMQPS with .ci/certs), 15672 (management; the tests' HTTP
calls in tests/http_requests.py), guest/guest, and the configuration in .ci/ubuntu/
(rabbitmq.conf, advanced.config, enabled_plugins). Here Leveret takes those places in a
network namespace of its own, so the tests and examples run with no change at all; Leveret
runs in RabbitMQ 4 mode (``--rabbitmq-version 4.2``) where it has that switch.

The broker configuration, key by key (what ``config`` writes for Leveret):

- ``loopback_users = none`` then ``loopback_users.guest = true``: guest from localhost
  only, as Leveret's ``loopback_users``.
- ``listeners.tcp.default = 5672``, ``listeners.ssl.default = 5671``: the same ports.
- ``ssl_options`` (cacertfile, certfile, keyfile, verify_peer, fail_if_no_peer_cert =
  false): Leveret's ``[tls]`` with the same files. ``ssl_options.depth = 1`` has no Leveret
  key; the suite's certificates are one CA deep, which any depth accepts.
- ``auth_mechanisms`` are commented out: RabbitMQ's defaults (Leveret's).
- ``auth_backends``: internal (Leveret's user database), then
  ``rabbit_auth_backend_oauth2`` with the HS256 key in advanced.config: Leveret has no
  OAuth 2.0 backend (the rules below say which tests need it).
- ``log.*``, ``reverse_dns_lookups = false``: logging, and Leveret does no reverse lookups.
- enabled_plugins: rabbitmq_management, rabbitmq_stream and rabbitmq_stream_management are
  built into Leveret; AMQP 1.0, in RabbitMQ 4's core, is Leveret's rabbitmq_amqp1_0 plugin,
  enabled; rabbitmq_auth_mechanism_ssl adds SASL EXTERNAL, offered only where
  ``auth_mechanisms`` lists it (not here); rabbitmq_top and rabbitmq_auth_backend_oauth2
  are not in Leveret (no test reads rabbitmq_top).
"""

from __future__ import annotations

from pathlib import Path

from conformance.leveretonly import (
    ClientRace,
    Example,
    GitTree,
    LeveretOnly,
    Rule,
    renew_if_expired,
)

HERE = Path(__file__).resolve().parent

SDIST = "rabbitmq-amqp-python-client==0.6.0"
# pyproject.toml's dependencies and dev group at the versions of the tag's poetry.lock,
# but for the linters (black, flake8, isort, mypy), which upstream's CI runs beside pytest;
# and pytest-timeout, which scripts/conformance runs every suite with.
INSTALL = (
    "python-qpid-proton==0.40.0",
    "typing-extensions==4.15.0",
    "packaging==24.2",
    "pyjwt==2.10.1",
    "pika==1.3.2",
    "pytest==8.4.1",
    "pytest-asyncio==1.2.0",
    "requests==2.32.5",
    "pytest-timeout==2.4.0",
)

TREE = GitTree(
    repo_env="LEVERET_AMQP_PYTHON_CLIENT_REPO",
    repo_default="/work/.mirror/rabbitmq+rabbitmq-amqp-python-client/repo",
    tag="v0.6.0",
    commit="87ceafc1a7f28c1de3beab647c5574e7db119fbd",
    # pyproject.toml for pytest's settings (asyncio_mode = "auto"); .ci for the
    # certificates the tests and the TLS examples read by relative paths. Not the package:
    # the tests import the installed sdist.
    paths=("tests", "examples", ".ci", "pyproject.toml"),
)


def certs(tree: Path) -> Path:
    return tree / ".ci" / "certs"


def config(tree: Path) -> str:
    """.ci/ubuntu/rabbitmq.conf in Leveret's keys (the module docstring says what is not)."""
    c = certs(tree)
    return "\n".join((
        "# rabbitmq-amqp-python-client v0.6.0, .ci/ubuntu/rabbitmq.conf",
        'loopback_users = ["guest"]',
        "amqp_port = 5672",
        "amqps_port = 5671",
        "http_port = 15672",
        "[tls]",
        f'cacertfile = "{c / "ca_certificate.pem"}"',
        f'certfile = "{c / "server_localhost_certificate.pem"}"',
        f'keyfile = "{c / "server_localhost_key.pem"}"',
        'verify = "verify_peer"',
        "fail_if_no_peer_cert = false",
        "",
    ))


def renew_certificates(tree: Path) -> list[str]:
    """The tag's server and client certificates for localhost were valid for a year, to
    2026-03-31: past that, every TLS test fails on any broker with "certificate verify
    failed". Both are signed again with the suite's own CA (its key is in .ci/certs), same
    keys and names; the .p12 copies are for Windows only and left alone."""
    c = certs(tree)
    renewed = []
    for name in ("server_localhost_certificate.pem", "client_localhost_certificate.pem"):
        if renew_if_expired(c / name, c / "ca_certificate.pem", c / "ca_key.pem"):
            renewed.append(f".ci/certs/{name} had expired: signed again by the suite's CA")
    return renewed


OAUTH = (
    "needs RabbitMQ's OAuth 2.0 backend (rabbitmq_auth_backend_oauth2: a JWT signed with "
    "the HS256 key of the suite's advanced.config as the password, expiry, refresh through "
    "PUT /auth/tokens): Leveret logs users in from its own user database only, and issue 36 "
    "asks for SASL PLAIN, ANONYMOUS and EXTERNAL, not OAuth 2.0"
)
CLIENT_OFFSET_BUG = (
    "the client's own bug, on any broker: its reconnection path calls "
    "StreamConsumerOptions.offset(), which 0.6.0 does not have (consumer.py), so the test "
    "fails with AttributeError once the connection is back"
)
SETTLED_ACCEPT = (
    "the example accepts each reply, but a direct reply-to consumer's link receives settled "
    "(the client asks snd-settle-mode settled, which RabbitMQ 4.2 requires of a volatile "
    "queue: rabbit_amqp_session v4.2.9, the dynamic source), and the client's accept() "
    "raises on a settled delivery (\"auto-settle on, message is already disposed\"): the "
    "same on any broker"
)

# The client's asyncio classes run each call of its blocking classes in the event loop's
# default executor (asyncio.to_thread), so one connection's proton objects are used from
# several threads: the thread that ran a publish drops its message and delivery (their
# finalizers call pn_decref) while another thread runs the next publish, and cffi lets go of
# the GIL around every C call. Proton is not thread-safe; under load the process dies of
# SIGSEGV or SIGABRT in proton's code (seen in _wrapper.__del__, Message.__del__,
# pn_delivery, Message._pre_encode), on any broker: upstream's pull request that added the
# classes (#86) left "Validate thread safety" unchecked.
PROTON_THREADS = ClientRace(
    frames=("/qpid/proton/", "/cproton.py"),
    reason="the client's asyncio wrapper drives one connection's proton objects from "
    "several threads (asyncio.to_thread), and proton is not thread-safe",
)

RULES = (
    # what Leveret does not have, whatever else fails first
    Rule(OAUTH, test=r"(?i)oauth"),
    # what fails on any broker
    Rule(CLIENT_OFFSET_BUG, error=r"'StreamConsumerOptions' object has no attribute 'offset'"),
    Rule(SETTLED_ACCEPT, test=r"direct_reply_to\.py", error=r"message is already disposed"),
)

# What each example prints once its work is done, and what it must not print then: one
# message more than it sent. Those that consume run until Ctrl-C, as their README says.
EXAMPLES = (
    Example("examples/getting_started/getting_started.py", done=r"^received all messages$",
            forbid=r"^count 101$"),
    Example("examples/getting_started/getting_started_async.py", done=r"^count 100$",
            forbid=r"^count 101$"),
    Example("examples/direct_reply_queue/direct_reply_to.py",
            done=r"^received all messages$", forbid=r"^count 201$"),
    Example("examples/pre_settled_consumer/example_pre_settled_consumer.py",
            done=r"^Received all messages$", forbid=r"^Processed 51 messages$"),
    # 50,000 messages, each publish waiting for its outcome
    Example("examples/reconnection/reconnection_example.py", done=r"^closing receiver$",
            timeout=180),
    Example("examples/reconnection/reconnection_example_async.py",
            done=r"^received all messages$", timeout=180),
    # the client sends 10 requests a second apart and ends by itself
    Example("examples/rpc/client.py", beside="examples/rpc/server.py",
            beside_ready=r"^Responder listening on address",
            done=r"^Received response: hello 9-from the server - correlation_id: 9$",
            interrupt=False),
    # only the 100 messages sent after the timestamp
    Example("examples/stream_consumer_offset_datetime/"
            "example_stream_consumer_offset_datetime.py",
            done=r"\[Total Consumed: 100\]$",
            forbid=r"\[Total Consumed: 101\]$|Received message: First send"),
    # the two share one stream, which only the asynchronous one deletes at its end: it
    # runs first, or it would read the other's 200 messages too (on any broker)
    Example("examples/streams/example_with_streams_async.py", done=r"^count 199$",
            forbid=r"^count 200$"),
    Example("examples/streams/example_with_streams.py", done=r"^count 199$",
            forbid=r"^count 200$"),
    # banana, subject yellow (odd i), from italy (i divisible by 3): i = 3, 9, ..., 99
    Example("examples/streams_with_filters/example_streams_with_filters.py",
            done=r"\[Total Consumed: 17\]$", forbid=r"\[Total Consumed: 18\]$|apple: "),
    Example("examples/streams_with_sql_filters/example_streams_with_sql_filters.py",
            done=r"\[Total Consumed: 100\]$", forbid=r"\[Total Consumed: 101\]$|apple: "),
    Example("examples/tls/tls_example.py", done=r"^closing receiver$", forbid=r"^count 100$"),
    Example("examples/tls/tls_example_async.py", done=r"^received all messages$",
            forbid=r"^count 100$"),
    Example("examples/oauth/oAuth2.py", done=r"^closing receiver$", forbid=r"^count 100$"),
    Example("examples/oauth/oAuth2_async.py", done=r"^received all messages$",
            forbid=r"^count 100$"),
)

SUITE = LeveretOnly(
    listing=HERE / "amqp-python-client.txt",
    tree=TREE,
    mode=("--rabbitmq-version", "4.2"),
    # RabbitMQ 4 serves AMQP 1.0 in its core (it keeps rabbitmq_amqp1_0 as an empty
    # plugin); Leveret, as RabbitMQ 3.10 does, through this plugin
    plugins=("rabbitmq_amqp1_0",),
    rules=RULES,
    examples=EXAMPLES,
    config=config,
    prepare=renew_certificates,
    client_race=PROTON_THREADS,
)
