"""The machine a run was measured on (CPU, vector extensions, cores, date, versions of the engines),
recorded with the results so that numbers from different machines are not compared unknowingly."""

from __future__ import annotations

import os
import platform
import time
from typing import Any

from snipjit.benchmark import machine_description, versions

PACKAGES = ("snipjit", "numpy", "onnx", "onnxruntime", "openvino", "torch", "transformers", "numexpr")


def machine_info() -> dict[str, Any]:
    """`snipjit bench`'s description of the CPU (model, vector extensions, ISA level, usable cores) with
    the date, the platform and the versions of the installed engines."""
    described = machine_description()
    installed = {k: v for k, v in versions(PACKAGES).items() if k != "python" and v is not None}
    return {
        "cpu": described["cpu"],
        "cores": os.cpu_count(),
        "usable_cores": described["usable_cores"],
        "cpu_flags": described["cpu_flags"],
        "isa": described["isa"],
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": installed,
    }
