"""The GEMM register blocks' speeds (`block_speeds`): measured on this machine once, cached on disk, or set
by SNIPJIT_BLOCK_SPEEDS; `choose_kernel` weighs the blocks' useful columns by them."""
import pytest

from snipjit.runtime.caches import kernel_cache
from snipjit.runtime.implementations import block_speeds as bs
from snipjit.runtime.implementations import gemm_launch as gemm
from snipjit.targets.llvm import jit
from snipjit.targets.llvm.gemm import register_blocks

pytestmark = pytest.mark.skipif(not gemm.available(), reason="no LLVM JIT")


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty disk cache, no setting, and no speeds remembered in this process or offered by a model it
    loaded."""
    monkeypatch.setenv("SNIPJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SNIPJIT_CACHE", raising=False)
    monkeypatch.delenv(bs.ENV, raising=False)
    monkeypatch.setattr(kernel_cache, "_offered", {})
    monkeypatch.setattr(bs, "busy", lambda: False)   # (a parallel test run loads the machine)
    bs._kept_or_measured.cache_clear()
    yield tmp_path / "kernels"
    bs._kept_or_measured.cache_clear()


def blocks():
    return register_blocks(jit.host().level.vector_registers)


def key():
    host = jit.host()
    return bs._key(host.cpu, host.features)


def test_each_block_is_measured_once_and_the_result_kept_on_disk(fresh):
    speeds = bs.block_speeds(gemm.block_rates)
    assert len(speeds) == len(blocks()) and speeds[0] == 1.0 and all(0.2 < s <= 1.0 for s in speeds)
    [path] = fresh.glob("*.speeds")
    assert bs._decoded(path.read_bytes(), key(), len(speeds)) == speeds
    # a new process reads the file instead of measuring: here, the speeds written into it
    written = (1.0,) + (0.5,) * (len(speeds) - 1)
    path.write_bytes(bs._entry(key(), written))
    bs._kept_or_measured.cache_clear()
    assert bs.block_speeds(gemm.block_rates) == written


def test_an_unreadable_or_mismatched_file_is_measured_again(fresh):
    bs.block_speeds(gemm.block_rates)
    [path] = fresh.glob("*.speeds")
    count = len(blocks())
    for data in (b"not an entry", path.read_bytes()[:-3], bs._entry(key(), (1.0,)), bs._entry("other", (1.0,) * count),
                 bs._entry(key(), (1.0,) + (1.5,) * (count - 1))):
        path.write_bytes(data)
        bs._kept_or_measured.cache_clear()
        speeds = bs.block_speeds(gemm.block_rates)
        assert len(speeds) == count and all(0.2 < s <= 1.0 for s in speeds)
        assert bs._decoded(path.read_bytes(), key(), count) == speeds


def test_speeds_measured_on_a_busy_machine_serve_the_process_but_are_not_kept(fresh, monkeypatch):
    measured = []

    def measure(blocks):
        measured.append(blocks)
        return gemm.block_rates(blocks)

    monkeypatch.setattr(bs, "busy", lambda: True)
    speeds = bs.block_speeds(measure)
    assert len(speeds) == len(blocks()) and not list(fresh.glob("*.speeds"))
    assert bs.block_speeds(measure) == speeds and len(measured) == 1   # (once a process)
    monkeypatch.setattr(bs, "busy", lambda: False)
    bs._kept_or_measured.cache_clear()   # (the next process, on a quiet machine, keeps what it measures)
    bs.block_speeds(measure)
    assert len(measured) == 2 and len(list(fresh.glob("*.speeds"))) == 1


def test_the_load_average_per_core_tells_a_busy_machine(monkeypatch):
    monkeypatch.setattr(bs.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(bs.os, "getloadavg", lambda: (1.2, 0.0, 0.0))
    assert not bs.busy()
    monkeypatch.setattr(bs.os, "getloadavg", lambda: (2.1, 0.0, 0.0))
    assert bs.busy()


def test_without_a_disk_cache_nothing_is_written(fresh, monkeypatch):
    monkeypatch.setenv("SNIPJIT_CACHE", "0")
    assert len(bs.block_speeds(gemm.block_rates)) == len(blocks())
    assert not fresh.exists() or not list(fresh.glob("*.speeds"))


def test_a_saved_model_carries_the_speeds_and_a_load_takes_them(fresh, monkeypatch):
    record = {}
    with kernel_cache.recording(record):
        speeds = bs.block_speeds(gemm.block_rates)
    assert bs._decoded(record[key()](), key(), len(speeds)) == speeds
    carried = (1.0,) + (0.55,) * (len(speeds) - 1)   # (what another run measured)
    monkeypatch.setattr(kernel_cache, "_offered", {key(): bs._entry(key(), carried)})
    assert bs.block_speeds(gemm.block_rates) == carried


def test_the_setting_overrides_and_is_checked(fresh, monkeypatch):
    count = len(blocks())
    setting = ",".join(["1"] + ["0.6"] * (count - 1))
    monkeypatch.setenv(bs.ENV, setting)
    assert bs.block_speeds(gemm.block_rates) == (1.0,) + (0.6,) * (count - 1)
    assert not fresh.exists() or not list(fresh.glob("*.speeds"))   # (nothing measured)
    for bad in ("1", ",".join(["0.9"] * count), ",".join(["1"] + ["1.5"] * (count - 1)), "1,a,b,c"[:2 * count - 1],
                ",".join(["1"] + ["0"] * (count - 1))):
        monkeypatch.setenv(bs.ENV, bad)
        with pytest.raises(ValueError, match=f"{bs.ENV}=.*{count} comma-separated speeds"):
            bs.block_speeds(gemm.block_rates)


def test_speeds_are_relative_to_the_wide_block_and_at_most_one():
    assert bs.rounded([100.0, 92.4, 74.6, 103.0]) == (1.0, 0.92, 0.75, 1.0)


def test_choose_kernel_weighs_the_useful_columns_by_the_speeds(fresh, monkeypatch):
    level = jit.host().level
    if level.vector_registers < 32:
        pytest.skip("the three-vector block is a 32-register level's")
    lanes = level.f32_lanes
    n = 4 * lanes + lanes // 4   # 68 columns at 16 lanes: one-vector panels waste 15%, three-vector ones 29%
    monkeypatch.setenv(bs.ENV, "1,0.92,0.9,0.96")
    assert gemm.choose_kernel(n, 68).shape.vectors == 1
    monkeypatch.setenv(bs.ENV, "1,0.92,0.74,0.96")
    assert gemm.choose_kernel(n, 68).shape.vectors == 3
