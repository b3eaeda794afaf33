"""The suite's engines, each in its own worker process, on the softmax workload: every engine that can run
it agrees with float64 NumPy, an engine that breaks or is missing is reported while the others are timed,
and the records (JSON summary, table) show them all."""
import importlib.util
import json
import shutil

import numpy as np
import pytest

pytest.importorskip("bench.engines", reason="run from the repository root")
from bench import engines, runner, workloads  # noqa: E402
from bench.table import format_table  # noqa: E402
from bench.timing import Settings, measure  # noqa: E402
from bench.worker import Engine  # noqa: E402

PEERS = ("onnxruntime", "openvino")
pytestmark = pytest.mark.skipif(any(importlib.util.find_spec(p) is None for p in PEERS),
                                reason="needs onnxruntime and openvino: pip install -e .[bench]")
QUICK = Settings(rounds=2, threads=2, round_s=0.01, warmup_s=0.0)
HAS_GCC = bool(shutil.which("gcc") or shutil.which("gcc-12"))


def test_every_engine_runs_the_softmax_workload_and_agrees_with_numpy():
    names = ["snipjit", "snipjit-req", "onnxruntime", "openvino", "numpy", "hand-c", "stream-limit"]
    m = runner.run_workload(workloads.WORKLOADS["softmax"], names, QUICK)
    assert [r.engine for r in m.results] == names
    assert m.reference == "numpy-f64" and m.baseline == "snipjit"
    for r in m.results:
        if r.engine in ("hand-c", "stream-limit") and not HAS_GCC:
            assert r.status == "skipped"
            continue
        assert r.status == "ok", (r.engine, r.note)
        assert len(r.round_medians_s) == 2 and r.median_s > 0 and r.load_s is not None
        if r.engine == "stream-limit":  # its outputs are not the softmax
            assert r.max_abs_err is None and m.gb_per_s(r) > 0
        else:
            assert r.max_abs_err < 1e-6, r.engine
    assert "plan: 1 snippet" in m.result("snipjit").note
    summary = json.loads(json.dumps(m.summary()))
    assert [row["engine"] for row in summary["engines"]] == names and summary["engines"][0]["ratio"] == 1.0
    table = format_table(m)
    assert table.startswith("softmax: Softmax over the last axis") and all(f"\n{n} " in table for n in names)


def test_a_broken_or_missing_engine_is_reported_and_the_others_go_on():
    workload = workloads.WORKLOADS["softmax"]
    chosen, _ = engines.engines_for(workload, ["snipjit"])
    broken = Engine("broken", "bench.engines:load_model_engine", (), {"engine": "no-such-engine"})
    missing = Engine("missing", "bench.engines:load_model_engine", ("no_such_module_for_snipjit_tests",))
    feeds = workload.feeds(np.random.default_rng(0))
    m = measure("softmax", str(workload.model()), [*chosen, broken, missing], feeds, QUICK,
                references=[engines.MODEL_ENGINES["onnxruntime"]])
    assert m.reference == "onnxruntime"
    assert m.result("snipjit").status == "ok" and m.result("snipjit").max_abs_err < 1e-6
    assert m.result("broken").status == "failed" and "KeyError: 'no-such-engine'" in m.result("broken").note
    missing = m.result("missing")
    assert (missing.status, missing.note) == ("skipped", "no_such_module_for_snipjit_tests not installed")


def test_engines_that_cannot_express_a_workload_are_listed_with_the_reason():
    chosen, unsupported = engines.engines_for(workloads.WORKLOADS["ew_gelu"], ["snipjit", "numexpr", "hand-c"])
    assert [e.name for e in chosen] == ["snipjit"]  # hand-c has no GELU kernel: left out
    assert unsupported == {"numexpr": "numexpr has no erf"}
