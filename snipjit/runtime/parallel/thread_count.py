"""How many threads snipjit's pools start: SNIPJIT_NUM_THREADS, else the cores this process may run on."""
from __future__ import annotations

import os


def default_threads() -> int:
    env = os.environ.get("SNIPJIT_NUM_THREADS")
    return max(1, int(env)) if env else max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                            else os.cpu_count() or 1)
