"""Snippets compiler tests. pytest puts this directory on `sys.path` (it holds this conftest), so test
modules in the subdirectories import the shared `lir_helpers` module."""
