"""Compiling Subgraph bodies into Snippets kernels through the kernel cache, and launching a kernel over
its parallel domain: what the `snippet` implementation and the attention blocks on Brgemms share."""
from __future__ import annotations

import ctypes
import threading
import weakref
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...ir.graph import Graph, TensorType
from ...ops.infer_shapes import infer_shapes
from ...ops.registry import OpError

from ...snippets.lowered.linear_ir import LinearIRError
from ...snippets.subgraph_compiler import CompiledSnippet, compile_subgraph
from ...snippets.target_machine import TargetError, TargetMachine
from ..caches.kernel_cache import cache_key, get_kernel_cache
from ..parallel.native_threads import get_native_pool, scratchpads
from ..parallel.python_threads import get_pool
from .base import NotApplicable
from .snippet_dumps import PassDumper, dump_dir


def launch_parallel(fn, ptrs, dims, domain: int, scratch_bytes: int, scratchpad) -> None:
    """Run kernel `fn` over its parallel domain on the native pool, or the Python pool where there is
    none (`scratchpad(n)` gives the calling thread's scratchpad there)."""
    native = get_native_pool()
    if native is None:
        get_pool().parallel_for(lambda lo, hi: fn(ptrs, dims, lo, hi, scratchpad(scratch_bytes)), domain)
        return
    scratch = scratchpads(native.threads, scratch_bytes)
    native.run(ctypes.cast(fn, ctypes.c_void_p).value, ctypes.addressof(ptrs), ctypes.addressof(dims), domain,
               0, scratch.base, scratch.stride)


@dataclass(frozen=True)
class KernelSpec:
    """How a body compiles through the kernel cache: the target, the cache key (which names the kernel)
    and the loop depth. Compile workers (`planning.compile_workers`) rebuild it from the same options."""
    target: TargetMachine
    key: str
    loop_depth: int

    @property
    def name(self) -> str:
        return "kernel_" + self.key[:16]

    def compile(self, body, **debug) -> CompiledSnippet:
        return compile_subgraph(body, self.target, name=self.name, loop_depth=self.loop_depth, **debug)


_SPECS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # body -> {(target, depth): spec}


def kernel_spec(body, options: dict) -> KernelSpec:
    """The body's spec, remembered per body object: the compile pool and the program build both ask,
    and the key hashes the body's whole text (bodies are not changed once they are a node's)."""
    from ...targets import get_target
    target = get_target(options.get("target"))
    loop_depth = options.get("loop_depth", 1)
    known = _SPECS.setdefault(body, {})
    spec = known.get((target.cache_key(), loop_depth))
    if spec is None:
        spec = known[(target.cache_key(), loop_depth)] = KernelSpec(
            target, cache_key(body, target, {"loop_depth": loop_depth, **_pitched(body)}), loop_depth)
    return spec


def _pitched(body) -> dict:
    """The inputs that take a row pitch (`MarkPitchedInputs`): not in the body's text, part of its kernel."""
    pitched = body.meta.get("pitched")
    return {"pitched": list(pitched)} if pitched else {}


def bypasses_cache(options: dict) -> bool:
    """Debugging options (dumps, checked mode, extra passes) compile for real, past the kernel cache."""
    return (dump_dir(options) is not None or bool(options.get("checked"))
            or any(options.get(k) for k in ("data_flow_passes", "control_flow_passes")))


def compile_body(body, options: dict) -> CompiledSnippet:
    """Compile a body through the kernel cache (or, when debugging, past it)."""
    spec = kernel_spec(body, options)
    checked = bool(options.get("checked"))
    if checked and not spec.target.supports_checked:
        raise TargetError(f"checked mode needs the llvm target; target {spec.target.name!r} cannot check accesses")
    try:
        if bypasses_cache(options):
            folder = dump_dir(options)
            dumper = PassDumper(folder / f"{body.name}_{spec.name}") if folder is not None else None
            compiled = spec.compile(body, observer=dumper, checked=checked,
                                    data_flow_passes=options.get("data_flow_passes", ()),
                                    control_flow_passes=options.get("control_flow_passes", ()))
            if dumper is not None:
                dumper.kernel(compiled.kernel, spec.target.name)
            return compiled
        return get_kernel_cache().get_or_compile(spec.key, spec.target, lambda: spec.compile(body))
    except (LinearIRError, TargetError) as e:
        raise NotApplicable(str(e)) from e


def compile_retyped(body: Graph, input_types: Sequence[TensorType],
                    options: dict) -> tuple[CompiledSnippet, Graph] | None:
    """A copy of `body` whose inputs take these types (the rest inferred again), compiled; with the copy (its
    output types), or None when the body or its kernel cannot take them."""
    body = body.copy()
    for v, t in zip(body.inputs, input_types):
        v.type = t
    for v in body.values():
        if v.producer is not None:
            v.type = None
    try:
        infer_shapes(body)
        return compile_body(body, options), body
    except (OpError, ValueError, NotApplicable):
        return None


class ThreadScratchpads:
    """Each calling thread's scratchpad: `pads(nbytes)` is its address, grown to `nbytes` when needed."""

    def __init__(self):
        self._local = threading.local()

    def __call__(self, nbytes: int) -> int | None:
        if not nbytes:
            return None
        pad = getattr(self._local, "pad", None)
        if pad is None or pad.nbytes < nbytes:
            pad = self._local.pad = np.empty(nbytes + 64, np.uint8)
        return pad.ctypes.data
