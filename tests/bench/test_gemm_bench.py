"""`python -m bench.gemm` runs its engines on a shape and reports snipjit against each peer; under a
forced ISA level the OpenVINO peer is named by that level and its oneDNN is capped to it."""
import importlib.util
import os

import pytest

from bench import gemm


def run(capsys, *argv):
    assert gemm.main(["--rounds", "1", "--round-seconds", "0.01", *argv]) == 0
    return capsys.readouterr().out


def test_reports_every_installed_peer(capsys, monkeypatch):
    monkeypatch.setenv("SNIPJIT_NUM_THREADS", os.environ.get("SNIPJIT_NUM_THREADS", ""))
    out = run(capsys, "--shapes", "24x40x56")
    assert "24x40x56" in out and "geometric mean vs ORT" in out
    if importlib.util.find_spec("openvino") is not None:
        assert "geometric mean vs OpenVINO" in out


def test_a_forced_level_caps_openvinos_onednn_to_it(capsys, monkeypatch):
    from snipjit.targets import isa
    if isa.current().level.name != "avx512":
        pytest.skip("needs a host above AVX2 to force it")
    monkeypatch.setenv("SNIPJIT_NUM_THREADS", os.environ.get("SNIPJIT_NUM_THREADS", ""))
    monkeypatch.setenv("SNIPJIT_ISA", "avx2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "")   # (restored after the test: main sets it)
    out = run(capsys, "--shapes", "24x40x56")
    assert "ISA level: avx2 (forced)" in out and os.environ["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    if importlib.util.find_spec("openvino") is not None:
        assert "OV@avx2" in out
