"""The machine a run was measured on (CPU, vector extensions, cores, date, versions of the engines),
recorded with the results so that numbers from different machines are not compared unknowingly."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import time
from pathlib import Path
from typing import Any

PACKAGES = ("snipjit", "numpy", "onnx", "onnxruntime", "openvino", "torch", "transformers", "numexpr")
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16")


def machine_info() -> dict[str, Any]:
    cpu, flags = platform.processor(), []
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and cpu in ("", platform.machine()):
                cpu = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = [f for f in CPU_FLAGS if f in value.split()]
    versions = {}
    for package in PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[package] = importlib.metadata.version(package)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cpu_flags": flags,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
    }
