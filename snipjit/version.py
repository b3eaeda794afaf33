"""snipjit's version: part of every cache key, and the package metadata's (pyproject reads it here)."""
__version__ = "0.1.0"
