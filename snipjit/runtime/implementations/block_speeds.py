"""The GEMM register blocks' speeds on this machine: measured once, then read from the disk cache.

`gemm_launch.choose_kernel` weighs each register block's useful share of the columns it computes by the
block's speed relative to the wide block of the ISA level. The ratio belongs to the core, not to the level:
the one-vector block ran at ~0.9 of the wide one on Zen 4 (AVX-512) and at 0.71-0.80 on a Xeon with two
512-bit FMA units, where ShuffleNet's grouped 1×1 convolutions (68 columns a group) took it over the faster
three-vector block as long as the speeds were Zen 4's (the network 1.10× faster with its own); and the CPU's
name does not tell the cores apart under a hypervisor (that Xeon reports a client model). So the first
product a process plans measures them (`gemm_launch.block_rates`): each block multiplies the same
L2-resident product on the calling thread, the blocks alternating, best of several rounds (on that Xeon,
repeated measurements spread over 0.71-0.80 for the one-vector block, 0.91-1.0 for the three-vector one).
A speed is rounded to `STEP` and at most 1: a block as fast as the wide one ties with it, and the widest
wins ties.

The speeds are kept per CPU, features and snipjit version beside the kernels in the disk cache
(`SNIPJIT_CACHE=0`: measured once per process) — unless the machine was busy while they were measured (a
1-minute load average above `BUSY_LOAD` per core: there, during a parallel test run, the two-vector block
measured 0.96-0.98 of the wide one against 0.90-0.92 on a quiet machine); such speeds serve the process that
measured them, and the next one measures again. A saved model carries those it was built with, like
its kernels: loaded, it packs its weights for the same blocks and compiles nothing. `SNIPJIT_BLOCK_SPEEDS`
sets them instead (one number per register block of the level, the wide block's first: "1,0.92,0.74,0.96"),
for runs that must choose the same blocks on every machine.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
from typing import Callable

from ...version import __version__
from ..caches.kernel_cache import default_directory, note, offered, seal, unseal, write_atomically

ENV = "SNIPJIT_BLOCK_SPEEDS"
STEP = 0.01
BUSY_LOAD = 0.75   # runnable threads per core (1-minute load average) above which measured speeds are not kept
_measuring = threading.Lock()   # (threads planning at once measure once, not against each other)


def block_speeds(measure: Callable[[tuple], list[float]]) -> tuple[float, ...]:
    """The speed of each register block of the current ISA level (`gemm.register_blocks`), the wide one's 1:
    the setting, else those a loaded model came with, else this machine's (disk cache, else `measure(blocks)`:
    each block's rate)."""
    from ...targets.llvm import jit
    from ...targets.llvm.gemm import register_blocks
    host = jit.host()
    blocks = register_blocks(host.level.vector_registers)
    setting = os.environ.get(ENV, "")
    if setting:
        return parse_setting(setting, len(blocks))
    key = _key(host.cpu, host.features)
    speeds = _decoded(offered(key), key, len(blocks)) or _speeds(key, blocks, measure)
    note(key, lambda: _entry(key, speeds))   # (a saved model carries them: loaded, it packs for the same blocks)
    return speeds


def _speeds(key: str, blocks: tuple, measure: Callable[[tuple], list[float]]) -> tuple[float, ...]:
    with _measuring:
        return _kept_or_measured(key, blocks, measure)


@functools.cache
def _kept_or_measured(key: str, blocks: tuple, measure: Callable[[tuple], list[float]]) -> tuple[float, ...]:
    directory = default_directory()
    path = None if directory is None else directory / f"{key}.speeds"
    if path is not None and path.exists():
        try:
            speeds = _decoded(path.read_bytes(), key, len(blocks))
        except OSError:
            speeds = None
        if speeds is not None:
            return speeds
    speeds = rounded(measure(blocks))   # (an unreadable or stale file is measured again and overwritten)
    if path is not None and not busy():
        write_atomically(path, _entry(key, speeds))
    return speeds


def busy() -> bool:
    """Whether other work shares the cores now (see `BUSY_LOAD`; unknown: not busy)."""
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        return False
    return load > BUSY_LOAD * (os.cpu_count() or 1)


@functools.cache
def _key(cpu: str, features: str) -> str:
    return hashlib.sha256("\n--\n".join(["block speeds", cpu, features, __version__]).encode()).hexdigest()


def _entry(key: str, speeds: tuple[float, ...]) -> bytes:
    return seal(key, json.dumps(list(speeds)).encode())


def _decoded(entry: bytes | None, key: str, count: int) -> tuple[float, ...] | None:
    """The speeds of a sealed entry of `key`, or None (no entry, not whole, or not `count` speeds in (0, 1])."""
    unsealed = None if entry is None else unseal(entry, key)
    if unsealed is None:
        return None
    try:
        speeds = tuple(float(s) for s in json.loads(unsealed[1]))
    except (ValueError, TypeError):
        return None
    return speeds if len(speeds) == count and all(0 < s <= 1 for s in speeds) else None


def parse_setting(setting: str, count: int) -> tuple[float, ...]:
    """The speeds `SNIPJIT_BLOCK_SPEEDS` gives, checked: `count` numbers in (0, 1], the first 1."""
    try:
        speeds = tuple(float(s) for s in setting.split(","))
    except ValueError:
        speeds = ()
    if len(speeds) != count or not all(0 < s <= 1 for s in speeds) or speeds[0] != 1:
        raise ValueError(f"{ENV}={setting!r}: expected {count} comma-separated speeds in (0, 1], one per "
                         f"register block of this ISA level, the first (the wide block's) 1")
    return speeds


def rounded(rates: list[float]) -> tuple[float, ...]:
    """Rates (the wide block's first) as speeds relative to the wide block: rounded to STEP, at most 1."""
    return tuple(min(1.0, round(round(rate / rates[0] / STEP) * STEP, 2)) for rate in rates)
