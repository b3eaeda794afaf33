"""The x86 instruction-set level kernels are generated for: one description every code generator reads.

A level says how wide vectors are, how many vector registers there are, whether masked loads and stores
are cheap (AVX-512 mask registers: yes; AVX2's vmaskmov: slow, and its masks occupy vector registers),
and which LLVM CPU and features compile code of that level. The level comes from the host's features,
the highest it can execute; `SNIPJIT_ISA=avx512|avx2|sse|native` forces a lower one (so one machine tests
every level). Code of a forced level is compiled for the host's CPU name (its scheduling model) with the
features above the level switched off, so it differs — and is cached — apart from native code.

The cache sizes (L1 data, L2) come from Linux's sysfs, with defaults where it is not readable; the GEMM
blocks its loops for them.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "SNIPJIT_ISA"
CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")


class IsaError(RuntimeError):
    """An unknown ISA level was asked for, or one the host cannot execute."""


@dataclass(frozen=True)
class IsaLevel:
    name: str
    vector_bits: int
    vector_registers: int
    cheap_masked_memory: bool        # masked loads/stores cost about as much as plain ones
    fused_multiply_add: bool         # a vector FMA instruction (without one, llvm.fma is a library call)
    generic_cpu: str                 # the LLVM/GCC CPU name of the level (x86-64-vN), for foreign hosts
    required: tuple[str, ...]        # LLVM features the level needs
    disabled: tuple[str, ...]        # prefixes of host features switched off when compiling for the level

    @property
    def f32_lanes(self) -> int:
        return self.vector_bits // 32

    def missing(self, features: frozenset[str]) -> list[str]:
        return [f for f in self.required if f not in features]


AVX512 = IsaLevel("avx512", 512, 32, True, True, "x86-64-v4",
                  ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx2", "fma"), ())
AVX2 = IsaLevel("avx2", 256, 16, False, True, "x86-64-v3", ("avx2", "fma", "f16c"),
                ("avx512", "avx10", "amx", "evex512"))
SSE = IsaLevel("sse", 128, 16, False, False, "x86-64-v2", ("sse4.2", "popcnt"),
               ("avx", "amx", "fma", "f16c", "xop", "vaes", "vpclmulqdq"))
LEVELS: tuple[IsaLevel, ...] = (AVX512, AVX2, SSE)   # highest first
BY_NAME = {level.name: level for level in LEVELS}


@dataclass(frozen=True)
class CacheSizes:
    l1d: int   # bytes per core
    l2: int


@dataclass(frozen=True)
class CpuTarget:
    """What kernels are compiled for: a level, and the LLVM CPU name and feature string that produce it."""
    level: IsaLevel
    cpu: str
    features: str      # "+avx2,-avx512f,..."
    native: bool       # the host's own highest level


def enabled(features: str) -> frozenset[str]:
    """The names switched on in an LLVM feature string."""
    return frozenset(f[1:] for f in features.split(",") if f.startswith("+"))


@functools.cache   # (asked on every kernel choice: jit.host().level)
def highest_level(features: str) -> IsaLevel:
    """The highest level an LLVM feature string can execute (SSE, the portable level, when none fits)."""
    on = enabled(features)
    return next((level for level in LEVELS if not level.missing(on)), SSE)


def requested_level(value: str | None = None) -> str | None:
    """The level `SNIPJIT_ISA` (or `value`) asks for; None: the host's own."""
    value = (os.environ.get(ENV_VAR, "") if value is None else value).strip().lower()
    if value in ("", "native"):
        return None
    if value not in BY_NAME:
        raise IsaError(f"{ENV_VAR}={value!r} is not an ISA level; choose one of "
                       f"{', '.join(BY_NAME)} or native")
    return value


def restrict(features: str, level: IsaLevel) -> str:
    """`features` with everything above `level` switched off."""
    out = []
    for f in features.split(","):
        if f.startswith("+") and f[1:].startswith(level.disabled):
            f = "-" + f[1:]
        out.append(f)
    return ",".join(out)


def select(host_cpu: str, host_features: str, requested: str | None) -> CpuTarget:
    """The target for a host (LLVM CPU name and features) and a requested level name (None: native)."""
    best = highest_level(host_features)
    if requested is None or requested == best.name:
        return CpuTarget(best, host_cpu, host_features, native=True)
    level = BY_NAME[requested]
    missing = level.missing(enabled(host_features))
    if missing:
        raise IsaError(f"{ENV_VAR}={requested}: this CPU ({host_cpu}) cannot execute {requested} code; "
                       f"it lacks {', '.join(missing)} (its highest level is {best.name})")
    return CpuTarget(level, host_cpu, restrict(host_features, level), native=False)


def current() -> CpuTarget:
    """The target for this host at the level `SNIPJIT_ISA` asks for."""
    return select_for_host(requested_level())


@functools.cache
def select_for_host(requested: str | None) -> CpuTarget:
    """The target for this host at a requested level (None: its own); IsaError if it cannot execute it."""
    import llvmlite.binding as llvm   # the host's CPU name and features, as LLVM names them
    return select(llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten(), requested)


def gcc_arch_flags(target: CpuTarget) -> tuple[str, ...]:
    """GCC flags compiling for `target`: the host's own CPU, or the level's generic one tuned for the host."""
    return ("-march=native",) if target.native else (f"-march={target.level.generic_cpu}", "-mtune=native")


def _size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


@functools.cache
def cache_sizes(root: Path = CACHE_DIR) -> CacheSizes:
    """L1 data and L2 sizes of cpu0 (defaults, 32 KiB and 512 KiB, where sysfs does not tell)."""
    sizes = {}
    for index in sorted(root.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified"):
            sizes.setdefault(level, size)
    return CacheSizes(sizes.get(1, 32 << 10), sizes.get(2, 512 << 10))
