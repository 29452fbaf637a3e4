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

from conformance.leveretonly import Example, GitTree, LeveretOnly, Rule, renew_if_expired

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


def server_args(tree: Path) -> list[str]:
    # on every address family, as RabbitMQ listens: localhost may be ::1 to the client;
    # the stream protocol on its default port, as the enabled rabbitmq_stream plugin
    return ["--amqp-port", "5672", "--http-port", "15672", "--bind", "::",
            "--stream-port", "5552"]


OAUTH = (
    "needs RabbitMQ's OAuth 2.0 backend (rabbitmq_auth_backend_oauth2: a JWT signed with "
    "the HS256 key of the suite's advanced.config as the password, expiry, refresh through "
    "PUT /auth/tokens): Leveret logs users in from its own user database only, and issue 36 "
    "asks for SASL PLAIN, ANONYMOUS and EXTERNAL, not OAuth 2.0"
)
NO_AMQP10 = (
    "AMQP 1.0 is not served on the AMQP port yet: Leveret answers the AMQP 1.0 SASL "
    "protocol header with AMQP 0-9-1's (issue 36, item 1)"
)
NO_ANONYMOUS = (
    "no SASL mechanism in common: the client names none, and proton then takes ANONYMOUS, "
    "which RabbitMQ 4 offers by default (logging in as anonymous_login_user, guest), never "
    "PLAIN; Leveret offers PLAIN and AMQPLAIN only (issue 36, item 1: ANONYMOUS where "
    "RabbitMQ allows it)"
)
NOT_RABBITMQ = (
    "the client refuses a server whose open frame does not say product \"RabbitMQ\" "
    "(its Connection._validate_server_properties: \"Connection to non-RabbitMQ server "
    "detected\"); Leveret says \"Leveret\""
)
NOT_4X = (
    "the server's open frame says RabbitMQ 3.10.8 and the client refuses below 4.0.0: "
    "needs Leveret's RabbitMQ 4 mode (--rabbitmq-version 4.2), which this build lacks"
)

MANAGEMENT_NODE = (
    "the HTTP-over-AMQP management node (/management: the client declares, deletes, purges, "
    "binds and reads queues and exchanges through it) is not served yet (issue 36, item 3)"
)
DIRECT_REPLY_TO = (
    "a receiving link with a dynamic source and the rabbitmq:volatile-queue capability "
    "(direct reply-to over AMQP 1.0, RabbitMQ 4.2) is refused: \"source_required\" "
    "(issue 36, item 4)"
)
TRAILING_SLASH = (
    "Leveret's management API answers 404 to DELETE /api/vhosts/NAME/ (a trailing slash, as "
    "tests/http_requests.py sends it), which RabbitMQ takes "
    "(tests/differential/test_client_suites.py)"
)
MISSING_VHOST = (
    "an open for a virtual host that does not exist: Leveret answers with a close frame "
    "before any open frame, and the client waits for ever; RabbitMQ 4.2 closes the socket "
    "without a frame after its silent-close delay (rabbit_amqp_reader: check_vhost_exists, "
    "then handle_exception in waiting_open), and the client's dial raises"
)

# Rules after the first three were met with Leveret's AMQP 1.0 session of main (f76d04e) in
# an experiment that offered ANONYMOUS and said product "RabbitMQ" 4.2.0 in the open frame:
# what fails next once those two are done.
RULES = (
    # what Leveret does not have, whatever else fails first
    Rule(OAUTH, test=r"(?i)oauth"),
    # what Leveret does not have yet, by the error the client met
    Rule(NO_AMQP10, error=r"Expected SASL protocol header got: Unknown protocol"),
    Rule(NO_ANONYMOUS, error=r"Authentication failed \[mech=none\]"),
    Rule(NOT_RABBITMQ, error=r"Connection to non-RabbitMQ server detected"),
    Rule(NOT_4X, error=r"requires RabbitMQ 4\.0\.0 or higher"),
    Rule(MISSING_VHOST, test=r"vhost_not_exists", error=r"Timeout"),
    Rule(MANAGEMENT_NODE, error=r'unknown_destination,"/management"'),
    Rule(DIRECT_REPLY_TO, error=r"Attach refused: source_required"),
    Rule(TRAILING_SLASH, error=r"(?m)404 Client Error: Not Found for url: \S+/api/vhosts/\S+/$"),
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
    Example("examples/streams/example_with_streams.py", done=r"^count 199$",
            forbid=r"^count 200$"),
    Example("examples/streams/example_with_streams_async.py", done=r"^count 199$",
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
    server_args=server_args,
    mode=("--rabbitmq-version", "4.2"),
    # RabbitMQ 4 serves AMQP 1.0 in its core (it keeps rabbitmq_amqp1_0 as an empty
    # plugin); Leveret, as RabbitMQ 3.10 does, through this plugin
    plugins=("rabbitmq_amqp1_0",),
    rules=RULES,
    examples=EXAMPLES,
    config=config,
    prepare=renew_certificates,
)
