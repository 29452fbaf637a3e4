"""How the tests run Spark's JVMs: the C1 compiler alone, the serial collector, and no
bytecode verification of the classes on the class path (Spark's own jars, which the JDK
verifies each time a JVM loads them).

The suite is CPU-bound on two cores, and what a short-lived JVM spends is mostly its
start: the JIT compiler's threads and the loading of Spark's classes. Measured here, alone
on the machine: the classic-queue ingest test took 90 CPU-seconds with the JVM's defaults
and 58 with the first two options (61 s and 50 s of wall time); the 200,000-record
exactly-once test 102 and 85, in the same wall time. Without verification as well, a
local Spark session that runs one small job took 9.8 and 9.7 CPU-seconds against 12.2 and
11.1. The tests check behaviour; the benchmarks (``benchmarks/``) run Spark as users do."""

from __future__ import annotations

#: For every JVM a test starts: drivers, executors, a standalone master and its workers.
OPTIONS = (
    "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    " -XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote"
)

#: ``SPARK_SUBMIT_OPTS`` for a driver (``spark-submit``, and PySpark's gateway through
#: it): the options, no web UI, and its executors started with the same options (a
#: ``spark.*`` system property is read as a setting).
SUBMIT_OPTS = f'{OPTIONS} -Dspark.ui.enabled=false -Dspark.executor.extraJavaOptions="{OPTIONS}"'

#: ``SPARK_DAEMON_JAVA_OPTS`` for a standalone master and its workers.
DAEMON_OPTS = OPTIONS
