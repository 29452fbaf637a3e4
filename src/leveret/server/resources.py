"""Resource alarms and paging, from measurements, as RabbitMQ's vm_memory_monitor,
rabbit_memory_monitor and rabbit_disk_monitor.

- Memory: the process's resident set (``/proc/self/statm``, RabbitMQ's ``rss``
  strategy) against ``vm_memory_high_watermark`` (a fraction of the machine's RAM from
  ``/proc/meminfo``, or an absolute size). Above it, the memory alarm blocks publishers.
  From ``vm_memory_high_watermark_paging_ratio`` of it, classic queues page: the budget
  of bodies they may hold in memory is what they hold now plus the headroom left below
  the paging threshold, and under it (over the threshold) the queues holding the most
  page first until the excess is released.
- Disk: the free space (``statvfs``: what ``df`` shows as available) of the data
  directory's file system against ``disk_free_limit``. Below it, the disk alarm blocks
  publishers.

Both are measured on every tick of the server (a few microseconds each)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from leveret.broker.broker import BrokerCore
from leveret.broker.events import AlarmCleared, AlarmSet
from leveret.server.config import Config, MemoryWatermark
from leveret.server.state import ServerState

log = logging.getLogger(__name__)

MEMORY = "memory"
DISK = "disk"
# What the log says when a resource's alarm is raised or cleared (RabbitMQ's words): the
# text, then its first argument either way.
_ALARM_LOGS = {
    MEMORY: ("vm_memory_high_watermark %s. Memory used:%d allowed:%d", "set", "clear"),
    DISK: ("Free disk space is %s. Free bytes: %d. Limit: %d", "insufficient", "sufficient"),
}
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TRIM_INTERVAL = 2.0  # seconds between malloc_trim calls while memory is short


def total_memory() -> int:
    """The machine's RAM (MemTotal), as vm_memory_monitor reads it on Linux; 1 GiB
    where it cannot be read, as RabbitMQ assumes for an unknown OS."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 1024 * 1024 * 1024


class ResidentMemory:
    """The process's resident set size, read from /proc/self/statm."""

    def __init__(self) -> None:
        self._fd: int | None = None
        with contextlib.suppress(OSError):
            self._fd = os.open("/proc/self/statm", os.O_RDONLY)

    def read(self) -> int:
        if self._fd is not None:
            with contextlib.suppress(OSError, ValueError, IndexError):
                return int(os.pread(self._fd, 128, 0).split()[1]) * _PAGE_SIZE
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def disk_free(path: Path) -> int | None:
    """Bytes available to the broker on the file system holding ``path`` (df's
    'Available'), or None when it cannot be measured."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


# glibc's malloc_trim: gives freed heap memory back to the system, so that resident
# memory falls once paged-out bodies are freed (None elsewhere)
_malloc_trim = _load_malloc_trim()


# RabbitMQ 3.10.8 keeps 97 of the process's descriptors for its own files and lets sockets
# have 90 % of the rest, less 2 (file_handle_cache's OBTAIN_LIMIT); measured here: an open
# files limit of 1024 is "limit: 927" and sockets "limit: 832" in rabbitmqctl status, and
# fd_total 1024, sockets_total 832 in /api/nodes.
FD_RESERVED = 97


def file_descriptors() -> tuple[int, int]:
    """(open descriptors of this process, its open files limit): RabbitMQ's fd_used and
    fd_total. The limit is the soft RLIMIT_NOFILE, what ``ulimit -n`` shows."""
    import resource

    try:
        used = len(os.listdir("/proc/self/fd")) - 1  # less the one listdir opened
    except OSError:
        used = 0
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    total = soft if soft != resource.RLIM_INFINITY else 1 << 20
    return used, total


def sockets_limit(fd_total: int) -> int:
    """RabbitMQ's sockets_total for an open files limit."""
    return max(0, int((fd_total - FD_RESERVED) * 0.9 - 2))


class ResourceMonitor:
    """Measures memory and disk, sets and clears the alarms in the server state, and
    moves the classic queues' memory budget."""

    def __init__(
        self,
        config: Config,
        state: ServerState,
        broker: BrokerCore,
        rss: Callable[[], int] | None = None,
        disk: Callable[[Path], int | None] = disk_free,
        total: int | None = None,
    ) -> None:
        """``rss``, ``disk`` and ``total`` replace the measurements (tests)."""
        self.state = state
        self.broker = broker
        self.total_memory = total if total is not None else total_memory()
        self.mem_limit = config.vm_memory_high_watermark.limit(self.total_memory)
        self.paging_ratio = config.vm_memory_high_watermark_paging_ratio
        self.disk_free_limit = config.disk_free_limit.limit(self.total_memory)
        self.data_dir = config.data_dir
        self._rss = ResidentMemory()
        self._read_rss = rss or self._rss.read
        self._disk_free = disk
        self.mem_used = self._read_rss()
        self.disk_free: int | None = None
        self._last_trim = 0.0

    def log_limits(self) -> None:
        log.info(
            "Memory high watermark set to %d MiB (%d bytes) of %d MiB (%d bytes) total",
            self.mem_limit // 2**20,
            self.mem_limit,
            self.total_memory // 2**20,
            self.total_memory,
        )
        if self.data_dir is not None:
            log.info("Disk free limit set to %dMB", self.disk_free_limit // 1_000_000)

    @property
    def paging_threshold(self) -> int:
        return int(self.mem_limit * self.paging_ratio)

    @property
    def mem_alarm(self) -> bool:
        return MEMORY in self.state.alarms

    @property
    def disk_alarm(self) -> bool:
        return DISK in self.state.alarms

    def check(self) -> None:
        self._check_memory()
        self._check_disk()

    # ------------------------------------------------------------------ memory
    def _check_memory(self) -> None:
        rss = self.mem_used = self._read_rss()
        budget = self.broker.memory
        threshold = self.paging_threshold
        if rss > threshold:
            # Over the paging threshold: the queues release the excess, biggest first.
            budget.limit = max(0, budget.used - (rss - threshold))
            if self.broker.release_memory():
                now = time.monotonic()
                if now - self._last_trim >= _TRIM_INTERVAL:
                    self._last_trim = now
                    if _malloc_trim is not None:
                        _malloc_trim(0)
                    rss = self.mem_used = self._read_rss()
        else:
            budget.limit = budget.used + (threshold - rss)
        self._set(MEMORY, rss > self.mem_limit, rss, self.mem_limit)

    # ------------------------------------------------------------------ disk
    def _check_disk(self) -> None:
        if self.data_dir is None:
            return
        free = self.disk_free = self._disk_free(self.data_dir)
        if free is None:
            return
        self._set(DISK, free < self.disk_free_limit, free, self.disk_free_limit)

    def set_memory_watermark(self, watermark: MemoryWatermark) -> None:
        """rabbitmqctl set_vm_memory_high_watermark: the new limit, acted on at once."""
        self.mem_limit = watermark.limit(self.total_memory)
        self.log_limits()
        self._check_memory()

    def _set(self, resource: str, alarm: bool, amount: int, limit: int) -> None:
        """Whether ``resource`` is in alarm, by ``amount`` against ``limit``: a change is
        logged in RabbitMQ's words and told to the broker."""
        alarms = self.state.alarms
        if alarm == (resource in alarms):
            return
        text, raised, cleared = _ALARM_LOGS[resource]
        log.warning(text, raised if alarm else cleared, amount, limit)
        events = self.broker.observers
        if alarm:
            # publishers are blocked at their next publish, as RabbitMQ does (AMQP 1.0
            # sessions close their incoming window now, as RabbitMQ 4's do)
            alarms.add(resource)
            events.emit(AlarmSet(resource))
            for conn in list(self.state.connections):
                conn.alarm_raised()
            return
        alarms.discard(resource)
        events.emit(AlarmCleared(resource))
        if not alarms:
            for conn in list(self.state.connections):
                conn.set_blocked(False, "")

    def close(self) -> None:
        self._rss.close()
