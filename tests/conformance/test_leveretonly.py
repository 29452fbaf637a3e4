"""The machinery scripts/conformance runs RabbitMQ's official AMQP 1.0 client with
(conformance/leveretonly.py), on small stand-ins: an example program run until it says its
work is done and then interrupted, the list of failures and its reasons, the suite's tests
taken from a tag of a git repository, an expired certificate signed again."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conformance.leveretonly import (
    CLIENT_CRASH,
    ClientRace,
    Example,
    GitTree,
    Partial,
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

# what a consuming example does once its work is done
UNTIL_CTRL_C = """\
try:
    while True:
        time.sleep(0.05)
except KeyboardInterrupt:
    pass
"""

CONSUMER = (
    """\
import sys, time
print("connecting")
for i in range(1, {count} + 1):
    print(f"count {{i}}")
print("received all messages")
"""
    + UNTIL_CTRL_C
    + """\
print("cleanup")
sys.exit({exit})
"""
)


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


# A stand-in for a client whose C library is driven from two threads: both are inside
# its package (lib/proton.py) when the process dies of SIGSEGV (``race``), or only one is.
# Each run appends a line to runs.txt; the first ``crashes`` runs crash, the rest finish.
CRASHER = (
    """\
import os, signal, sys, threading, time
from pathlib import Path
sys.path.insert(0, "lib")
import proton
runs = Path("runs.txt")
runs.write_text(runs.read_text() + "run\\n" if runs.exists() else "run\\n")
print("connecting")
if len(runs.read_text().splitlines()) <= {crashes}:
    if {race}:
        threading.Thread(target=proton.spin, daemon=True).start()
        time.sleep(0.2)
    proton.crash()
print("received all messages")
"""
    + UNTIL_CTRL_C
)

PROTON = """\
import os, signal, time
def spin():
    while True:
        time.sleep(0.01)
def crash():
    os.kill(os.getpid(), signal.SIGSEGV)
"""

RACE = ClientRace(frames=("/lib/proton.py",), reason="two threads in proton")


def crasher(tree: Path, crashes: int, race: bool) -> tuple[str, str, int]:
    (tree / "lib").mkdir(exist_ok=True)
    (tree / "lib" / "proton.py").write_text(PROTON)
    path = program(tree, "client.py", CRASHER.format(crashes=crashes, race=race))
    ran = run_example(
        Example(path, done=r"^received all messages$", timeout=30),
        Path(sys.executable),
        tree,
        [],
        {"PATH": "/usr/bin:/bin"},
        tree / "examples.log",
        RACE,
    )
    return ran.outcome, ran.why, len((tree / "runs.txt").read_text().splitlines())


def test_a_crash_in_the_clients_own_race_runs_again_up_to_its_attempts(tmp_path: Path) -> None:
    # crashed twice in the race, then passed: the third run counts
    assert crasher(tmp_path, crashes=2, race=True)[::2] == ("passed", 3)


def test_a_race_crash_every_time_is_neither_a_pass_nor_a_failure(tmp_path: Path) -> None:
    outcome, why, runs = crasher(tmp_path, crashes=9, race=True)
    assert (outcome, runs) == (CLIENT_CRASH, 3)
    assert why.startswith("crashed in 3 runs in a row, each time in the client's own thread race")
    assert "two threads in proton" in why
    # the dump the decision was made on is in the log
    assert "Fatal Python error: Segmentation fault" in (tmp_path / "examples.log").read_text()


def test_any_other_crash_runs_once_more_and_then_fails(tmp_path: Path) -> None:
    outcome, why, runs = crasher(tmp_path, crashes=9, race=False)
    assert (outcome, runs) == ("failed", 2)
    assert why.startswith("exited -11 without printing")


def test_a_crashed_pytest_run_goes_on_with_the_tests_it_did_not_finish(tmp_path: Path) -> None:
    """The plugin scripts/conformance loads writes each test's outcome as it finishes; the
    next run leaves out those, and Partial keeps them and names the test the crash was in."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "proton.py").write_text(PROTON)
    (tmp_path / "test_suite.py").write_text(
        textwrap.dedent(
            """\
            import os, sys, threading, time
            sys.path.insert(0, "lib")
            import proton

            def test_a():
                pass

            def test_b():
                if not os.path.exists("crashed-once"):
                    open("crashed-once", "w").close()
                    threading.Thread(target=proton.spin, daemon=True).start()
                    time.sleep(0.2)
                    proton.crash()

            def test_c():
                assert False, "c fails"
            """
        )
    )
    report = tmp_path / "report.json"
    plugin_dir = Path(__file__).resolve().parents[2] / "conformance"
    done = Partial()

    def pytest_run() -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "PYTHONPATH": str(plugin_dir),
            "LEVERET_CONFORMANCE_REPORT": str(report),
            "LEVERET_CONFORMANCE_DONE": json.dumps(sorted(done.outcomes)),
        }
        (tmp_path / "report.json.partial").unlink(missing_ok=True)
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "leveret_conformance_plugin",
             "-p", "no:cacheprovider", "test_suite.py"],
            cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip

    first = pytest_run()
    assert first.returncode == -signal.SIGSEGV
    assert not report.exists()
    # pytest's faulthandler dump: the test's thread and the spinning one, both in "proton"
    assert RACE.seen_in(first.stdout.splitlines() + first.stderr.splitlines())
    assert done.read(tmp_path / "report.json.partial") == "test_suite.py::test_b"
    assert done.outcomes == {"test_suite.py::test_a": "passed"}
    assert done.collected == [f"test_suite.py::test_{t}" for t in "abc"]

    second = pytest_run()
    assert second.returncode == 1
    data = json.loads(report.read_text())
    # test_a is not run again, nor counted as deselected
    assert data["outcomes"] == {
        "test_suite.py::test_b": "passed",
        "test_suite.py::test_c": "failed",
    }
    assert data["deselected"] == []
    assert "c fails" in data["messages"]["test_suite.py::test_c"]


def test_tests_a_crash_left_unfinished_are_client_crashes() -> None:
    done = Partial(outcomes={"t::a": "passed"}, collected=["t::a", "t::b", "t::c"])
    done.crashed("t::b", "the race")
    assert done.outcomes == {"t::a": "passed", "t::b": CLIENT_CRASH, "t::c": CLIENT_CRASH}
    assert done.messages == {"t::b": "the race", "t::c": "not reached: the race"}


def test_the_clients_race_is_told_from_a_faulthandler_dump() -> None:
    race = ClientRace(frames=("/qpid/proton/", "/cproton.py"), reason="")
    idle_worker = [
        "Thread 0x00007f60956fd6c0 (most recent call first):",
        '  File "/usr/lib/python3.11/concurrent/futures/thread.py", line 81 in _worker',
        "",
    ]
    in_select = [
        "Thread 0x00007f6095efe6c0 (most recent call first):",
        '  File "/v/site-packages/x/qpid/proton/_io.py", line 70 in select',
        '  File "/v/site-packages/x/qpid/proton/_io.py", line 150 in select_inner',
        '  File "/v/site-packages/x/publisher.py", line 94 in publish',
        "",
    ]
    main_in_finalizer = [
        "Current thread 0x00007f609961cb80 (most recent call first):",
        '  File "/v/site-packages/x/qpid/proton/_wrapper.py", line 133 in __del__',
        '  File "/usr/lib/python3.11/asyncio/base_events.py", line 1923 in _run_once',
    ]
    worker_sending = [
        "Current thread 0x00007fa8337fe6c0 (most recent call first):",
        '  File "/v/site-packages/cproton.py", line 429 in pn_link_send',
        '  File "/usr/lib/python3.11/concurrent/futures/thread.py", line 58 in run',
    ]
    main_sending = [
        "Current thread 0x00007fa8337fe6c0 (most recent call first):",
        '  File "/v/site-packages/cproton.py", line 429 in pn_link_send',
        '  File "/v/site-packages/x/publisher.py", line 94 in publish',
    ]
    loop_finalizing = [
        "Current thread 0x00007fbebee74b80 (most recent call first):",
        '  File "/v/site-packages/x/qpid/proton/_wrapper.py", line 133 in __del__',
        '  File "/usr/lib/python3.11/asyncio/base_events.py", line 1923 in _run_once',
    ]
    fatal = ["Fatal Python error: Segmentation fault", ""]
    # two threads inside proton
    assert race.seen_in(fatal + idle_worker + in_select + main_in_finalizer)
    # proton on a thread pool's worker, the others idle
    assert race.seen_in(fatal + idle_worker + worker_sending)
    # the event loop dropping a worker's proton object, the workers out of proton by then
    assert race.seen_in(fatal + idle_worker + loop_finalizing)
    # one thread inside proton, not a pool's: the client's blocking API, a crash to judge
    assert not race.seen_in(fatal + idle_worker + main_sending)
    assert not race.seen_in(['  File "/x/qpid/proton/a.py", line 1 in f'])


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
        # crashed in the client's own race each time it ran: not on the list
        "t.py::test_e": CLIENT_CRASH,
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
