"""How many threads snipjit uses by default: the smallest of every limit the process is under.

A container's CPU quota is the classic trap: `os.sched_getaffinity` reports every core of the host, while
the cgroup lets the process use two of them; a pool sized by the cores then oversubscribes the quota and
runs slower than one sized by it. The limits, each where it is set:

- the CPU affinity mask (`taskset`, `docker --cpuset-cpus`);
- the cgroup CPU quota, rounded up to whole CPUs (`docker --cpus`, Kubernetes CPU limits): `cpu.max`
  under cgroup v2, `cpu.cfs_quota_us` / `cpu.cfs_period_us` under v1, the tightest along the cgroup's path;
- `OMP_NUM_THREADS` (what Ray, Triton and batch schedulers set for a worker) and `SNIPJIT_NUM_THREADS`.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

ENV_SETTINGS = ("OMP_NUM_THREADS", "SNIPJIT_NUM_THREADS")


def affinity_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _env_threads(name: str) -> int | None:
    """The setting of `name` as a thread count (at least 1), or None when unset or not a number."""
    text = os.environ.get(name, "").strip().split(",")[0]   # OMP allows a list per nesting level
    try:
        return max(1, int(text))
    except ValueError:
        return None


def _quota(cpu_max: Path) -> float | None:
    """CPUs allowed by a cgroup v2 `cpu.max` file ("max 100000" or "<quota> <period>")."""
    try:
        quota, period = cpu_max.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def _quota_v1(folder: Path) -> float | None:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def _ancestors(root: Path, relative: str) -> list[Path]:
    """The cgroup's folder under `root` and each parent up to `root` (inside a container the path in
    /proc/self/cgroup is often not mounted: then only `root` itself)."""
    parts = [p for p in relative.split("/") if p]
    return [root.joinpath(*parts[:i]) for i in range(len(parts), -1, -1) if root.joinpath(*parts[:i]).is_dir()]


def cgroup_cpus(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Whole CPUs the cgroup quota allows this process (rounded up), or None when there is no quota."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    quotas: list[float] = []
    for line in lines:
        _, controllers, relative = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":                                    # cgroup v2: one unified hierarchy
            quotas += [q for q in (_quota(d / "cpu.max") for d in _ancestors(root, relative)) if q]
        elif "cpu" in controllers.split(","):                    # cgroup v1: the cpu controller's mount
            for mount in (root / controllers, root / "cpu", root / "cpu,cpuacct"):
                if mount.is_dir():
                    quotas += [q for q in (_quota_v1(d) for d in _ancestors(mount, relative)) if q]
                    break
    return max(1, math.ceil(min(quotas) - 1e-9)) if quotas else None


def thread_limits() -> dict[str, int | None]:
    """Each limit by name (None: not set), for `explain()` and the docs."""
    limits: dict[str, int | None] = {"affinity": affinity_cpus(), "cgroup quota": cgroup_cpus()}
    limits.update({name: _env_threads(name) for name in ENV_SETTINGS})
    return limits


def default_threads() -> int:
    """The smallest of the limits in `thread_limits()`."""
    return min(v for v in thread_limits().values() if v is not None)
