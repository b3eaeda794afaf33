"""The ISA description: levels from host features, SNIPJIT_ISA parsing and its errors, the features a
forced level compiles with, cache sizes from sysfs."""
import pytest

from snipjit.targets import isa

ZEN5 = ("+64bit,+avx,+avx2,+fma,+f16c,+sse4.2,+popcnt,+avx512f,+avx512bw,+avx512dq,+avx512vl,"
        "+avx512vnni,+avx512bf16,+evex512,-amx-tile,+vaes")
ZEN3 = "+64bit,+avx,+avx2,+fma,+f16c,+sse4.2,+popcnt,-avx512f,-avx512bw,+vaes"
NEHALEM = "+64bit,+sse4.2,+popcnt,-avx,-avx2,-fma"


@pytest.mark.parametrize("features, level", [(ZEN5, "avx512"), (ZEN3, "avx2"), (NEHALEM, "sse"),
                                             ("+avx2,-fma", "sse"), ("+sse2", "sse")])
def test_the_host_level_is_the_highest_its_features_execute(features, level):
    assert isa.highest_level(features).name == level


@pytest.mark.parametrize("value, expected", [("", None), ("native", None), (" AVX2 ", "avx2"), ("sse", "sse"),
                                             ("avx512", "avx512")])
def test_requested_level_parsing(value, expected):
    assert isa.requested_level(value) == expected


def test_an_unknown_level_names_the_choices():
    with pytest.raises(isa.IsaError, match="'avx3' is not an ISA level; choose one of avx512, avx2, sse or native"):
        isa.requested_level("avx3")


def test_the_environment_variable_is_read(monkeypatch):
    monkeypatch.setenv("SNIPJIT_ISA", "sse")
    assert isa.requested_level() == "sse"
    monkeypatch.delenv("SNIPJIT_ISA")
    assert isa.requested_level() is None


def test_native_keeps_the_host_cpu_and_features():
    target = isa.select("znver5", ZEN5, None)
    assert (target.level, target.cpu, target.features, target.native) == (isa.AVX512, "znver5", ZEN5, True)
    assert isa.select("znver5", ZEN5, "avx512").native


def test_a_forced_level_switches_off_the_features_above_it():
    target = isa.select("znver5", ZEN5, "avx2")
    on = isa.enabled(target.features)
    assert target.level is isa.AVX2 and target.cpu == "znver5" and not target.native
    assert {"avx2", "fma", "f16c", "vaes"} <= on and not any(f.startswith(("avx512", "evex")) for f in on)
    assert isa.highest_level(target.features) is isa.AVX2
    sse = isa.select("znver5", ZEN5, "sse")
    assert isa.highest_level(sse.features) is isa.SSE
    assert not any(f.startswith(("avx", "fma", "f16c", "vaes")) for f in isa.enabled(sse.features))


def test_a_level_the_host_cannot_execute_is_refused_naming_what_it_lacks():
    with pytest.raises(isa.IsaError, match=r"SNIPJIT_ISA=avx512: this CPU \(znver3\) cannot execute avx512 code; "
                                           r"it lacks avx512f, avx512bw, avx512dq, avx512vl \(its highest level is avx2\)"):
        isa.select("znver3", ZEN3, "avx512")
    with pytest.raises(isa.IsaError, match="lacks avx2, fma, f16c"):
        isa.select("nehalem", NEHALEM, "avx2")


def test_levels_describe_their_registers():
    assert [(lv.name, lv.f32_lanes, lv.vector_registers, lv.cheap_masked_memory, lv.fused_multiply_add)
            for lv in isa.LEVELS] == [("avx512", 16, 32, True, True), ("avx2", 8, 16, False, True),
                                      ("sse", 4, 16, False, False)]


def test_gcc_flags_follow_the_level():
    assert isa.gcc_arch_flags(isa.select("znver5", ZEN5, None)) == ("-march=native",)
    assert isa.gcc_arch_flags(isa.select("znver5", ZEN5, "avx2")) == ("-march=x86-64-v3", "-mtune=native")


def test_cache_sizes_come_from_sysfs(tmp_path):
    for index, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"),
                                                 (2, "Unified", "1024K"), (3, "Unified", "32M")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    assert isa.cache_sizes(tmp_path) == isa.CacheSizes(48 << 10, 1 << 20)


def test_cache_sizes_default_where_sysfs_does_not_tell(tmp_path):
    assert isa.cache_sizes(tmp_path / "missing") == isa.CacheSizes(32 << 10, 512 << 10)
