"""The suite's comparison of an engine with the baseline: same-round ratios, not a ratio of pooled medians."""
from bench.measurement import EngineResult, Measurement


def _result(engine: str, rounds: list[float]) -> EngineResult:
    return EngineResult(engine, round_medians_s=rounds, samples_s=list(rounds))


def test_the_ratio_pairs_the_rounds_the_two_engines_shared():
    # the machine was twice as slow in the last two rounds for both engines: each round says 0.8
    base = _result("snipjit", [1.0, 1.0, 1.0, 2.0, 2.0])
    other = _result("onnxruntime", [0.8, 0.8, 0.8, 1.6, 1.6])
    m = Measurement("w", "", [base, other], baseline="snipjit", reference=None)
    assert abs(m.ratio(other) - 0.8) < 1e-12 and m.ratio(base) == 1.0
    # pooled medians would mix the phases: 0.8 / 1.0 here, but 1.6 / 1.0 had the slow rounds been the peer's only
    skewed = _result("openvino", [0.8, 0.8, 1.6, 1.6, 1.6])
    assert abs(m.ratio(skewed) - 0.8) < 1e-12 and skewed.median_s / base.median_s == 1.6


def test_without_the_same_rounds_the_ratio_is_of_the_medians():
    base = _result("snipjit", [1.0, 1.0, 2.0])
    other = _result("onnxruntime", [3.0])   # (failed after its first round)
    m = Measurement("w", "", [base, other], baseline="snipjit", reference=None)
    assert m.ratio(other) == 3.0
