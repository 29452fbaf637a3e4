"""Runs one document's examples, in order and as written, as a user would in terminals of a
machine of their own.

The examples use RabbitMQ's default ports (localhost:5672, 15672, …), which the reference
RabbitMQ holds here. So each document runs in a network namespace of its own
(tests/support/netns.py): its own loopback, where what the document's
``<!-- examples beside: … -->`` names (``leveret server``, ``leveret up``) listens on
those ports, and one broker serves all of the document's blocks, later ones building on
earlier ones as in a tutorial. Commands run from a directory of the document's own, with
the environment of the test run minus Leveret's and pytest's variables, and with the
``leveret``, ``pytest`` and ``python3`` of this Python first on PATH.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.docs import blocks
from tests.docs.blocks import Block, Document, Stop
from tests.support.netns import NetNamespace

BLOCK_TIMEOUT = 600  # seconds; a guard against hangs (a Spark report takes about a minute)
READY_TIMEOUT = 180  # `leveret up` on a loaded machine, Spark's start included
STOP_TIMEOUT = 60  # as `leveret up` takes to stop its ingest
RETRY_FIRST, RETRY_MOST = 1.0, 8.0  # seconds between the tries of a retried block


class ExampleFailed(AssertionError):
    """An example did not do what its document says."""


def user_env() -> dict[str, str]:
    """A user's shell: nothing of the test run's own settings (LEVERET_STREAM_PORT=0,
    pytest's worker ids), this Python's commands first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEVERET_", "PYTEST_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    # The namespace has a loopback only: Spark's driver binds there whatever the host's
    # name resolves to outside it.
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env.pop("VIRTUAL_ENV", None)
    return env


@dataclass
class Background:
    """A command left running, as in a terminal of its own, until Ctrl-C."""

    command: str
    where: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class Timing:
    where: str
    seconds: float


@dataclass
class DocumentRun:
    """One document's examples in one namespace and one directory."""

    doc: Document
    work: Path
    ns: NetNamespace
    env: dict[str, str] = field(default_factory=user_env)
    running: list[Background] = field(default_factory=list)  # the blocks' background
    beside: list[Background] = field(default_factory=list)  # the document's, at most one
    timings: list[Timing] = field(default_factory=list)
    ran: int = 0
    started: int = 0  # background commands so far, each with a log of its own

    # ------------------------------------------------------------------ the document
    def run(self) -> None:
        try:
            if self.doc.beside is not None:
                # not stopped by the document's Ctrl-C: it serves all of its blocks
                beside = self.doc.beside
                self.beside.append(self.start(beside.command, "beside", beside.ready))
            for step in self.doc.steps:
                if isinstance(step, Stop):
                    self.stop(self.running, f"Ctrl-C at line {step.line}")
                elif step.file is not None:
                    target = self.work / step.file
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(step.text)
                elif step.runs:
                    started = time.monotonic()
                    self.block(step)
                    self.timings.append(Timing(step.where, time.monotonic() - started))
                    self.ran += 1
            self.stop(self.running, "the end of the document")
            self.stop(self.beside, "the end of the document")
        finally:
            self.kill_all()

    def block(self, block: Block) -> None:
        if block.background:
            assert block.ready is not None  # the parser asks for it
            for command in _commands(block.text):
                self.running.append(self.start(command, block.where, block.ready))
            return
        deadline = time.monotonic() + (block.retry or 0)
        pause = RETRY_FIRST
        while True:
            try:
                self.once(block)
                return
            except ExampleFailed:
                if time.monotonic() >= deadline:
                    raise
            # each try starts a command (a Python, DuckDB): fewer of them while Spark starts
            time.sleep(pause)
            pause = min(pause * 1.5, RETRY_MOST)

    def once(self, block: Block) -> None:
        if block.info == "console":
            for command in blocks.console(block):
                out = self.shell(command.text, block, block.exits)
                if command.expected and not blocks.matches(command.expected, out):
                    expected = "\n".join(command.expected)
                    raise self.failed(block, f"$ {command.text}\nprinted:\n{out}\nnot:\n{expected}")
        elif block.info in blocks.SHELL:
            self.shell(block.text, block, block.exits)
        elif block.is_test:
            name = f"test_example_{block.document.stem.lower()}_{block.line}.py"
            (self.work / name).write_text(block.text)
            out = self.shell(f"python3 -m pytest -q -p no:cacheprovider {name}", block, block.exits)
            if " passed" not in out:
                raise self.failed(block, f"no test passed:\n{out}")
        else:
            name = f"example_{block.document.stem.lower()}_{block.line}.py"
            (self.work / name).write_text(block.text)
            self.shell(f"python3 {name}", block, block.exits)

    # ------------------------------------------------------------------ processes
    def shell(self, script: str, block: Block, exits: int) -> str:
        """Runs ``script`` with bash, as a terminal would (stops at the first failure);
        its output, stdout and stderr as they came."""
        try:
            done = subprocess.run(
                [*self.ns.prefix, "bash", "-e", "-o", "pipefail", "-c", script],
                cwd=self.work,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=BLOCK_TIMEOUT,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired as exc:
            out = (exc.output or b"").decode(errors="replace")
            raise self.failed(block, f"still running after {BLOCK_TIMEOUT} s:\n{out}") from None
        out = done.stdout.decode(errors="replace")
        if done.returncode != exits:
            raise self.failed(block, f"exit status {done.returncode}, not {exits}:\n{out}")
        return out

    def start(self, command: str, where: str, ready: str) -> Background:
        """Starts ``command`` as in a terminal of its own, and waits until it printed
        ``ready``."""
        self.started += 1
        log = self.work / f".background-{self.started}.log"
        with open(log, "wb") as sink:
            proc = subprocess.Popen(
                [*self.ns.prefix, "bash", "-c", command],
                cwd=self.work,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                # its own process group: Ctrl-C goes to the command and what it started
                start_new_session=True,
            )
        job = Background(command, where, proc, log)
        deadline = time.monotonic() + READY_TIMEOUT
        while ready not in job.output():
            if proc.poll() is not None or time.monotonic() > deadline:
                state = "ended" if proc.poll() is not None else f"not ready in {READY_TIMEOUT} s"
                _kill_group(proc)
                raise ExampleFailed(
                    f"{where}: {command!r} {state} before printing {ready!r}:\n"
                    f"{job.output()[-3000:]}"
                )
            time.sleep(0.1)
        return job

    def stop(self, jobs: list[Background], why: str) -> None:
        """Ctrl-C to each of ``jobs``, the last started first; each must end cleanly
        (status 0)."""
        problems = []
        while jobs:
            job = jobs.pop()
            if job.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(job.proc.pid, signal.SIGINT)
            try:
                status = job.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                _kill_group(job.proc)
                status = None
            if status != 0:
                said = "did not stop" if status is None else f"ended with status {status}"
                problems.append(f"{job.where}: {job.command!r} {said} at {why}:\n"
                                f"{job.output()[-3000:]}")  # fmt: skip
        if problems:
            raise ExampleFailed("\n".join(problems))

    def kill_all(self) -> None:
        for job in [*self.running, *self.beside]:
            _kill_group(job.proc)
        self.running.clear()
        self.beside.clear()

    def failed(self, block: Block, said: str) -> ExampleFailed:
        others = "".join(
            f"\n--- {job.command} ({job.where}), still running:\n{job.output()[-1500:]}"
            for job in [*self.beside, *self.running]
        )
        return ExampleFailed(f"{block.where}:\n{block.text}\n--- {said[-4000:]}{others}")


def _commands(text: str) -> list[str]:
    """A shell block's commands, one per line (``\\`` continues one); comments dropped."""
    commands: list[str] = []
    current = ""
    for line in text.splitlines():
        current += line
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        if current.strip() and not current.lstrip().startswith("#"):
            commands.append(current.strip())
        current = ""
    return commands


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)
