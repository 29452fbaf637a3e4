"""Suites that scripts/conformance runs against Leveret alone: no broker of their kind runs
here to compare with (RabbitMQ 4's official AMQP 1.0 clients need RabbitMQ 4; the
reference broker is 3.10.8). Instead of RabbitMQ's outcomes, a list kept in conformance/
says which tests do not pass on Leveret and why; a test that does not pass and is not on
the list fails the run, so the list can only shrink.

What this module holds (scripts/conformance runs the suite and calls it):

- ``GitTree``: the suite's tests from a tag of its repository (their sdists ship none):
  read from a bare mirror of the repository (``git archive`` of the pinned commit) into the
  conformance cache once, never kept in this checkout.
- ``Example``: a program of the suite's ``examples/``, run unchanged against the same
  Leveret, ended with Ctrl-C (SIGINT) once it printed that its work is done, as a person
  runs it; it passes when it printed that, nothing it must not print, and exited 0.
- ``Rule`` and the list: why each test that does not pass fails, from its id and the first
  line of its error, so that ``--write-list`` can regenerate the list with its reasons.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any


class SourceMissing(Exception):
    """The suite's tests cannot be had on this machine (no mirror, no cached copy)."""


@dataclass(frozen=True)
class GitTree:
    """Files of one tag of a repository, read from a bare git mirror of it."""

    repo_env: str  # environment variable naming the bare git directory
    repo_default: str  # where it is when that is not set
    tag: str
    commit: str  # the tag's commit, checked: a moved tag is not silently taken
    paths: tuple[str, ...]  # what of the tree the suite needs

    @property
    def repo(self) -> Path:
        return Path(os.environ.get(self.repo_env) or self.repo_default)

    def archive(self, cache: Path, name: str) -> Path:
        """The files as a tar in ``cache``, made from the mirror the first time."""
        target = cache / "sources" / f"{name}-{self.tag}-{self.commit[:12]}.tar"
        if target.exists():
            return target
        repo = self.repo
        if not (repo / "HEAD").exists():
            raise SourceMissing(
                f"{name}: its tests come from tag {self.tag} of its repository, and neither "
                f"a mirror of it ({repo}; set {self.repo_env}) nor a copy in {target.parent} "
                "is on this machine"
            )
        found = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{self.tag}^{{commit}}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if found != self.commit:
            raise SystemExit(
                f"conformance: {name}: tag {self.tag} in {repo} is {found or 'missing'}, "
                f"not the commit pinned ({self.commit})"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.part")
        subprocess.run(
            [
                "git",
                "-C",
                str(repo),
                "archive",
                "--format=tar",
                "-o",
                str(partial),
                self.commit,
                "--",
                *self.paths,
            ],
            check=True,
            capture_output=True,
        )
        partial.rename(target)
        return target


@dataclass(frozen=True)
class Rule:
    """Why a test does not pass: the first rule whose patterns match (re.search on the
    test id, and on its errors: the exception that failed it and those it was raised from
    or during) gives the reason written in the list."""

    reason: str
    test: str = ""  # "" matches every test
    error: str = ""  # "" matches every error

    def explains(self, test_id: str, errors: str) -> bool:
        return bool(
            (not self.test or re.search(self.test, test_id))
            and (not self.error or re.search(self.error, errors))
        )


TROUBLE = r"consumer exited for exception|Traceback \(most recent call last\)"


@dataclass(frozen=True)
class Example:
    """One of the suite's example programs, run as its README says, unchanged."""

    path: str  # relative to the tree's root, which is its working directory
    done: str  # a line of output (regex) saying its work is done
    # A line (regex) it must not print: one message more than were sent. A traceback, or
    # an error it reports and carries on from, fails it as well (TROUBLE).
    forbid: str = ""
    interrupt: bool = True  # it runs until Ctrl-C: sent once ``done`` was printed
    # A program to run beside it, started first and interrupted after it ended (a server).
    beside: str = ""
    beside_ready: str = ""  # a line (regex) the program beside it prints once it listens
    timeout: float = 60.0  # seconds for ``done`` to come

    @property
    def test_id(self) -> str:
        return self.path


def default_ports(tree: Path) -> list[str]:
    """Leveret on RabbitMQ's default ports (AMQP 5672, management 15672, stream 5552, as
    the rabbitmq_stream plugin), on every address family as RabbitMQ listens: localhost may
    be ::1 to the client."""
    return ["--amqp-port", "5672", "--http-port", "15672", "--stream-port", "5552",
            "--bind", "::"]  # fmt: skip


@dataclass(frozen=True)
class LeveretOnly:
    """How a suite runs against Leveret alone, and where its list of failures is."""

    listing: Path  # the list: tests that do not pass, with reasons
    tree: GitTree
    # Leveret's arguments, given the tree (its certificates live there)
    server_args: Callable[[Path], list[str]] = default_ports
    # the switch to the broker's mode the suite needs, used when this Leveret has it
    mode: tuple[str, ...] = ()
    # plugins the suite needs enabled (--plugins), where this Leveret has them
    plugins: tuple[str, ...] = ()
    rules: tuple[Rule, ...] = ()
    examples: tuple[Example, ...] = ()
    # TOML for leveret server --config, given the tree: what the suite's broker
    # configuration says, in Leveret's keys
    config: Callable[[Path], str] | None = None
    # Made ready before the run, given the tree; returns what it changed, to be printed.
    prepare: Callable[[Path], list[str]] | None = None
    # seconds for all the examples together: those it leaves no time for fail, not run
    examples_budget: float = 600.0
    # The library is the tree's own package, which the tests import from the tree's root
    # (as a CI that does not install it): no sdist is installed.
    from_tree: bool = False
    # a crash that is the client's own race (its tests' run and its examples run again)
    client_race: ClientRace | None = None


def renew_if_expired(cert_path: Path, ca_cert: Path, ca_key: Path, days: int = 30) -> bool:
    """Sign the certificate again with its CA when it has expired (or is not valid yet):
    the same subject, key, names and extensions, valid from yesterday for ``days`` days.
    True when it was renewed. For a suite whose own test certificates have run out: its
    tests then meet the TLS they were written for, not an expiry."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    now = datetime.datetime.now(datetime.UTC)
    if _valid_from(cert) <= now < _valid_to(cert):
        return False
    issuer = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    key = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    builder = (
        x509.CertificateBuilder()
        .subject_name(cert.subject)
        .issuer_name(issuer.subject)
        .public_key(cert.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=days))
    )
    for extension in cert.extensions:
        builder = builder.add_extension(extension.value, extension.critical)
    renewed = builder.sign(key, hashes.SHA256())  # type: ignore[arg-type]
    cert_path.write_bytes(renewed.public_bytes(serialization.Encoding.PEM))
    return True


def _valid_from(cert: Any) -> datetime.datetime:
    if hasattr(cert, "not_valid_before_utc"):  # cryptography 42 and later
        return cert.not_valid_before_utc  # type: ignore[no-any-return]
    return cert.not_valid_before.replace(tzinfo=datetime.UTC)  # type: ignore[no-any-return]


def _valid_to(cert: Any) -> datetime.datetime:
    if hasattr(cert, "not_valid_after_utc"):
        return cert.not_valid_after_utc  # type: ignore[no-any-return]
    return cert.not_valid_after.replace(tzinfo=datetime.UTC)  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------- examples
@dataclass
class _Program:
    """A program started by us, its output read line by line as it comes."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    wanted: re.Pattern[str] | None = None
    seen: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def start(cls, cmd: list[str], cwd: Path, env: dict[str, str]) -> _Program:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        )
        program = cls(proc)
        threading.Thread(target=program._read, daemon=True).start()
        return program

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if self.wanted is not None and self.wanted.search(line):
                self.seen.set()
        self.seen.set()  # its end wakes whoever waits, too

    def wait_for(self, pattern: str, timeout: float) -> bool:
        """True once a line matching ``pattern`` came (False: it ended, or time ran out)."""
        self.wanted = re.compile(pattern)
        if any(self.wanted.search(line) for line in self.lines):
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.seen.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            if any(self.wanted.search(line) for line in self.lines):
                return True
            if self.proc.poll() is not None:
                time.sleep(0.1)  # the reader may still be on its last lines
                return any(self.wanted.search(line) for line in self.lines)
        return False

    def interrupt(self, timeout: float) -> int | None:
        """Ctrl-C (by its pid), then its exit status; killed if it does not end."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def errors(self) -> list[str]:
        """The lines of its output that report an error."""
        return [ln.strip() for ln in self.lines if _ERROR.search(ln)]

    def gist(self) -> str:
        """The error it printed last, else its last line."""
        errors = self.errors()
        if errors:
            return errors[-1][:400]
        return next((ln.strip()[:400] for ln in reversed(self.lines) if ln.strip()), "")


_ERROR = re.compile(r"(Error|Exception|exception|Condition\()")


@dataclass(frozen=True)
class ClientRace:
    """A crash that is the client's own data race, known by the dump Python's faulthandler
    prints on SIGSEGV or SIGABRT: two of the process's threads were inside the library (a
    frame whose path holds one of ``frames``) when it died, or the thread inside it was one
    the client's wrapper hands the library to (a frame in one of ``handed``: a thread
    pool's worker, the asyncio event loop dropping what a worker made) while others drive
    it; the race that corrupted the memory may be over by the time the crash comes. Such a
    run is not the broker's answer: it runs again, up to ``attempts`` runs in all."""

    frames: tuple[str, ...]  # path fragments of the library's frames
    reason: str  # the race, as the report prints it
    handed: tuple[str, ...] = ("/concurrent/futures/thread.py", "/asyncio/base_events.py")
    attempts: int = 3

    def seen_in(self, dump: list[str]) -> bool:
        inside = [s for s in stacks(dump) if any(f in ln for ln in s for f in self.frames)]
        handed = any(h in ln for s in inside for ln in s for h in self.handed)
        return len(inside) >= 2 or handed


def stacks(dump: list[str]) -> list[list[str]]:
    """The ``File ...`` lines of each thread of a faulthandler dump (its ``Thread 0x...``
    and ``Current thread 0x...`` blocks)."""
    found: list[list[str]] = []
    for line in dump:
        if re.match(r"^(Current thread|Thread) 0x[0-9a-f]+ ", line):
            found.append([])
        elif found and line.startswith("  File "):
            found[-1].append(line)
    return found


# An example's outcome when every run of it crashed in the client's own race (ClientRace):
# printed, neither a pass nor a failure of the broker.
CLIENT_CRASH = "client-crash"


@dataclass
class Partial:
    """The outcomes of the tests that runs which crashed finished (the plugin's
    REPORT.partial lines), and what was collected."""

    outcomes: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)
    collected: list[str] = field(default_factory=list)

    def read(self, path: Path) -> str:
        """Take in a crashed run's lines; the test it died in ("" if none had started)."""
        running = ""
        lines = path.read_text().splitlines() if path.exists() else []
        for line in (json.loads(raw) for raw in lines if raw.strip()):
            if "collected" in line and not self.collected:
                self.collected = line["collected"]
            elif "started" in line:
                running = line["started"]
            elif "finished" in line:
                test = line["finished"]
                self.outcomes[test] = line["outcome"]
                if line["message"]:
                    self.messages[test] = line["message"]
                if line["details"]:
                    self.details[test] = line["details"]
                running = "" if running == test else running
        return running

    def crashed(self, running: str, why: str) -> None:
        """The last run crashed as well: the test it died in, and those no run reached."""
        for test in [running] if running else []:
            self.outcomes[test] = CLIENT_CRASH
            self.messages[test] = why
        for test in self.collected:
            if test not in self.outcomes:
                self.outcomes[test] = CLIENT_CRASH
                self.messages[test] = f"not reached: {why}"


@dataclass(frozen=True)
class ExampleResult:
    outcome: str  # passed, failed, or CLIENT_CRASH
    why: str = ""  # when it failed: what went wrong, and the error it printed last
    errors: str = ""  # every line of its output (and the program's beside it) with an error
    crashed: bool = False  # a process of the example died of SIGSEGV or SIGABRT
    raced: bool = False  # ...and its dump shows the client's race (ClientRace)


def run_example(
    example: Example,
    python: Path,
    tree: Path,
    prefix: list[str],
    env: dict[str, str],
    log: Path,
    race: ClientRace | None = None,
) -> ExampleResult:
    """Run one example (with ``prefix``: in the broker's network namespace), its working
    directory the tree's root as upstream runs them. Its output is appended to ``log``.

    An example whose own process crashes (SIGSEGV or SIGABRT: python-qpid-proton's C code,
    which the client's asyncio wrapper drives from more than one thread) runs once more,
    and says so on stderr and in the log: a crash of the client is not the broker's
    answer, and only a second one in a row stands. A crash that is ``race`` runs again up
    to its ``attempts``; when the last one is that race too, the outcome is CLIENT_CRASH."""
    # unbuffered, and the threads' stacks should it crash
    env = {**env, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}

    def launch(path: str) -> _Program:
        return _Program.start([*prefix, str(python), path], tree, env)

    attempts = race.attempts if race is not None else 2
    attempt = 1
    while True:
        result = _run_example_once(example, launch, log, race)
        if not result.crashed or attempt >= (attempts if result.raced else 2):
            break
        attempt += 1
        print(
            f"{example.test_id}: the client crashed ({result.why[:120]}); running it again",
            file=sys.stderr,
        )
        with log.open("a") as out:
            out.write(f"===== the client crashed: {example.path} runs again\n")
    if result.raced and race is not None:
        return replace(
            result,
            outcome=CLIENT_CRASH,
            why=f"crashed in {attempt} runs in a row, each time in the client's own thread race"
            f": {race.reason} (last: {result.why[:200]})",
        )
    return result


def _run_example_once(
    example: Example,
    launch: Callable[[str], _Program],
    log: Path,
    race: ClientRace | None,
) -> ExampleResult:
    started: list[tuple[str, _Program]] = []

    def start(path: str) -> _Program:
        program = launch(path)
        started.append((path, program))
        return program

    try:
        why = _drive(example, start)
    finally:
        for _, program in started:
            program.kill()
        with log.open("a") as out:
            for path, program in started:
                out.write(f"===== {path} (exit {program.proc.returncode})\n")
                out.write("\n".join(program.lines) + "\n")
    errors = "\n".join(line for _, program in started for line in program.errors())
    dead = [
        program
        for _, program in started
        if program.proc.returncode in (-signal.SIGSEGV, -signal.SIGABRT)
    ]
    crashed = bool(why) and bool(dead)
    raced = crashed and race is not None and all(race.seen_in(p.lines) for p in dead)
    return ExampleResult("failed" if why else "passed", why, errors[:4000], crashed, raced)


def _drive(example: Example, start: Callable[[str], _Program]) -> str:
    """Run the example to its end; what went wrong ("" when nothing did)."""
    beside = None
    if example.beside:
        beside = start(example.beside)
        if not beside.wait_for(example.beside_ready, example.timeout):
            return f"{example.beside} did not print /{example.beside_ready}/: {beside.gist()}"
    program = start(example.path)
    if not program.wait_for(example.done, example.timeout):
        ended = program.proc.poll()
        state = (
            f"exited {ended}"
            if ended is not None
            else f"still running after {example.timeout:.0f} s"
        )
        return f"{state} without printing /{example.done}/: {program.gist()}"
    if example.interrupt:
        time.sleep(1.0)  # what it would print after its work (one message too many)
        code = program.interrupt(30)
    else:
        try:
            code = program.proc.wait(example.timeout)
        except subprocess.TimeoutExpired:
            code = None
    if code != 0:
        return (
            f"{'did not end' if code is None else f'exited {code}'} after its work: "
            f"{program.gist()}"
        )
    if beside is not None:
        code = beside.interrupt(30)
        if code != 0:
            return f"{example.beside} exited {code} on Ctrl-C: {beside.gist()}"
    forbidden = re.compile(f"{TROUBLE}|{example.forbid}" if example.forbid else TROUBLE)
    for source in (p for p in (beside, program) if p is not None):
        bad = next((ln for ln in source.lines if forbidden.search(ln)), None)
        if bad is not None:
            return f"printed {bad.strip()[:300]!r}: {source.gist()}"
    return ""


# ------------------------------------------------------------------------------ the list
def load_listing(path: Path) -> dict[str, str]:
    """test id -> reason, from the list file (none: an empty list)."""
    listed: dict[str, str] = {}
    if not path.exists():
        return listed
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        test_id, _, reason = line.partition("  # ")
        listed[test_id.strip()] = reason.strip()
    return listed


def reason_for(rules: tuple[Rule, ...], test_id: str, message: str, errors: str) -> str:
    """The first rule's reason that explains the test's failure (its message, and the
    errors of its traceback), else the message itself."""
    for rule in rules:
        if rule.explains(test_id, f"{message}\n{errors}"):
            return rule.reason
    return f"{UNEXPLAINED}{message or 'no error message'}"


UNEXPLAINED = "not explained by a rule yet: "


def not_passing(outcomes: dict[str, str]) -> list[str]:
    """The tests that failed (a CLIENT_CRASH is neither a pass nor a failure)."""
    return sorted(t for t, o in outcomes.items() if o not in ("passed", CLIENT_CRASH))


def write_listing(
    path: Path,
    header: str,
    outcomes: dict[str, str],
    messages: dict[str, str],
    details: dict[str, str],
    rules: tuple[Rule, ...],
) -> list[str]:
    """Write the list; returns the tests no rule explains."""
    unexplained = []
    lines = [header]
    for test_id in not_passing(outcomes):
        reason = reason_for(rules, test_id, messages.get(test_id, ""), details.get(test_id, ""))
        if reason.startswith(UNEXPLAINED):
            unexplained.append(test_id)
        lines.append(f"{test_id}  # {reason}")
    path.write_text("\n".join(lines) + "\n")
    return unexplained
