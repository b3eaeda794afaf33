"""The generated microkernels that are not Snippets (GEMM, convolution and sliding-window kernels) as
object code in the disk cache, so a new process loads them instead of compiling them again (a network
with activations in its convolutions needs a dozen variants, 0.1-6 s of compiling each).

The key hashes the kernel's name (which spells out every parameter of its generator: block, lanes,
unrolling, FMA, activation...), the CPU and features it is compiled for, the snipjit version and the
compiler's source (the generators are part of it), so a hit builds no IR at all. An entry whose key or
checksum differ, or that does not read back whole, is compiled again and overwritten — never trusted.
`SNIPJIT_CACHE=0` turns the disk cache off. A `NativeJob` describes a kernel as data, so a compile worker
(`planning.compile_workers`) can build it ahead of its first use and hand the entry back.
"""
from __future__ import annotations

import hashlib
import importlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...snippets.target_machine import KernelFunction
from ...targets.llvm import jit
from ...targets.llvm.objects import LoadedObject, compile_to_object, load_object
from ...version import __version__
from .kernel_cache import (compiler_fingerprint, default_directory, note, offer, offered, seal, unseal,
                           write_atomically)


@dataclass(frozen=True)
class NativeKernel:
    key: str
    code: LoadedObject

    def entry(self) -> bytes:
        return seal(self.key, self.code.data)


_loaded: dict[tuple[str, str, str], tuple[NativeKernel, int, object]] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class NativeJob:
    """A generated kernel as data (picklable: a compile worker builds it too): the generator, a function
    `module:function` of `snipjit.targets.llvm` taking `shape` (a frozen dataclass whose `name` is the
    kernel's), for the CPU and features `jit.host()` gave when it was chosen."""
    generator: str
    shape: object
    cpu: str
    features: str

    @property
    def name(self) -> str:
        return self.shape.name

    @property
    def key(self) -> str:
        return _key(self.name, self.cpu, self.features)

    def module(self):
        module, function = self.generator.split(":")
        return getattr(importlib.import_module(f"snipjit.targets.llvm.{module}"), function)(self.shape)

    def kernel(self) -> tuple[int, object]:
        """(address, ctypes callable) of the kernel, as `native_kernel` gives it."""
        return native_kernel(self.module, self.name, self.cpu, self.features)

    def held(self) -> bool:
        """Whether this process has the kernel loaded or a cache holds it (nothing to compile)."""
        if (self.name, self.cpu, self.features) in _loaded or offered(self.key) is not None:
            return True
        path = _path(self.key)
        return path is not None and path.exists()

    def entry(self) -> bytes:
        """The kernel compiled, as a sealed cache entry (what a compile worker sends back); RuntimeError when
        this process compiles for another CPU or features than the job was chosen for."""
        host = jit.host()
        if (host.cpu, host.features) != (self.cpu, self.features):
            raise RuntimeError(f"kernel {self.name} was chosen for {self.cpu} {self.features}, this process "
                               f"compiles for {host.cpu} {host.features}")
        return seal(self.key, compile_to_object(str(self.module()))[0])


def accept_entry(key: str, entry: bytes) -> bool:
    """A kernel compiled elsewhere (`NativeJob.entry`), offered to this process's loads and written to the
    disk cache; False, and nothing kept, when the entry is not whole or not the kernel of `key`."""
    if _unsealed(entry, key) is None:
        return False
    offer({key: entry})
    path = _path(key)
    if path is not None:
        write_atomically(path, entry)
    return True


def native_kernel(module: Callable[[], object], name: str, cpu: str, features: str) -> tuple[int, object]:
    """(address, ctypes callable keeping the code alive) of kernel `name`, defined by `module()` (an
    llvmlite module or its text, built only when no cache has the kernel; `name` must determine it) and
    chosen for the CPU and features `jit.host()` gave then: refused when SNIPJIT_ISA has since selected
    another ISA level (its code would not fit the chosen shape). Loaded once per process; noted in the
    recording program's kernels on every call."""
    found = _native(module, name, cpu, features)
    return found[1], found[2]


def native_module(module: Callable[[], object], name: str) -> LoadedObject:
    """The loaded code of `module()` (several functions, as `native_kernel`; `name` determines it) for the
    CPU `jit.host()` gives now."""
    host = jit.host()
    return _native(module, name, host.cpu, host.features)[0].code


def loaded_entry(name: str) -> tuple[str, bytes] | None:
    """(key, sealed entry) of the code loaded as `name` for this CPU, if it was."""
    host = jit.host()
    found = _loaded.get((name, host.cpu, host.features))
    return None if found is None else (found[0].key, found[0].entry())


def _native(module: Callable[[], object], name: str, cpu: str, features: str) -> tuple[NativeKernel, int, object]:
    host = jit.host()
    if (host.cpu, host.features) != (cpu, features):
        raise RuntimeError(f"kernel {name} was chosen for another ISA level than SNIPJIT_ISA now selects "
                           f"({host.level.name})")
    found = _loaded.get((name, cpu, features))
    if found is None:
        with _lock:
            found = _loaded.get((name, cpu, features))
            if found is None:
                found = _loaded[name, cpu, features] = _load(module, name, cpu, features)
    note(found[0].key, found[0].entry)
    return found


def _key(name: str, cpu: str, features: str) -> str:
    return hashlib.sha256("\n--\n".join([name, cpu, features, __version__, compiler_fingerprint()]).encode()
                          ).hexdigest()


def _path(key: str) -> Path | None:
    """Where the disk cache keeps the kernel of `key` (None: the disk cache is off)."""
    directory = default_directory()
    return None if directory is None else directory / f"{key}.o"


def _load(module: Callable[[], object], name: str, cpu: str, features: str) -> tuple[NativeKernel, int, object]:
    key = _key(name, cpu, features)
    path = _path(key)
    data = _unsealed(offered(key), key) or _read(path, key)
    if data is None:
        data, _ = compile_to_object(str(module()))
        if path is not None:
            write_atomically(path, seal(key, data))
    loaded = load_object(data)
    address = loaded.engine.get_function_address(name)   # (0 for a module of several functions)
    return NativeKernel(key, loaded), address, loaded.cfunc(name, None, *KernelFunction.ARGTYPES) if address else None


def _unsealed(entry: bytes | None, key: str) -> bytes | None:
    sealed = None if entry is None else unseal(entry, key)
    return None if sealed is None else sealed[1]


def _read(path: Path | None, key: str) -> bytes | None:
    """The object code of the entry at `path`, when it is whole and the entry of `key`."""
    try:
        return None if path is None or not path.exists() else _unsealed(path.read_bytes(), key)
    except OSError:
        return None
