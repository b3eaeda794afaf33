"""Target tests. pytest puts this directory on `sys.path` (it holds this conftest), so the LLVM and C
target tests share the `accuracy` module."""
