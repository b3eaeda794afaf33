"""The benchmark suite uses snipjit as a user would: its public API and `snipjit.benchmark` (the engines
`snipjit bench` shares with the suite), so the package's internals can move without breaking it.
Scripts that measure one compiler stage on its own reach into that stage, and are named here with why."""
import ast
from pathlib import Path

import snipjit

BENCH = Path(__file__).resolve().parents[2] / "bench"
PUBLIC_MODULES = {"snipjit", "snipjit.benchmark"}
STAGE_SCRIPTS = {
    "c_vs_llvm.py": "times one subgraph's kernel from each code generator",
    "vmath_throughput.py": "times the vector-math routines of the LLVM target",
    "gemm.py": "times the matrix-multiply kernels",
    "window.py": "times the channels-last depthwise-convolution and pooling kernels",
    "conv.py": "times the channels-last convolution kernels (f32 and int8) layer by layer",
    "runtime_acceptance.py": "counts the kernel cache's hits and misses, and times model loading alone",
    "attention_blocks.py": "times the Brgemm attention kernel with and without SplitDimensionM's row blocks",
}


def _snipjit_imports(path: Path) -> list[str]:
    """Every snipjit module or name imported anywhere in the file, lazily too, as "module" or "module:name"."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "snipjit"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "snipjit":
            found += [f"{node.module}:{a.name}" for a in node.names]
    return found


def test_the_suite_imports_only_public_snipjit():
    public_names = set(snipjit.__all__) | {"benchmark"}
    wrong = {}
    for path in sorted(BENCH.glob("*.py")):
        if path.name in STAGE_SCRIPTS:
            continue
        for imported in _snipjit_imports(path):
            module, _, name = imported.partition(":")
            if module not in PUBLIC_MODULES or (module == "snipjit" and name and name not in public_names):
                wrong.setdefault(path.name, []).append(imported)
    assert not wrong, f"bench/ modules importing snipjit internals: {wrong}"


def test_the_scan_sees_lazy_and_dotted_imports(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("import snipjit.runtime.kernel_cache\n"
                      "def f():\n    from snipjit.compiler import load_graph\n    from bench import models\n")
    assert _snipjit_imports(script) == ["snipjit.runtime.kernel_cache", "snipjit.compiler:load_graph"]
