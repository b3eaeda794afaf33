"""Request: outputs into caller buffers, recycling of output buffers the caller let go of (never of ones
it still holds), and errors that name the input, output or step at fault."""
import weakref

import numpy as np
import pytest

import snipjit
from snipjit.runtime.implementations.base import Kernel
from snipjit.runtime.execution.request import Request
from snipjit import FeedError
from snipjit.ops import OpError
from snipjit.runtime.execution.request import ExecutionError

rng = np.random.default_rng(0)

CHAIN = """graph(x: f32[64,128]) -> [y] {
  const c: f32[] = 2.0
  [a] = Mul(x, c)
  [y] = Relu(a)
}"""


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.fixture(params=[True, False], ids=["fused", "unfused"])
def chain(request):
    """The chain as one snippet kernel, or as two reference steps."""
    cm = snipjit.compile(snipjit.parse_graph(CHAIN), fuse=request.param)
    assert [s.kind for s in cm.plan] == (["snippet"] if request.param else ["reference", "reference"])
    return cm


def chain_expected(x):
    return np.maximum(2 * x, 0)


# ---- outputs into caller buffers -----------------------------------------------------------------
def test_output_is_written_into_the_callers_buffer(chain, monkeypatch):
    computed = []   # what the steps produced, before any copy into the caller's buffers
    real = Request._copy_into_caller
    monkeypatch.setattr(Request, "_copy_into_caller",
                        lambda self, result, outputs: computed.append(list(result)) or real(self, result, outputs))
    req = chain.create_request()
    buf = np.full((64, 128), np.nan, np.float32)
    x = randn(64, 128)
    out = req.run({"x": x}, outputs={"y": buf})
    assert out[0] is buf and computed[-1][0] is buf   # the kernel wrote there: no copy afterwards
    np.testing.assert_array_equal(buf, chain_expected(x))
    x2 = randn(64, 128)
    assert req.run({"x": x2}, outputs={"y": buf})[0] is buf
    np.testing.assert_array_equal(buf, chain_expected(x2))


def test_non_contiguous_caller_buffer_receives_a_copy(chain):
    buf = np.zeros((128, 64), np.float32).T
    x = randn(64, 128)
    out = chain.create_request().run({"x": x}, outputs={"y": buf})
    assert out[0] is buf
    np.testing.assert_array_equal(buf, chain_expected(x))


@pytest.mark.parametrize("text", [
    "graph(x: f32[64,64]) -> [y] { [y] = Transpose(x) }",
    "graph(x: f32[64,64], w: f32[64,64]) -> [y] { [y] = MatMul(x, w) }",
    "graph(x: f32[64,64], w: f32[64,64]) -> [y] { [a] = MatMul(x, w)\n [y] = Add(a, x) }",
    "graph(x: f32[64,64]) -> [y] { const w: f32[64,64] = [%s]\n [y] = MatMul(x, w) }"
    % ", ".join(str(v) for v in np.linspace(-1, 1, 4096)),
], ids=["transpose", "matmul", "matmul_add", "matmul_by_constant"])
@pytest.mark.parametrize("overlap", ["same", "shifted_view"])
def test_a_caller_buffer_overlapping_a_feed_gets_the_right_result(text, overlap):
    cm = snipjit.compile(snipjit.parse_graph(text))
    memory = randn(65, 64)
    x = memory[:64]
    buf = x if overlap == "same" else memory[1:]
    w = randn(64, 64)
    feeds = {"x": x, "w": w} if len(cm.graph.inputs) == 2 else {"x": x}
    want = cm.run({k: v.copy() for k, v in feeds.items()})[0]
    out = cm.create_request().run(feeds, outputs={"y": buf})
    assert out[0] is buf
    np.testing.assert_allclose(buf, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bad, shown", [
    (np.empty((64, 127), np.float32), "float32[64, 127]"),
    (np.empty((64, 128), np.float64), "float64[64, 128]"),
    (np.empty((128, 64), np.float32), "float32[128, 64]"),
    ([[1.0]], "list"),
])
def test_wrong_output_buffer_names_the_output(chain, bad, shown):
    with pytest.raises(FeedError, match=r"output buffer 'y' must be float32\[64, 128\]") as info:
        chain.create_request().run({"x": randn(64, 128)}, outputs={"y": bad})
    assert shown in str(info.value)


def test_unknown_output_name(chain):
    with pytest.raises(FeedError, match=r"unknown output\(s\) \['z'\].*\['y'\]"):
        chain.run({"x": randn(64, 128)}, outputs={"z": np.empty((64, 128), np.float32)})


VIEW_OUTPUT = """graph(x: f32[64,128]) -> [b, r] {
  const s: i64[1] = [-1]
  [b] = Relu(x)
  [r] = Reshape(b, s)
}"""


def test_caller_buffer_for_an_output_that_is_a_view():
    cm = snipjit.compile(snipjit.parse_graph(VIEW_OUTPUT))
    x = randn(64, 128)
    buf = np.empty(64 * 128, np.float32)
    b, r = cm.create_request().run({"x": x}, outputs={"r": buf})
    assert r is buf and not np.shares_memory(b, buf)
    np.testing.assert_array_equal(buf, np.maximum(x, 0).reshape(-1))
    with pytest.raises(FeedError, match=r"output buffer 'r' must be float32\[8192\]"):
        cm.create_request().run({"x": x}, outputs={"r": np.empty(5, np.float32)})


def test_non_array_buffer_for_a_view_output_is_a_feed_error():
    cm = snipjit.compile(snipjit.parse_graph(VIEW_OUTPUT))
    with pytest.raises(FeedError, match="output buffer 'r'"):
        cm.create_request().run({"x": randn(64, 128)}, outputs={"r": [0.0]})


# ---- recycling ----------------------------------------------------------------------------------
def test_held_output_is_never_overwritten(chain):
    req = chain.create_request()
    x1, x2 = randn(64, 128), randn(64, 128)
    first = req.run({"x": x1})[0]
    second = req.run({"x": x2})[0]
    assert second is not first and not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, chain_expected(x1))
    np.testing.assert_array_equal(second, chain_expected(x2))


def test_dropped_output_is_recycled(chain):
    req = chain.create_request()
    first = weakref.ref(req.run({"x": randn(64, 128)})[0])
    x = randn(64, 128)
    again = req.run({"x": x})[0]
    assert again is first()
    np.testing.assert_array_equal(again, chain_expected(x))


def test_output_held_through_a_slice_is_not_recycled(chain):
    req = chain.create_request()
    x1 = randn(64, 128)
    head = req.run({"x": x1})[0][:3]
    req.run({"x": randn(64, 128)})
    np.testing.assert_array_equal(head, chain_expected(x1)[:3])


def test_output_held_through_a_view_of_a_view_is_not_recycled(chain):
    """An output buffer starts on a cache line (a view of the memory's owner): a view of a view of it holds
    that owner, not the output, and keeps the memory from being recycled all the same."""
    req = chain.create_request()
    x1 = randn(64, 128)
    first = req.run({"x": x1})[0]
    assert first.ctypes.data % 64 == 0
    rows = first[2:][:3].T
    del first
    again = req.run({"x": randn(64, 128)})[0]
    assert not np.shares_memory(again, rows) and again.ctypes.data % 64 == 0
    np.testing.assert_array_equal(rows, chain_expected(x1)[2:5].T)


def test_a_callers_buffer_is_not_recycled_while_it_holds_the_array_around_it(chain):
    """Results computed into a slice of the caller's array, then a run without buffers: the slice's memory is
    the caller's, held through that array, and is not written again."""
    req = chain.create_request()
    whole = np.zeros((128, 128), np.float32)
    x1 = randn(64, 128)
    req.run({"x": x1}, outputs={"y": whole[32:96]})
    req.run({"x": randn(64, 128)})
    np.testing.assert_array_equal(whole[32:96], chain_expected(x1))
    assert not whole[:32].any() and not whole[96:].any()


def test_view_output_held_alone_keeps_its_buffer():
    cm = snipjit.compile(snipjit.parse_graph(VIEW_OUTPUT))
    req = cm.create_request()
    x1 = randn(64, 128)
    r = req.run({"x": x1})[1]   # b, the buffer r views, is dropped
    for _ in range(2):
        req.run({"x": randn(64, 128)})
    np.testing.assert_array_equal(r, np.maximum(x1, 0).reshape(-1))


ONLY_A_VIEW_OUT = """graph(x: f32[64,128]) -> [f] {
  const s: i64[2] = [1, -1]
  [b] = Relu(x)
  [r] = Reshape(b, s)
  [f] = Flatten(r) {axis = 1}
}"""


def test_a_buffer_the_outputs_only_view_is_recycled_too():
    """A network's pooled features leave through Reshape and Flatten: once the caller drops the output,
    the next run writes the same buffer (and keeps the launch prepared for it)."""
    cm = snipjit.compile(snipjit.parse_graph(ONLY_A_VIEW_OUT))
    req = cm.create_request()
    first = weakref.ref(req.run({"x": randn(64, 128)})[0].base)
    x = randn(64, 128)
    again = req.run({"x": x})[0]
    assert again.base is first() is not None
    np.testing.assert_array_equal(again, np.maximum(x, 0).reshape(1, -1))
    held = req.run({"x": randn(64, 128)})[0]   # while the caller holds it, a new one
    assert req.run({"x": x})[0].base is not held.base


def test_output_fed_back_as_input():
    cm = snipjit.compile(snipjit.parse_graph("graph(x: f32[64,128]) -> [y] {\n [y] = Sigmoid(x)\n}"))
    req = cm.create_request()
    x = randn(64, 128)
    y = req.run({"x": x})[0]
    y2 = req.run({"x": y})[0]
    np.testing.assert_allclose(y2, 1 / (1 + np.exp(-1 / (1 + np.exp(-x)))), rtol=1e-6)


CONSTANT_VIEW = """graph(x: f32[2,3]) -> [y, z] {
  const c: f32[2,3] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
  const s: i64[1] = [6]
  [y] = Reshape(c, s)
  [z] = Add(x, c)
}"""


def test_writing_into_an_output_never_changes_the_model():
    cm = snipjit.compile(snipjit.parse_graph(CONSTANT_VIEW), fold=False)   # folding would hide the view
    x = np.zeros((2, 3), np.float32)
    y, _ = cm.run({"x": x})
    y[:] = 100
    y2, z2 = cm.run({"x": x})
    np.testing.assert_array_equal(y2, np.arange(1, 7, dtype=np.float32))
    np.testing.assert_array_equal(z2, np.arange(1, 7, dtype=np.float32).reshape(2, 3))


def test_constant_output_is_a_copy():
    cm = snipjit.compile(snipjit.parse_graph(
        "graph(x: f32[2]) -> [y, c] {\n const c: f32[2] = [1.0, 2.0]\n [y] = Add(x, c)\n}"))
    _, c = cm.run({"x": np.zeros(2, np.float32)})
    c[:] = 7
    y, c2 = cm.run({"x": np.zeros(2, np.float32)})
    np.testing.assert_array_equal(y, [1, 2])
    np.testing.assert_array_equal(c2, [1, 2])


def test_request_binds_once_per_signature(monkeypatch):
    from snipjit.runtime.execution.request import Request
    bound = []
    real = Request._bind
    monkeypatch.setattr(Request, "_bind", lambda self, arrays: bound.append(arrays[0].shape) or real(self, arrays))
    cm = snipjit.compile(snipjit.parse_graph("graph(x: f32[n,128]) -> [y] {\n [y] = Sigmoid(x)\n}"))
    req = cm.create_request()
    for n in (64, 64, 32, 64, 32):
        x = randn(n, 128)
        np.testing.assert_allclose(req.run({"x": x})[0], 1 / (1 + np.exp(-x)), rtol=1e-6)
    assert bound == [(64, 128), (32, 128)]
    cm.create_request().run({"x": randn(64, 128)})
    assert len(bound) == 3 and len(cm.program.plans()) == 2   # a new request binds; the plan is shared


def test_new_and_changed_feed_arrays_are_read_each_run(chain):
    """Kernels keep the data pointer of a feed they saw last run: a new array, an array changed in
    place and a freed array whose memory is reused must all be read afresh."""
    req = chain.create_request()
    x = randn(64, 128)
    np.testing.assert_array_equal(req.run({"x": x})[0], chain_expected(x))
    x[:] = randn(64, 128)
    np.testing.assert_array_equal(req.run({"x": x})[0], chain_expected(x))
    for _ in range(3):
        del x
        x = randn(64, 128)
        np.testing.assert_array_equal(req.run({"x": x})[0], chain_expected(x))
    view = randn(64, 256)[:, ::2]   # not contiguous: copied for the kernel, never remembered
    np.testing.assert_array_equal(req.run({"x": view})[0], chain_expected(view))
    np.testing.assert_array_equal(req.run({"x": x})[0], chain_expected(x))


def test_requests_do_not_share_buffers(chain):
    r1, r2 = chain.create_request(), chain.create_request()
    x1, x2 = randn(64, 128), randn(64, 128)
    y1 = r1.run({"x": x1})[0]
    y2 = r2.run({"x": x2})[0]
    assert not np.shares_memory(y1, y2)
    np.testing.assert_array_equal(y1, chain_expected(x1))


# ---- errors -------------------------------------------------------------------------------------
DYNAMIC = snipjit.parse_graph("""graph(x: f32[n,4], y: f32[n,4], s: i64[2]) -> [z] {
  [a] = Add(x, y)
  [r] = Reshape(a, s) @myreshape
  [z] = Relu(r)
}""")
GOOD = {"x": np.ones((2, 4), np.float32), "y": np.ones((2, 4), np.float32), "s": np.array([4, 2])}


@pytest.mark.parametrize("change, message", [
    ({"x": None}, r"input 'x' \(f32\[n,4\]\) is missing"),
    ({"x": np.ones((2, 4))}, r"input 'x' must have dtype f32 .* got float64"),
    ({"x": np.ones((2, 5), np.float32)}, r"input 'x' must have shape \[n,4\], got \[2, 5\] \(axis 1 must be 4\)"),
    ({"y": np.ones((2, 4, 1), np.float32)}, r"input 'y' must have shape \[n,4\] \(rank 2\)"),
    ({"y": np.ones((3, 4), np.float32)}, r"input 'y' axis 0 is dim 'n' = 3, but another input bound 'n' = 2"),
    ({"s": np.array([4.0, 2.0])}, r"input 's' must have dtype i64"),
    ({"q": np.ones(1)}, r"unknown input\(s\) \['q'\]"),
])
def test_feed_errors_name_the_input(change, message):
    feeds = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(FeedError, match=message):
        snipjit.compile(DYNAMIC).run(feeds)


@pytest.mark.parametrize("change, message", [
    ({"x": np.ones((2, 4))}, r"input 'x' must have dtype f32"),
    ({"y": np.ones((3, 4), np.float32)}, r"input 'y' axis 0 is dim 'n' = 3, but another input bound 'n' = 2"),
    ({"q": np.ones(1)}, r"unknown input\(s\) \['q'\]"),
    ({"s": None}, r"input 's' \(i64\[2\]\) is missing"),
])
def test_feed_errors_after_accepted_runs(change, message):
    """The request accepts feeds shaped like an earlier good one at once: a bad feed is still refused."""
    req = snipjit.compile(DYNAMIC).create_request()
    for _ in range(2):
        req.run(GOOD)
    feeds = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(FeedError, match=message):
        req.run(feeds)


def test_list_feeds_are_converted_then_checked():
    cm = snipjit.compile(snipjit.parse_graph("graph(s: i64[2]) -> [y] {\n [y] = Neg(s)\n}"))
    np.testing.assert_array_equal(cm.run({"s": [1, -2]})[0], [-1, 2])
    with pytest.raises(FeedError, match="input 's' must have dtype i64"):
        cm.run({"s": [1.5, 2.5]})


def test_bad_value_at_run_time_names_the_node():
    cm = snipjit.compile(DYNAMIC)
    assert cm.run(GOOD)[0].shape == (4, 2)
    with pytest.raises(OpError, match="Reshape node 'myreshape'"):
        cm.run({**GOOD, "s": np.array([3, 2])})


def test_failing_step_is_named():
    cm = snipjit.compile(snipjit.parse_graph(CHAIN), fuse=False)
    step = cm.plan[1]

    class Broken(Kernel):
        def __call__(self, inputs):
            raise ZeroDivisionError("boom")

        def run_into(self, inputs, outputs):
            raise ZeroDivisionError("boom")

    step.kernel = Broken()
    with pytest.raises(ExecutionError, match=r"step reference Relu node producing 'y' failed: ZeroDivisionError: boom"):
        cm.run({"x": randn(64, 128)})


def test_run_after_an_error_still_works(chain):
    req = chain.create_request()
    with pytest.raises(FeedError):
        req.run({"x": randn(64, 127)})
    x = randn(64, 128)
    np.testing.assert_array_equal(req.run({"x": x})[0], chain_expected(x))


def test_a_run_wakes_the_native_pools_sleeping_workers_first(chain, monkeypatch):
    """(So they spin by the first launch: a worker takes tens of microseconds to wake.)"""
    from snipjit.runtime.parallel import native_threads
    pool = native_threads.get_native_pool()
    if pool is None:
        pytest.skip("no native pool here")
    order = []
    monkeypatch.setattr(native_threads.NativePool, "wake", lambda self: order.append("wake"))
    real = Request._execute
    monkeypatch.setattr(Request, "_execute", lambda self, bound: order.append("steps") or real(self, bound))
    chain.run({"x": randn(64, 128)})
    assert order == ["wake", "steps"]
