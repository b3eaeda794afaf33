"""The generated microkernels that are not Snippets (GEMM, convolution and sliding-window kernels) as
object code in the disk cache, so a new process loads them instead of compiling them again (a network
with activations in its convolutions needs a dozen variants, a few tenths of a second each).

The key hashes the kernel's name (which spells out every parameter of its generator: block, lanes,
unrolling, FMA, activation...), the CPU and features it is compiled for, the snipjit version and the
compiler's source (the generators are part of it), so a hit builds no IR at all. An entry whose key or
checksum differ, or that does not read back whole, is compiled again and overwritten — never trusted.
`SNIPJIT_CACHE=0` turns the disk cache off.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

from ...snippets.target_machine import KernelFunction
from ...targets.llvm import jit
from ...targets.llvm.objects import compile_to_object, load_object
from ...version import __version__
from .kernel_cache import compiler_fingerprint, default_directory, seal, unseal, write_atomically


def native_kernel(module: Callable[[], object], name: str, cpu: str, features: str) -> tuple[int, object]:
    """(address, ctypes callable keeping the code alive) of kernel `name`, defined by `module()` (an
    llvmlite module, built only when the cache has no entry; `name` must determine it) and chosen for
    the CPU and features `jit.host()` gave then: refused when SNIPJIT_ISA has since selected another ISA
    level (its code would not fit the chosen shape)."""
    host = jit.host()
    if (host.cpu, host.features) != (cpu, features):
        raise RuntimeError(f"kernel {name} was chosen for another ISA level than SNIPJIT_ISA now selects "
                           f"({host.level.name})")
    key = hashlib.sha256("\n--\n".join([name, cpu, features, __version__, compiler_fingerprint()]).encode()
                         ).hexdigest()
    directory = default_directory()
    path = None if directory is None else directory / f"{key}.o"
    data = _read(path, key)
    if data is None:
        data, _ = compile_to_object(str(module()))
        if path is not None:
            write_atomically(path, seal(key, data))
    loaded = load_object(data)
    return loaded.engine.get_function_address(name), loaded.cfunc(name, None, *KernelFunction.ARGTYPES)


def _read(path: Path | None, key: str) -> bytes | None:
    """The object code of the entry at `path`, when it is whole and the entry of `key`."""
    try:
        sealed = None if path is None or not path.exists() else unseal(path.read_bytes(), key)
    except OSError:
        return None
    return None if sealed is None else sealed[1]
