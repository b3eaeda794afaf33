"""The system C compiler behind the C target: find it, compile kernel source to a shared object, load one.

Kernels are compiled for the CPU this process runs on with explicit flags, never -ffast-math (linking
a -ffast-math object makes the process flush denormals to zero):

    -O3 -march=native -fPIC -shared -fno-math-errno -ffp-contract=off -Wno-psabi -std=gnu11 -pipe

-fno-math-errno lets lane loops over sqrtf/fmaf become vector instructions; -ffp-contract=off keeps
a*b+c unfused except where the math library asks for an FMA (vm_fma), exactly where the LLVM target
emits llvm.fmuladd, so both targets compute the same bits (several algorithms need exact products);
-Wno-psabi silences GCC's note about passing 64-byte vectors. The source goes in on stdin. When
`SNIPJIT_ISA` forces a lower level (`targets.isa`), -march=native becomes that level's generic CPU
(-march=x86-64-v3 for avx2) tuned for the host.

A compiled kernel is the bytes of its .so, so the kernel cache can store it like LLVM object code.
Loading writes the bytes to a file in a per-process directory under a name never used before in this
process (dlopen returns an already-loaded library for a name it has seen), dlopens it and removes the
file. ctypes never unloads a library, so a kernel's code stays mapped for the life of the process.
"""
from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import itertools
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ...snippets.target_machine import TargetError

INCLUDE_DIR = Path(__file__).resolve().parent
FLAGS = ("-O3", "-fPIC", "-shared", "-fno-math-errno", "-ffp-contract=off", "-Wno-psabi",
         "-std=gnu11", "-pipe")
COMPILERS = ("gcc", "cc")


class CompileError(RuntimeError):
    """The C compiler rejected a generated kernel (a bug in the C target, not in the model)."""


def find_compiler() -> str:
    """The path of the first of gcc, cc on PATH."""
    for name in COMPILERS:
        path = shutil.which(name)
        if path:
            return path
    raise TargetError(f"target 'c' needs a C compiler, but none of {', '.join(COMPILERS)} is on PATH; "
                      "install gcc or choose target='llvm'")


@dataclass(frozen=True)
class CCompiler:
    path: str
    arch: tuple[str, ...] = ("-march=native",)   # the instruction sets kernels are compiled for

    @staticmethod
    def find() -> "CCompiler":
        from ..isa import current, gcc_arch_flags
        return CCompiler(find_compiler(), gcc_arch_flags(current()))

    @property
    def flags(self) -> tuple[str, ...]:
        return FLAGS[:1] + self.arch + FLAGS[1:]

    def _run(self, args: list[str], stdin: str = "") -> str:
        proc = subprocess.run([self.path, *args], input=stdin, capture_output=True, text=True)
        if proc.returncode:
            raise CompileError(f"{self.path} {' '.join(args)} failed:\n{proc.stderr.strip()}")
        return proc.stdout

    @functools.cached_property
    def version(self) -> str:
        return self._run(["--version"]).splitlines()[0]

    @functools.cached_property
    def native_macros(self) -> frozenset[str]:
        """The macros the architecture flags predefine: the instruction sets kernels may use."""
        out = self._run([*self.arch, "-dM", "-E", "-x", "c", "-"], "")
        return frozenset(line.split()[1] for line in out.splitlines() if line.startswith("#define "))

    @property
    def identity(self) -> str:
        """What makes this compiler's code differ: its version, the host's ISA, flags and vmath.h."""
        digest = hashlib.sha256()
        for part in (self.path, self.version, " ".join(self.flags), *sorted(self.native_macros)):
            digest.update(part.encode() + b"\0")
        digest.update((INCLUDE_DIR / "vmath.h").read_bytes())
        return digest.hexdigest()[:32]

    def compile(self, source: str) -> bytes:
        """The shared object of a C source, as bytes."""
        with tempfile.TemporaryDirectory(prefix="snipjit-cc-") as tmp:
            out = Path(tmp) / "kernel.so"
            self._run([*self.flags, f"-I{INCLUDE_DIR}", "-x", "c", "-", "-o", str(out)], source)
            return out.read_bytes()

    def assembly(self, source: str) -> str:
        """The assembly gcc produces for a source (for debugging)."""
        flags = [f for f in self.flags if f not in ("-shared",)]
        return self._run([*flags, f"-I{INCLUDE_DIR}", "-S", "-x", "c", "-", "-o", "-"], source)


@dataclass(eq=False)
class SharedObject:
    """A loaded kernel library and the bytes it was loaded from (what the kernel cache stores)."""
    library: ctypes.CDLL = field(repr=False)
    data: bytes = field(repr=False)

    def function(self, name: str, restype, *argtypes):
        try:
            fn = getattr(self.library, name)
        except AttributeError:
            raise CompileError(f"the compiled kernel defines no function {name!r}") from None
        fn.restype, fn.argtypes = restype, list(argtypes)
        fn.keepalive = self
        return fn


_load_lock = threading.Lock()
_load_names = itertools.count()
_load_dirs: dict[int, Path] = {}   # per process id: a forked child must not share its parent's names


def _directory() -> Path:
    pid = os.getpid()
    if pid not in _load_dirs:
        _load_dirs[pid] = Path(tempfile.mkdtemp(prefix="snipjit-so-"))
        atexit.register(_remove_directory, pid)
    return _load_dirs[pid]


def _remove_directory(pid: int) -> None:
    if os.getpid() == pid:
        shutil.rmtree(_load_dirs[pid], ignore_errors=True)


def load_shared_object(data: bytes) -> SharedObject:
    with _load_lock:
        path = _directory() / f"k{next(_load_names)}.so"
    path.write_bytes(data)
    try:
        library = ctypes.CDLL(str(path), mode=os.RTLD_LOCAL)
    except OSError as exc:
        raise CompileError(f"cannot load a compiled kernel: {exc}") from None
    finally:
        path.unlink(missing_ok=True)
    return SharedObject(library, data)
