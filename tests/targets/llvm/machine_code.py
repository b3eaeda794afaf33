"""Reading generated machine code in tests: the CPUs whose code LLVM compiles on any host, and the
innermost loops of a function's assembly."""
import re

from snipjit.targets import isa

CPUS = [("haswell", isa.AVX2), ("znver3", isa.AVX2), ("skylake-avx512", isa.AVX512), ("znver4", isa.AVX512)]


def innermost_loops(asm: str) -> list[list[str]]:
    """The instructions of each innermost loop: from a label to the backward jump to it, with no other
    such loop inside."""
    lines = asm.splitlines()
    labels = {line[:-1]: i for i, line in enumerate(lines) if re.fullmatch(r"\.LBB\S+:", line)}
    loops = []
    for end, line in enumerate(lines):
        jump = re.match(r"\s+j\w+\s+(\.LBB\S+)", line)
        if jump and labels.get(jump.group(1), end) < end:
            loops.append((labels[jump.group(1)], end))
    inner = [r for r in loops if not any(o != r and r[0] <= o[0] and o[1] <= r[1] for o in loops)]
    return [lines[start:end + 1] for start, end in inner]


def hot_loop(asm: str) -> list[str]:
    return max(innermost_loops(asm), key=lambda body: sum("vfmadd" in line for line in body))
