"""The machinery scripts/conformance runs RabbitMQ's official AMQP 1.0 client with
(conformance/leveretonly.py), on small stand-ins: an example program run until it says its
work is done and then interrupted, the list of failures and its reasons, the suite's tests
taken from a tag of a git repository, an expired certificate signed again."""

from __future__ import annotations

import datetime
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conformance.leveretonly import (
    Example,
    GitTree,
    Rule,
    SourceMissing,
    load_listing,
    reason_for,
    renew_if_expired,
    run_example,
    write_listing,
)
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CONSUMER = """\
import sys, time
print("connecting")
for i in range(1, {count} + 1):
    print(f"count {{i}}")
print("received all messages")
try:
    while True:
        time.sleep(0.05)
except KeyboardInterrupt:
    pass
print("cleanup")
sys.exit({exit})
"""


def program(tree: Path, name: str, text: str) -> str:
    (tree / name).write_text(textwrap.dedent(text))
    return name


def run(tree: Path, example: Example) -> tuple[str, str, str]:
    ran = run_example(
        example, Path(sys.executable), tree, [], {"PATH": "/usr/bin:/bin"}, tree / "examples.log"
    )
    return ran.outcome, ran.why, ran.errors


def test_an_example_interrupted_once_done_passes(tmp_path: Path) -> None:
    path = program(tmp_path, "consumer.py", CONSUMER.format(count=3, exit=0))
    example = Example(path, done=r"^received all messages$", forbid=r"^count 4$")
    assert run(tmp_path, example) == ("passed", "", "")
    # Ctrl-C reached it: it cleaned up and said so
    assert "cleanup" in (tmp_path / "examples.log").read_text()


def test_one_message_too_many_fails_it(tmp_path: Path) -> None:
    path = program(tmp_path, "consumer.py", CONSUMER.format(count=4, exit=0))
    example = Example(path, done=r"^count 3$", forbid=r"^count 4$")
    outcome, why, _ = run(tmp_path, example)
    assert outcome == "failed"
    assert why.startswith("printed 'count 4'")


def test_an_exit_status_after_ctrl_c_fails_it(tmp_path: Path) -> None:
    path = program(tmp_path, "consumer.py", CONSUMER.format(count=1, exit=3))
    outcome, why, _ = run(tmp_path, Example(path, done=r"^received all messages$"))
    assert (outcome, why.split(":")[0]) == ("failed", "exited 3 after its work")


def test_an_error_before_its_work_is_done_fails_it_with_the_error(tmp_path: Path) -> None:
    path = program(
        tmp_path,
        "dial.py",
        """\
        class ConnectionException(Exception):
            pass
        print("connection to amqp server")
        try:
            raise ConnectionException("Condition('amqp:connection:framing-error', 'no')")
        finally:
            raise RuntimeError("Errors closing connections")
        """,
    )
    outcome, why, errors = run(tmp_path, Example(path, done=r"^received all messages$"))
    assert outcome == "failed"
    assert why.startswith("exited 1 without printing /^received all messages$/: RuntimeError")
    # the cause is among the errors the rules read, not only the last one
    assert "framing-error" in errors
    rule = Rule("no AMQP 1.0", error=r"amqp:connection:framing-error")
    assert reason_for((rule,), path, why, errors) == "no AMQP 1.0"


def test_a_client_beside_its_server(tmp_path: Path) -> None:
    server = program(
        tmp_path,
        "server.py",
        """\
        import time
        print("Responder listening on address: /queues/rpc")
        try:
            while True:
                time.sleep(0.05)
        except KeyboardInterrupt:
            print("Responder stopping...")
        """,
    )
    client = program(
        tmp_path,
        "client.py",
        """\
        for i in range(3):
            print(f"Received response: hello {i}-from the server")
        """,
    )
    example = Example(
        client,
        done=r"hello 2-from the server$",
        interrupt=False,
        beside=server,
        beside_ready=r"^Responder listening",
    )
    assert run(tmp_path, example) == ("passed", "", "")
    assert "Responder stopping..." in (tmp_path / "examples.log").read_text()


def test_a_program_that_never_says_it_is_done_is_ended(tmp_path: Path) -> None:
    path = program(tmp_path, "quiet.py", "import time\ntime.sleep(60)\n")
    outcome, why, _ = run(tmp_path, Example(path, done=r"^done$", timeout=1))
    assert outcome == "failed"
    assert why.startswith("still running after 1 s without printing /^done$/")


def test_the_list_is_written_with_reasons_and_read_back(tmp_path: Path) -> None:
    listing = tmp_path / "suite.txt"
    rules = (
        Rule("needs OAuth 2.0", test=r"oauth"),
        Rule("no AMQP 1.0", error=r"Expected SASL protocol header"),
    )
    outcomes = {
        "t.py::test_a": "passed",
        "t.py::test_oauth": "failed",
        "t.py::test_b": "failed",
        "t.py::test_c": "skipped",
        "t.py::test_d": "failed",
    }
    messages = {
        "t.py::test_oauth": "setup: Expected SASL protocol header got: x",
        "t.py::test_b": "call: RuntimeError: Errors closing connections",
        "t.py::test_c": "needs Windows",
        "t.py::test_d": "call: AssertionError",
    }
    details = {"t.py::test_b": "ConnectionException: Expected SASL protocol header got: x"}
    unexplained = write_listing(listing, "# header", outcomes, messages, details, rules)
    assert unexplained == ["t.py::test_c", "t.py::test_d"]
    assert load_listing(listing) == {
        "t.py::test_b": "no AMQP 1.0",
        "t.py::test_c": "not explained by a rule yet: needs Windows",
        "t.py::test_d": "not explained by a rule yet: call: AssertionError",
        # a test's own rule comes first, whatever its error
        "t.py::test_oauth": "needs OAuth 2.0",
    }


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_the_tests_come_from_the_pinned_commit_of_a_tag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    (work / "tests").mkdir(parents=True)
    (work / "tests" / "test_x.py").write_text("def test_x(): pass\n")
    (work / "src.py").write_text("library = 1\n")
    git("init", "-q", cwd=work)
    git("add", ".", cwd=work)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one", cwd=work)
    git("tag", "v1", cwd=work)
    commit = git("rev-parse", "HEAD", cwd=work)
    bare = tmp_path / "mirror.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    monkeypatch.setenv("TEST_MIRROR", str(bare))

    tree = GitTree("TEST_MIRROR", "/nowhere", "v1", commit, ("tests",))
    archive = tree.archive(tmp_path / "cache", "suite")
    listed = subprocess.run(
        ["tar", "tf", str(archive)], check=True, capture_output=True, text=True
    ).stdout.split()
    assert "tests/test_x.py" in listed
    assert "src.py" not in listed  # the library comes from its sdist
    # made once: the cached copy serves without the mirror
    monkeypatch.setenv("TEST_MIRROR", str(tmp_path / "gone"))
    assert tree.archive(tmp_path / "cache", "suite") == archive

    with pytest.raises(SourceMissing):
        tree.archive(tmp_path / "other-cache", "suite")
    monkeypatch.setenv("TEST_MIRROR", str(bare))
    moved = GitTree("TEST_MIRROR", "/nowhere", "v1", "0" * 40, ("tests",))
    with pytest.raises(SystemExit, match="not the commit pinned"):
        moved.archive(tmp_path / "third-cache", "suite")


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def test_an_expired_certificate_is_signed_again_by_its_ca(tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("ca"))
        .issuer_name(_name("ca"))
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=900))
        .not_valid_after(now + datetime.timedelta(days=900))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName([x509.DNSName("localhost")])
    expired = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now - datetime.timedelta(days=400))
        .not_valid_after(now - datetime.timedelta(days=35))
        .add_extension(san, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = {name: tmp_path / f"{name}.pem" for name in ("ca", "ca_key", "cert")}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["ca_key"].write_bytes(
        ca_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    paths["cert"].write_bytes(expired.public_bytes(serialization.Encoding.PEM))

    assert renew_if_expired(paths["cert"], paths["ca"], paths["ca_key"])
    renewed = x509.load_pem_x509_certificate(paths["cert"].read_bytes())
    assert renewed.not_valid_before_utc < now < renewed.not_valid_after_utc
    assert renewed.subject == expired.subject
    assert renewed.public_key() == expired.public_key()
    assert renewed.extensions.get_extension_for_class(x509.SubjectAlternativeName).value == san
    renewed.verify_directly_issued_by(ca)
    # valid now: left alone
    assert not renew_if_expired(paths["cert"], paths["ca"], paths["ca_key"])
