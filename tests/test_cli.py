"""The snipjit command: demo, run, explain, bench, and clear errors."""
import importlib.util
import json
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
    """The table's rows by engine: [mode, streams, threads, p50 ... max ms, inf/s, samples/s, x snipjit,
    max|err|, note...]."""
    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("engine "))
    end = lines.index("", start)
    return {line.split()[0]: line.split()[1:] for line in lines[start + 1:end]}


PEERS = ("onnxruntime", "openvino")


def _check_result(result: dict, mode: str, streams: int, batch: int) -> None:
    """An engine's figures in the JSON: ordered percentiles and positive throughput; peers that are not
    installed are skipped."""
    if result["engine"] in PEERS and importlib.util.find_spec(result["engine"]) is None:
        assert result["status"] == "skipped" and result["latency_ms"] is None
        return
    assert result["status"] == "ok", result["note"]
    ms = result["latency_ms"]
    assert 0 < ms["min"] <= ms["p50"] <= ms["p90"] <= ms["p99"] <= ms["max"]
    assert ms["min"] <= ms["mean"] <= ms["max"]
    assert result["inferences"] >= streams and result["measured_s"] > 0 and result["inferences_per_s"] > 0
    assert result["samples_per_s"] == pytest.approx(batch * result["inferences_per_s"])
    assert result["vs_snipjit"] > 0 and result["first_inference_ms"] > 0 and result["version"]
    if importlib.util.find_spec("onnxruntime") is not None:  # the errors are against its outputs
        assert result["max_abs_err"] < 1e-4


def test_bench_in_latency_mode_reports_every_engine_and_writes_json(tmp_path, capsys):
    path = tmp_path / "bench.json"
    assert main(["bench", BERT, "--time", "0.3", "--dim", "batch=2", "--threads", "2", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "dynamic dimensions set to 1: sequence" in out
    assert "input_ids int64[2x1], attention_mask int64[2x1]; latency mode, streams 1, threads 2, batch 2" in out
    rows = _rows(out)
    assert set(rows) == {"snipjit", *PEERS} and rows["snipjit"][:3] == ["latency", "1", "2"]
    assert rows["snipjit"][10] == "1.00" and "plan:" in rows["snipjit"]
    assert "snipjit startup: cold compile " in out and "opened in" in out
    data = json.loads(path.read_text())
    assert data["settings"] | {"mode": "latency", "streams": 1, "threads": 2, "seconds": 0.3, "batch": 2} == \
        data["settings"]
    assert data["settings"]["inputs"]["input_ids"] == {"dtype": "int64", "shape": [2, 1]}
    assert data["machine"]["cpu"] and data["machine"]["isa"] and data["versions"]["snipjit"]
    for kind in ("cold", "warm"):
        assert data["snipjit_startup"][kind]["compile_s"] > 0 and data["snipjit_startup"][kind]["first_inference_s"] > 0
    assert [r["engine"] for r in data["results"]] == ["snipjit", *PEERS]
    for result in data["results"]:
        _check_result(result, "latency", 1, 2)


def test_bench_in_throughput_mode_with_a_batch_prints_json_on_stdout(capsys):
    assert main(["bench", BERT, "--mode", "throughput", "--streams", "2", "--threads", "2", "--batch", "3",
                 "--dim", "sequence=5", "--time", "0.3", "--json", "-", "--no-startup"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)   # the table went to stderr
    assert "throughput mode, streams 2, threads 2, batch 3" in captured.err
    assert _rows(captured.err)["snipjit"][:3] == ["throughput", "2", "2"]
    assert data["settings"]["inputs"]["attention_mask"]["shape"] == [3, 5] and data["snipjit_startup"] is None
    assert data["settings"] | {"mode": "throughput", "streams": 2, "batch": 3} == data["settings"]
    for result in data["results"]:
        _check_result(result, "throughput", 2, 3)


@pytest.mark.parametrize("options, message", [
    (["--mode", "fastest"], "unknown mode 'fastest'; choose latency or throughput"),
    (["--mode", "throughput", "--streams", "0"], "streams must be at least 1, got 0"),
    (["--streams", "2"], "latency mode runs one stream"),
    (["--time", "0"], "the measured time must be positive"),
    (["--batch", "2", "--dim", "batch=3"], "--batch 2 contradicts --dim batch=3"),
])
def test_bench_refuses_bad_settings(options, message, capsys):
    assert main(["bench", BERT, *options]) == 2
    assert f"snipjit: error: {message}" in capsys.readouterr().err


def test_bench_refuses_a_batch_the_model_fixes_otherwise(tmp_path, capsys):
    from onnx import TensorProto, helper, save
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "fixed",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    model = tmp_path / "fixed.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    assert main(["bench", str(model), "--batch", "4"]) == 2
    assert "snipjit: error: --batch 4: input 'x' has a fixed batch size of 1 (f32[1,8])" in capsys.readouterr().err


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
    assert main(["bench", BERT, "--engines", "snipjit", "--time", "0.05", "--rounds", "1",
                 "--no-startup"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert list(rows) == ["snipjit"] and float(rows["snipjit"][11]) < 1e-4
