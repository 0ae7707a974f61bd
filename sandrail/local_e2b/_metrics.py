"""A sandbox's metrics, measured on this machine: what ``get_metrics`` and
the sandbox's size fields report.

A sandbox shares this machine, so its totals are the machine's: every CPU,
all memory, the disk its directories are on. Its use is measured from
``/proc`` and its own directories: CPU as the share of the machine its
processes used since the sample before (time of processes that ended in
between is not counted), memory as their resident set, disk as the blocks of
its own ``/tmp``, ``/home/user`` and ``/root``. Page cache is not told apart
per sandbox: ``memCache`` is 0.

Strategy: E2B samples every 5 seconds; local-e2b samples when a sandbox
starts and whenever its metrics are asked for, and answers the samples
whose second lies in the asked range. No timer runs per sandbox.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

__all__ = ["HOST", "Host", "Meter", "Sample"]

_TICKS = os.sysconf("SC_CLK_TCK")
_KEPT = 4096
"""Samples kept per sandbox (the oldest go first)."""
_PAGE = os.sysconf("SC_PAGE_SIZE")


@attrs.frozen
class Host:
    """This machine's totals."""

    cpu_count: int
    mem_total: int

    @classmethod
    def measure(cls) -> Host:
        mem_total = 0
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    mem_total = int(line.split()[1]) * 1024
        return cls(cpu_count=os.cpu_count() or 1, mem_total=mem_total)


HOST = Host.measure()


@attrs.frozen
class Sample:
    """One measurement of a sandbox."""

    at: float
    cpu_used_pct: float
    mem_used: int
    disk_used: int
    disk_total: int

    def to_json(self) -> dict[str, Any]:
        """The API's ``SandboxMetric``."""
        moment = datetime.fromtimestamp(self.at, UTC)
        return {
            "timestamp": moment.isoformat().replace("+00:00", "Z"),
            "timestampUnix": int(self.at),
            "cpuCount": HOST.cpu_count,
            "cpuUsedPct": round(self.cpu_used_pct, 2),
            "memUsed": self.mem_used,
            "memTotal": HOST.mem_total,
            "memCache": 0,
            "diskUsed": self.disk_used,
            "diskTotal": self.disk_total,
        }


def _ticks_and_rss(pid: int) -> tuple[int, int]:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
            resident = int(statm.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0, 0  # ended meanwhile
    return int(fields[11]) + int(fields[12]), resident * _PAGE


def _blocks(top: Path) -> int:
    used = 0
    for directory, _, names in os.walk(top):
        for name in names:
            try:
                used += os.lstat(os.path.join(directory, name)).st_blocks * 512
            except OSError:
                continue
    return used


class Meter:
    """The samples of one sandbox: ``processes`` lists its pids now,
    ``directories`` are its own (their disk is the sandbox's disk)."""

    def __init__(self, processes: Callable[[], Iterable[int]], directories: list[Path]) -> None:
        self._processes = processes
        self._directories = directories
        self._samples: deque[Sample] = deque(maxlen=_KEPT)
        self._last = (time.monotonic(), 0)

    def sample(self) -> Sample:
        """Measure now; the sample is kept."""
        ticks = rss = 0
        for pid in self._processes():
            more_ticks, more_rss = _ticks_and_rss(pid)
            ticks, rss = ticks + more_ticks, rss + more_rss
        now = time.monotonic()
        then, ticks_then = self._last
        self._last = (now, ticks)
        busy = max(0, ticks - ticks_then) / _TICKS
        share = 100 * busy / max(now - then, 1e-3) / HOST.cpu_count
        disk = os.statvfs(self._directories[0])
        sample = Sample(
            at=time.time(),
            cpu_used_pct=min(100.0, share),
            mem_used=rss,
            disk_used=sum(_blocks(top) for top in self._directories),
            disk_total=disk.f_blocks * disk.f_frsize,
        )
        self._samples.append(sample)
        return sample

    def between(self, start: int, end: int) -> list[Sample]:
        """The samples whose whole second is from ``start`` to ``end``."""
        return [s for s in self._samples if start <= int(s.at) <= end]
