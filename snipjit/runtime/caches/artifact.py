"""A compiled model as one file to ship (`CompiledModel.save`, `snipjit.load`, `pickle.dumps(cm)`).

It holds the graph as the passes left it (weights once, in the graph), the pass history, the compile and
execution options, and the machine code of every kernel the program used — snippet kernels and the GEMM,
convolution, window and copy microkernels — as the caches' sealed entries, with the CPU name, features
and ISA level they were built for and the snipjit version and compiler that built them. Loading on a
matching CPU offers those entries to the caches, so building the program compiles nothing; any other
CPU, ISA level or snipjit gets a warning and its own kernels, compiled from the stored graph (the cache
keys hash the target and the compiler, so no entry built for another ISA can ever be picked up). The file
is a `pickle_file`: checksummed, weights mapped, and like any pickle only to be loaded when trusted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...ir.graph import Graph, held_placeholder
from ...targets.llvm import jit
from ...version import __version__
from . import pickle_file
from .kernel_cache import compiler_fingerprint

MAGIC = b"SNIPJITA1\n"


class ArtifactError(ValueError):
    """The file is not a saved snipjit model, or it is damaged or truncated."""


@dataclass
class Machine:
    """What a kernel's code needs of the CPU and of the compiler that made it."""
    cpu: str
    features: str
    level: str
    version: str
    compiler: str

    @staticmethod
    def here() -> "Machine":
        host = jit.host()
        return Machine(host.cpu, host.features, host.level.name, __version__, compiler_fingerprint())

    def differences(self, other: "Machine") -> list[str]:
        found = []
        if (self.cpu, self.features) != (other.cpu, other.features):
            found.append(f"built for {self.cpu} ({self.level}), this CPU is {other.cpu} ({other.level})")
        if self.version != other.version:
            found.append(f"built by snipjit {self.version}, this is {other.version}")
        elif self.compiler != other.compiler:
            found.append("built by another snipjit compiler source at the same version")
        return found


@dataclass
class Artifact:
    graph: Graph                       # without the held constants' data (None)
    history: list                      # the compiler's pass records
    options: dict                      # compile options
    execution: dict                    # the execution settings asked for (num_threads, streams, hint)
    machine: Machine
    kernels: dict[str, bytes] = field(default_factory=dict)   # cache key -> sealed entry
    held: dict[str, Any] = field(default_factory=dict)        # constant name -> its packed form, a
    #                                                           `held_weights.HeldWeight`

    @staticmethod
    def of(graph: Graph, held: dict[str, list[Any]], **fields) -> "Artifact":
        """The artifact of a compiled graph whose constants named in `held` live only in the forms its
        kernels hold: a constant held in one form is stored in it; one that steps hold in different
        forms is stored as the graph's array again (its kernels pack it when loaded)."""
        graph = graph.copy()
        single = {name: forms[0] for name, forms in held.items() if all(f is forms[0] for f in forms)}
        for v in graph.constants:
            if v.name in single:
                v.data = None
            elif v.name in held:
                v.data = held[v.name][0].original()
        return Artifact(graph, held=single, **fields)

    def graph_to_build(self, packed: bool) -> Graph:
        """The graph for a build: with memory-free placeholders for the held constants when the kernels
        take the packed forms (`packed`), else with the arrays rebuilt from them."""
        graph = self.graph.copy()
        for v in graph.values():
            if v.name in self.held and v.data is None and v.producer is None:
                v.data = held_placeholder(np.broadcast_to(np.zeros((), v.type.dtype.np), v.type.shape)) \
                    if packed else self.held[v.name].original()
        return graph

    def save(self, path: str | Path) -> None:
        pickle_file.write(Path(path), self, MAGIC)

    def to_bytes(self) -> bytes:
        return pickle_file.dumps(self, MAGIC)

    @staticmethod
    def load(source: str | Path | bytes) -> "Artifact":
        try:
            if isinstance(source, (bytes, bytearray, memoryview)):
                _, artifact = pickle_file.loads(source, MAGIC, "the pickled compiled model")
            else:
                _, artifact = pickle_file.read(Path(source), MAGIC)
        except pickle_file.PickleFileError as e:
            raise ArtifactError(f"cannot load a compiled model: {e}") from None
        except (OSError, EOFError, AttributeError, ImportError, TypeError) as e:
            if isinstance(e, FileNotFoundError):
                raise
            raise ArtifactError(f"cannot load a compiled model from {_name(source)}: {type(e).__name__}: {e}") from None
        if not isinstance(artifact, Artifact):
            raise ArtifactError(f"{_name(source)} holds a {type(artifact).__name__}, not a compiled model")
        return artifact


def _name(source: Any) -> str:
    return "the pickled compiled model" if isinstance(source, (bytes, bytearray, memoryview)) else str(source)
