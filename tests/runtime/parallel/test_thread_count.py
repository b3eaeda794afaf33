"""The default thread count: the smallest of the affinity mask, the cgroup CPU quota (v1 and v2, on
fake cgroup trees) and the OMP_NUM_THREADS / SNIPJIT_NUM_THREADS settings."""
from pathlib import Path

import pytest

from snipjit.runtime.parallel import thread_count
from snipjit.runtime.parallel.thread_count import cgroup_cpus, default_threads, thread_limits


@pytest.fixture
def no_settings(monkeypatch):
    for name in thread_count.ENV_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(thread_count, "cgroup_cpus", lambda: None)
    monkeypatch.setattr(thread_count, "affinity_cpus", lambda: 8)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_smallest_limit_wins(no_settings, monkeypatch):
    assert default_threads() == 8
    monkeypatch.setenv("SNIPJIT_NUM_THREADS", "3")
    assert default_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "2,1")   # a list per nesting level: the first counts
    assert default_threads() == 2
    monkeypatch.setenv("SNIPJIT_NUM_THREADS", "0")
    assert default_threads() == 1
    monkeypatch.setenv("SNIPJIT_NUM_THREADS", "12")
    monkeypatch.setenv("OMP_NUM_THREADS", "not a number")   # ignored, not an error
    assert default_threads() == 8
    monkeypatch.setattr(thread_count, "cgroup_cpus", lambda: 4)
    assert default_threads() == 4
    assert thread_limits() == {"affinity": 8, "cgroup quota": 4, "OMP_NUM_THREADS": None, "SNIPJIT_NUM_THREADS": 12}


def test_cgroup_v2_quota_rounds_up_and_the_tightest_ancestor_counts(tmp_path):
    proc = tmp_path / "proc_cgroup"
    write(proc, "0::/kubepods/pod1/container\n")
    root = tmp_path / "cgroup"
    write(root / "cpu.max", "max 100000\n")
    write(root / "kubepods" / "cpu.max", "400000 100000\n")
    write(root / "kubepods" / "pod1" / "cpu.max", "150000 100000\n")       # 1.5 CPUs: 2 threads
    write(root / "kubepods" / "pod1" / "container" / "cpu.max", "max 100000\n")
    assert cgroup_cpus(proc, root) == 2
    write(root / "kubepods" / "pod1" / "cpu.max", "50000 100000\n")        # half a CPU: still one thread
    assert cgroup_cpus(proc, root) == 1
    write(root / "kubepods" / "pod1" / "cpu.max", "max 100000\n")
    assert cgroup_cpus(proc, root) == 4


def test_cgroup_v2_inside_a_container_reads_its_root(tmp_path):
    proc = tmp_path / "proc_cgroup"
    write(proc, "0::/docker/abc123\n")   # the path of the host's hierarchy, not mounted in the container
    root = tmp_path / "cgroup"
    write(root / "cpu.max", "200000 100000\n")
    assert cgroup_cpus(proc, root) == 2


def test_cgroup_v1_quota(tmp_path):
    proc = tmp_path / "proc_cgroup"
    write(proc, "5:memory:/job\n4:cpu,cpuacct:/job\n")
    root = tmp_path / "cgroup"
    write(root / "cpu,cpuacct" / "job" / "cpu.cfs_quota_us", "300000\n")
    write(root / "cpu,cpuacct" / "job" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpus(proc, root) == 3
    write(root / "cpu,cpuacct" / "job" / "cpu.cfs_quota_us", "-1\n")        # no quota
    assert cgroup_cpus(proc, root) is None


def test_no_cgroup_information_means_no_quota(tmp_path):
    assert cgroup_cpus(tmp_path / "missing", tmp_path) is None
    write(tmp_path / "proc_cgroup", "0::/\n")
    write(tmp_path / "cgroup" / "cpu.max", "garbage\n")
    assert cgroup_cpus(tmp_path / "proc_cgroup", tmp_path / "cgroup") is None
