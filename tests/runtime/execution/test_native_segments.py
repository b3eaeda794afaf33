"""Runs of kernel steps go to the native pool as one call (`native_segments`): which steps join, and that
the joined request computes what the step-by-step one does, run after run, with new feeds and the caller's
output buffers."""
import numpy as np
import pytest

import snipjit
from snipjit import GraphBuilder
from snipjit.runtime.implementations import gemm_launch
from snipjit.runtime.parallel.native_threads import supported

pytestmark = pytest.mark.skipif(not (gemm_launch.available() and supported()), reason="no LLVM JIT or native pool")

rng = np.random.default_rng(3)


def randn(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def network(depthwise_activation: str = ""):
    """Convolutions, a depthwise conv, pools into a Concat, a fused elementwise snippet and a MatMul."""
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 6, 20, 20])
    y = b.Relu(b.Conv(x, b.const(randn(16, 6, 3, 3, scale=0.3)), b.const(randn(16)), pads=[1, 1, 1, 1]))
    d = b.Conv(y, b.const(randn(16, 1, 3, 3, scale=0.3)), group=16, strides=[2, 2], pads=[1, 1, 1, 1])
    d = b.op(depthwise_activation, d) if depthwise_activation else d
    p = b.MaxPool(y, kernel_shape=[2, 2], strides=[2, 2])
    c = b.Relu(b.Conv(b.Concat(d, p, axis=1), b.const(randn(24, 32, 1, 1, scale=0.3))))
    s = b.Mul(b.Sigmoid(c), c)
    pooled = b.Reshape(b.GlobalAveragePool(s), b.const(np.array([0, 24], np.int64)))
    b.output(b.MatMul(pooled, b.const(randn(24, 10, scale=0.3))), "y")
    return b.build()


def joined_and_stepwise(graph):
    cm = snipjit.compile(graph)
    joined, stepwise = cm.create_request(), cm.create_request()
    stepwise.join_steps = False
    return cm, joined, stepwise


def segments(request):
    bound = next(iter(request._bound.values()))
    return bound, [call[1] for call in bound.joined if call[0] == "segment"]


def test_runs_of_kernel_steps_become_one_call_computing_the_same():
    graph = network()
    cm, joined, stepwise = joined_and_stepwise(graph)
    reference = snipjit.compile(graph, implementations={"reference"}, channels_last=False)
    for n in (2, 2, 1):   # new feed arrays each run; a second shape binds a second plan
        x = randn(n, 6, 20, 20)
        got, want = joined.run({"x": x})[0], stepwise.run({"x": x})[0]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(got, reference.run({"x": x})[0], rtol=1e-4, atol=1e-4)
    bound, found = segments(joined)
    assert len(found) == 1 and len(found[0].steps) >= 5
    # the first step reads the feed and the last writes the output: they stay outside
    assert bound.joined[0][0] != "segment" and bound.joined[-1][0] != "segment"
    assert sum(len(s.steps) for s in found) + len(bound.joined) - len(found) == len(bound.calls)


def test_caller_output_buffers_and_snippet_launch_counts():
    graph = network()
    cm, joined, stepwise = joined_and_stepwise(graph)
    x = randn(1, 6, 20, 20)
    out = np.full((1, 10), np.nan, np.float32)
    assert joined.run({"x": x}, outputs={"y": out})[0] is out
    np.testing.assert_array_equal(out, stepwise.run({"x": x})[0])
    snippets = [s.kernel for s in cm.plan if s.kind == "snippet"]
    before = [k.calls for k in snippets]
    joined.run({"x": x})
    assert [k.calls for k in snippets] == [c + 1 for c in before] and snippets


def test_a_step_with_python_work_after_its_kernel_ends_a_run():
    """A LeakyRelu after a depthwise convolution runs in NumPy after the kernel: that step is not joined."""
    cm, joined, _ = joined_and_stepwise(network("LeakyRelu"))
    joined.run({"x": randn(1, 6, 20, 20)})
    bound, found = segments(joined)
    leaky = next(i for i, call in enumerate(bound.joined) if call[4].ops == ["Conv", "LeakyRelu"])
    assert bound.joined[leaky][0] == "launch" and found


def test_profiles_still_time_every_step():
    """A profile runs the steps joined, as a request does, and splits a segment's time among its steps."""
    cm = snipjit.compile(network())
    profile = cm.profile({"x": randn(1, 6, 20, 20)}, runs=3, warmup=1)
    plan = next(iter(cm.program.plans().values()))
    assert len(profile.steps) == sum(mode not in ("skip", "view") for mode in plan.modes) >= 8
    assert all(s.calls == 3 and s.seconds > 0 for s in profile.steps)
    assert profile.step_seconds <= profile.total_seconds
    request = cm.create_request()
    request.run({"x": randn(1, 6, 20, 20)})
    assert any(call[0] == "segment" for call in next(iter(request._bound.values())).joined)
