"""Op tests. pytest puts this directory on `sys.path` (it holds this conftest), so the test modules share
the `op_cases` helpers."""
