"""`python -m bench.gemm` runs its engines on a shape and reports snipjit against each peer; under a
forced ISA level the OpenVINO peer is named by that level and its oneDNN is capped to it.

Each run is a process of its own: a capped oneDNN stays capped for the life of the process that loaded it,
and would change what OpenVINO does in the tests after it."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from snipjit.targets import isa

ROOT = Path(__file__).resolve().parents[2]


def run(level: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("SNIPJIT_ISA", "ONEDNN_MAX_CPU_ISA")}
    if level is not None:
        env["SNIPJIT_ISA"] = level
    done = subprocess.run([sys.executable, "-m", "bench.gemm", "--rounds", "1", "--round-seconds", "0.01",
                           "--shapes", "24x40x56"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_reports_every_installed_peer():
    out = run()
    assert "24x40x56" in out and "FMA peak" in out
    if importlib.util.find_spec("onnxruntime") is not None:
        assert "geometric mean vs ORT" in out
    if importlib.util.find_spec("openvino") is not None:
        assert "geometric mean vs OpenVINO" in out


def test_a_forced_level_caps_openvinos_onednn_to_it():
    if isa.select_for_host(None).level.name != "avx512":
        pytest.skip("needs a host above AVX2 to force it")
    out = run("avx2")
    assert "ISA level: avx2 (forced)" in out
    if importlib.util.find_spec("openvino") is not None:
        assert "OV@avx2" in out
