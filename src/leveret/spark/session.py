"""The Spark session of the pipeline jobs: which Python the executors run, the code they are
shipped, and the JVM's logging.

**Which Python.** PySpark starts its Python workers (and, on the driver, the processes that
plan a Python data source) with the interpreter named by ``PYSPARK_PYTHON``, read from the
driver's environment when the ``SparkContext`` is made; without it, ``python3`` from PATH.
``spark.pyspark.python`` is read only by ``spark-submit`` (which turns it into that variable
for the Python it launches): set on a session builder in a plain Python driver, it changes
nothing. So :func:`spark_session` puts the interpreter into ``PYSPARK_PYTHON`` itself before
the context exists:

- ``spark.pyspark.python`` given as a setting (``--conf``) wins;
- else a ``PYSPARK_PYTHON`` already in the environment;
- else, for a local master (``local``, ``local[N]``, ``local-cluster[...]``), the driver's own
  interpreter (``sys.executable``), which has Leveret and PySpark whatever way it was
  installed: an unactivated virtualenv, pipx, a service;
- else (a cluster) nothing: the workers' ``python3``, unless the user says otherwise.

**Shipping the code.** On a cluster master the executors have no Leveret. The session adds a
zip of what they import (``leveret.spark``, ``leveret.logs`` and the pure-Python libraries
those use, pika and pamqp) with ``SparkContext.addPyFile``; a worker needs only PySpark,
pyarrow and pandas (with numpy) for the driver's Python version.

The same interpreter also runs, on the driver, the Python processes that plan the source
(its schema, partitions and, for a stream, its offsets: ``python_streaming_source_runner``).
Measured with Spark 4.3: the streaming one does not get the files added with
``addPyFile`` on its path (``ModuleNotFoundError: No module named 'leveret'`` when that
interpreter lacks Leveret). Those processes inherit the driver JVM's environment, so the
zip is also put first on ``PYTHONPATH`` before the JVM starts.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import os
import re
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PYSPARK_PYTHON = "spark.pyspark.python"

#: Packages the executors import, shipped to a cluster: (package, sub-packages kept or None
#: for all of it). Of ``leveret`` only the client side, never the broker.
SHIPPED: tuple[tuple[str, tuple[str, ...] | None], ...] = (
    ("leveret", ("spark", "logs", "protocol")),  # protocol: the stream codec
    ("pika", None),
    ("pamqp", None),
)

_LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
# PySpark's driver counts as a shell; Spark then prints "Setting default log level" unless
# the shell's logger is at the root's level
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = {level}
"""

#: What the JVM prints on stderr while it starts, whatever log4j says: the JDK's note on
#: the incubator module Spark loads, and the shell's note on the log level.
_CHATTER = re.compile(
    rb"^(WARNING: Using incubator modules|Setting default log level to"
    rb"|To adjust logging level use sc\.setLogLevel)"
)


def _forward(read_fd: int, write_fd: int) -> None:
    """Copy the JVM's stderr lines to ours, leaving out the start-up chatter."""
    pending = b""
    try:
        while True:
            data = os.read(read_fd, 65536)
            if not data:
                break
            pending += data
            *lines, pending = pending.split(b"\n")
            out = b"".join(line + b"\n" for line in lines if not _CHATTER.match(line))
            if out:
                os.write(write_fd, out)
        if pending and not _CHATTER.match(pending):
            os.write(write_fd, pending)
    except OSError:
        pass
    finally:
        os.close(read_fd)
        os.close(write_fd)


@contextlib.contextmanager
def _quiet_jvm_start() -> Iterator[None]:
    """While the JVM is launched, fd 2 is a pipe that drops the start-up chatter; the JVM
    keeps it as its stderr (a thread forwards everything else), Python gets its own back."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
        read_fd, write_fd = os.pipe()
    except OSError:  # no stderr to speak of: nothing to filter
        yield
        return
    os.dup2(write_fd, 2)
    os.close(write_fd)
    threading.Thread(
        target=_forward, args=(read_fd, os.dup(saved)), name="leveret-jvm-stderr", daemon=True
    ).start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _log4j2_file(level: str) -> Path:
    """A log4j2 configuration for the driver's JVM at ``level``, from its first line on
    (``setLogLevel`` comes too late for what Spark logs while it starts)."""
    path = Path(tempfile.gettempdir()) / f"leveret-log4j2-{level.lower()}.properties"
    text = _LOG4J2.format(level=level.lower())
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def is_local(master: str) -> bool:
    """Whether executors run on this machine: ``local``, ``local[N]``, ``local-cluster[…]``."""
    return master.strip().startswith("local")


def executor_python(master: str, conf: Mapping[str, str] | None = None) -> str | None:
    """The interpreter executors should start (see the module docstring), or None for
    the cluster's default."""
    configured = (conf or {}).get(PYSPARK_PYTHON) or os.environ.get("PYSPARK_PYTHON")
    if configured:
        return configured
    if is_local(master) and sys.executable:
        return sys.executable
    return None


def _package_files(package: str, keep: tuple[str, ...] | None) -> list[tuple[str, Path]]:
    """(name in the zip, file) for the ``.py`` files of an importable package."""
    module = importlib.import_module(package)
    root = Path(next(iter(module.__path__)))
    out: list[tuple[str, Path]] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if keep is not None and len(rel.parts) > 1 and rel.parts[0] not in keep:
            continue
        out.append(((Path(package) / rel).as_posix(), path))
    if (root / "py.typed").exists():
        out.append((f"{package}/py.typed", root / "py.typed"))
    return out


def code_zip(where: Path | None = None) -> Path:
    """A zip of the code executors import (:data:`SHIPPED`), named by a hash of its
    contents, so an unchanged build is made once and a changed one never mistaken for it."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for package, keep in SHIPPED:
            for name, path in _package_files(package, keep):
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                z.writestr(info, path.read_bytes())
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()[:16]
    where = where or Path(tempfile.gettempdir())
    path = where / f"leveret-spark-{digest}.zip"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path


def parse_conf(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` settings as spark-submit's ``--conf`` takes them; ValueError for one
    without ``=`` or without a key."""
    conf: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf {pair!r}: expected KEY=VALUE, e.g. spark.executor.memory=2g")
        conf[key.strip()] = value
    return conf


class SessionError(RuntimeError):
    """No session could be had (Spark Connect without its client libraries, say)."""


def spark_session(
    master: str = "local[*]",
    app_name: str = "leveret-pipeline",
    conf: Mapping[str, str] | None = None,
    log_level: str = "WARN",
    remote: str | None = None,
) -> SparkSession:
    """A session for the pipeline jobs: UTC, a few shuffle partitions, ``amqp``
    registered; the executors' Python set and, on a cluster, the code shipped (see the
    module docstring). ``conf`` is applied last, so it overrides any of these.
    ``log_level`` is the JVM's (log4j: ``OFF`` leaves the command's own one-line errors
    alone on stderr, ``WARN`` is Spark's usual). With ``remote`` (``sc://host:port``) the
    session is a Spark Connect client of that server instead (see :func:`remote_session`)."""
    from pyspark.sql import SparkSession

    from leveret.spark import register

    if remote:
        return remote_session(remote, app_name, conf)

    settings = dict(conf or {})
    python = executor_python(master, settings)
    if python:
        # read by SparkContext when it is made: the one way to choose the workers' Python
        # from a plain Python driver
        os.environ["PYSPARK_PYTHON"] = python
        settings.setdefault(PYSPARK_PYTHON, python)
    shipped = None if is_local(master) else code_zip()
    if shipped is not None:
        # for the Python processes the driver's JVM starts (see the module docstring)
        rest = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(shipped), rest) if p)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.showConsoleProgress", "false")
        # how long a Python process Spark starts (the streaming source's planner among
        # them) waits for the JVM to answer its connection: Spark's 15 s ran out on a
        # loaded 2-core machine, failing the ingest's first batch into a restart
        .config("spark.python.authenticate.socketTimeout", "120s")
        .config(
            "spark.driver.extraJavaOptions",
            f"-Dlog4j2.configurationFile=file:{_log4j2_file(log_level)}",
        )
    )
    for key, value in settings.items():
        builder = builder.config(key, value)
    with _quiet_jvm_start():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level.upper())
    if shipped is not None:
        spark.sparkContext.addPyFile(str(shipped))
    register(spark)
    return spark


def remote_session(
    remote: str, app_name: str = "leveret-pipeline", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A Spark Connect session to ``remote`` (``sc://host:port``), with the code zip added
    as a Python artifact and ``amqp`` registered.

    Measured with Spark 4.3: the data source registers over Connect and batch reads run
    with the code shipped as an artifact, but a *streaming* read is planned on the server
    by a Python process that does not see the session's artifacts: the server's Python
    must have Leveret installed for ``pipeline ingest --remote``, else the query fails with
    ``[PYTHON_DATA_SOURCE_ERROR] Failed to plan Python data source initialize source: …
    ModuleNotFoundError: No module named 'leveret'``."""
    from pyspark.sql import SparkSession

    from leveret.spark import register

    try:
        builder = SparkSession.builder.remote(remote).appName(app_name)
        for key, value in {"spark.sql.session.timeZone": "UTC", **(conf or {})}.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    except ImportError as exc:
        raise SessionError(
            f"Spark Connect needs its client libraries (pip install 'pyspark[connect]'): {exc}"
        ) from None
    spark.addArtifacts(str(code_zip()), pyfile=True)
    register(spark)
    return spark
