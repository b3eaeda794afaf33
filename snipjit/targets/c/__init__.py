"""The C target: kernels as C source (GCC vector extensions) compiled by the system C compiler and loaded
with ctypes. Select it with `snipjit.compile(model, target="c")` or SNIPJIT_JIT=c; it is the debugging
twin of the LLVM target (readable kernels, the same semantics)."""
