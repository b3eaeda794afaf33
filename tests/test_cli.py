"""The snipjit command: demo, run, explain, bench, and clear errors."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from snipjit.cli import main

BERT = str(Path(__file__).parent / "data" / "tiny_bert.onnx")


def test_demo_runs_and_checks_itself(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "fused kernel" in out and "matches the reference" in out


def test_no_arguments_is_the_demo(capsys):
    assert main([]) == 0
    assert "matches the reference" in capsys.readouterr().out


def test_run_with_random_inputs_and_named_dims(capsys):
    assert main(["run", BERT, "--random-inputs", "--dim", "batch=2", "--dim", "sequence=9", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "last_hidden_state: float32[2, 9, 32]" in out and "median" in out


def test_run_with_input_files(tmp_path, capsys):
    ids = tmp_path / "ids.npy"
    np.save(ids, np.ones((1, 5), np.int64))
    mask = tmp_path / "mask.npy"
    np.save(mask, np.ones((1, 5), np.int64))
    assert main(["run", BERT, "--input", f"input_ids={ids}", "--input", f"attention_mask={mask}",
                 "--repeat", "1"]) == 0
    assert "pooler_output: float32[1, 32]" in capsys.readouterr().out


def test_missing_inputs_are_named(capsys):
    try:
        main(["run", BERT])
    except SystemExit as e:
        assert "input_ids" in str(e) and "--random-inputs" in str(e)
    else:
        raise AssertionError("expected an error")


def test_explain_prints_passes_plan_and_memory(capsys):
    assert main(["explain", BERT, "--plan-only"]) == 0
    out = capsys.readouterr().out
    assert "== plan:" in out and "snippet" in out and "== memory ==" in out


def test_unreadable_model_is_an_error_not_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    assert main(["run", str(bad), "--random-inputs"]) == 2
    assert "snipjit: error:" in capsys.readouterr().err


def _rows(table: str) -> dict[str, list[str]]:
    """The table's rows by engine: [median ms, x snipjit, max|err|, note...]."""
    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("engine "))
    return {line.split()[0]: line.split()[1:] for line in lines[start + 1:]}


def test_bench_times_snipjit_and_reports_every_peer(capsys):
    assert main(["bench", BERT, "--rounds", "2", "--dim", "batch=2"]) == 0
    out = capsys.readouterr().out
    assert "dynamic dimensions set to 1: sequence" in out
    assert "input_ids int64[2x1], attention_mask int64[2x1]" in out
    rows = _rows(out)
    assert set(rows) == {"snipjit", "onnxruntime", "openvino"}
    assert float(rows["snipjit"][0]) > 0 and rows["snipjit"][1] == "1.00" and "plan:" in rows["snipjit"]
    for peer in ("onnxruntime", "openvino"):
        if importlib.util.find_spec(peer) is None:
            assert rows[peer][:4] == ["-", "-", "-", "skipped:"]
        else:
            assert float(rows[peer][0]) > 0 and float(rows[peer][1]) > 0
    if importlib.util.find_spec("onnxruntime") is not None:  # the errors are against its outputs
        assert float(rows["snipjit"][2]) < 1e-4


def test_bench_names_unknown_engines(capsys):
    assert main(["bench", BERT, "--engines", "snipjit,tensorflow"]) == 2
    assert "unknown engines ['tensorflow']" in capsys.readouterr().err


def test_bench_of_an_unreadable_model_is_an_error(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    assert main(["bench", str(bad)]) == 2
    assert "snipjit: error:" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="needs onnxruntime for the reference")
def test_bench_checks_outputs_against_onnxruntime_even_when_it_is_not_timed(capsys):
    assert main(["bench", BERT, "--engines", "snipjit", "--rounds", "1"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert list(rows) == ["snipjit"] and float(rows["snipjit"][2]) < 1e-4
