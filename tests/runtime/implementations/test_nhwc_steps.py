"""The `nhwc` implementation end to end: models with convolutions compile onto channels-last regions
whose Convs (implicit GEMM, depthwise) and pools run on generated kernels, absorb their bias and
activation, take any batch size, and agree with the reference kernels."""
import numpy as np
import pytest

import snipjit
from snipjit import GraphBuilder
from snipjit.runtime.implementations import gemm_launch

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")

rng = np.random.default_rng(0)


def randn(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def check(graph, feeds, **options):
    cm = snipjit.compile(graph, **options)
    ref = snipjit.compile(graph, implementations={"reference"}, channels_last=False, fuse=False)
    for got, want in zip(cm.run(feeds), ref.run(feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
    return cm


def steps(cm):
    return [(s.kind, s.ops) for s in cm.plan]


def conv_block(activation: str, batch="n", channels=12):
    b = GraphBuilder()
    x = b.input("x", "f32", [batch, 5, 9, 9])
    y = b.Conv(x, b.const(randn(channels, 5, 3, 3, scale=0.3)), pads=[1, 1, 1, 1])
    y = b.Add(y, b.const(randn(channels, 1, 1)))
    if activation == "Clip":
        y = b.Clip(y, b.const(np.float32(-0.5)), b.const(np.float32(0.75)))
    elif activation:
        y = b.op(activation, y)
    b.output(y, "y")
    return b.build()


@pytest.mark.parametrize("activation", ["Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", ""])
def test_conv_bias_and_activation_are_one_step(activation):
    cm = check(conv_block(activation), {"x": randn(2, 5, 9, 9)}, fold=False)
    convs = [ops for kind, ops in steps(cm) if kind == "nhwc"]
    assert convs == [["Conv", "Add"] + ([activation] if activation else [])]
    assert [kind for kind, _ in steps(cm)] == ["reference", "nhwc", "reference"]   # the two reorders


def test_any_batch_without_recompiling():
    graph = conv_block("Relu")
    cm = snipjit.compile(graph)
    ref = snipjit.compile(graph, implementations={"reference"}, channels_last=False)
    for n in (1, 3, 2):
        x = randn(n, 5, 9, 9)
        np.testing.assert_allclose(cm.run({"x": x})[0], ref.run({"x": x})[0], rtol=1e-4, atol=1e-4)


def test_a_small_network_runs_on_generated_kernels():
    """Stem, depthwise-separable block with a squeeze-excitation, residual, pools, head: odd channel
    counts everywhere (vector tails)."""
    b = GraphBuilder()
    x = b.input("x", "f32", [1, 3, 23, 21])
    stem = b.Relu(b.Conv(x, b.const(randn(13, 3, 3, 3, scale=0.4)), b.const(randn(13)), pads=[1, 1, 1, 1],
                         strides=[2, 2]))
    dw = b.Clip(b.Conv(stem, b.const(randn(13, 1, 3, 3, scale=0.4)), b.const(randn(13)), pads=[1, 1, 1, 1],
                       group=13), b.const(np.float32(0)), b.const(np.float32(6)))
    squeeze = b.Relu(b.Conv(b.GlobalAveragePool(dw), b.const(randn(5, 13, 1, 1, scale=0.4))))
    scale = b.Sigmoid(b.Conv(squeeze, b.const(randn(13, 5, 1, 1, scale=0.4))))
    pw = b.Conv(b.Mul(dw, scale), b.const(randn(13, 13, 1, 1, scale=0.4)))
    res = b.Relu(b.Add(pw, stem))
    pooled = b.MaxPool(res, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    avg = b.AveragePool(pooled, kernel_shape=[2, 2], count_include_pad=1, pads=[0, 0, 1, 1])
    head = b.Flatten(b.GlobalMaxPool(avg), axis=1)
    b.output(head, "y")
    cm = check(b.build(), {"x": randn(1, 3, 23, 21)})
    kinds = steps(cm)
    nhwc_ops = [op for kind, ops in kinds if kind == "nhwc" for op in ops]
    for op in ("Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"):
        assert op in nhwc_ops, kinds
    # the image is read in place, and the pooled [1, 1, 1, 13] leaves as a view: no reorder at all
    assert not [ops for _, ops in kinds if "Transpose" in ops], kinds


def test_packed_weights_are_held_once():
    cm = snipjit.compile(conv_block("Relu"))
    weights = [v for v in cm.graph.constants if v.shape == (12, 5, 3, 3)]
    assert weights and all(not v.data.flags.writeable and not any(v.data.strides) for v in weights)


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_a_ceil_mode_pool_larger_than_its_input_is_one_window_over_all_of_it(monkeypatch, count_include_pad):
    """EfficientNet's pooler as transformers exports it: AveragePool with a 2560x2560 kernel and stride,
    ceil_mode=1, on a 7x7 map: one output, the mean of the whole map (on the global pooling kernel)."""
    from snipjit.runtime.implementations import global_pool_launch
    launches = []
    original = global_pool_launch.prepare_global_pool
    monkeypatch.setattr(global_pool_launch, "prepare_global_pool",
                        lambda *a: launches.append(a[0]) or original(*a))
    b = GraphBuilder()
    x = b.input("x", "f32", [1, 6, 7, 7])
    y = b.Conv(x, b.const(randn(20, 6, 1, 1)))
    b.output(b.AveragePool(y, kernel_shape=[2560, 2560], strides=[2560, 2560], ceil_mode=1,
                           count_include_pad=count_include_pad, pads=[0, 0, 0, 0]), "y")
    graph = b.build()
    xv = randn(1, 6, 7, 7)
    cm = snipjit.compile(graph)
    assert ("nhwc", ["AveragePool"]) in steps(cm)
    want = np.einsum("oc,nchw->no", graph.constants[0].data[:, :, 0, 0], xv)[:, :, None, None] / 49
    np.testing.assert_allclose(cm.run({"x": xv})[0], want, rtol=1e-5, atol=1e-6)
    assert launches == ["avg"]
    pool = next(s for s in cm.plan if s.ops == ["AveragePool"])
    assert [job.name for job in pool.kernel.native_jobs()] == [global_pool_launch.kernel_for("avg").shape.name]


@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1], output_padding=[1, 1]),
    dict(kernel_shape=[3, 2], strides=[3, 1], dilations=[2, 1], pads=[2, 0, 0, 0]),
    dict(kernel_shape=[1, 1]),
    dict(kernel_shape=[2, 2], strides=[3, 3], output_padding=[2, 1]),   # phases without taps: the bias
])
def test_conv_transpose_as_phase_convolutions_or_a_product_and_a_scatter(attrs):
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 7, 5, 6])
    y = b.ConvTranspose(b.Relu(b.Conv(x, b.const(randn(9, 7, 1, 1, scale=0.4)))),
                        b.const(randn(9, 11, *attrs["kernel_shape"], scale=0.3)), b.const(randn(11)), **attrs)
    b.output(b.Relu(y), "y")
    graph = b.build()
    for n in (1, 2):
        cm = check(graph, {"x": randn(n, 7, 5, 6)})
    assert ("nhwc", ["ConvTranspose"]) in steps(cm)


def test_silu_and_hard_swish_are_computed_in_the_conv_kernel():
    b = GraphBuilder()
    x = b.input("x", "f32", [2, 6, 9, 8])
    c = b.Conv(x, b.const(randn(16, 6, 3, 3, scale=0.3)), b.const(randn(16)), pads=[1, 1, 1, 1])
    silu = b.Mul(c, b.Sigmoid(c))
    d = b.Conv(silu, b.const(randn(20, 16, 1, 1, scale=0.3)))
    b.output(b.Clip(b.HardSwish(d), b.const(np.float32(-0.1)), b.const(np.float32(2.0))), "y")
    cm = check(b.build(), {"x": randn(2, 6, 9, 8)})
    convs = [s for s in cm.plan if s.kind == "nhwc"]
    assert [s.node.attrs["activation"] for s in convs] == ["silu", "hard_swish"]
    assert convs[1].ops == ["Conv", "Clip"] and len(cm.plan) == 4   # the two convs and the reorders in and out


def test_squeeze_excitation_s_sigmoid_is_computed_per_channel_in_the_conv_kernel():
    b = GraphBuilder()
    x = b.input("x", "f32", [2, 6, 9, 8])
    c = b.Conv(x, b.const(randn(24, 6, 3, 3, scale=0.3)), b.const(randn(24)), pads=[1, 1, 1, 1])
    gate = b.Conv(b.Relu(b.Conv(b.GlobalAveragePool(c), b.const(randn(4, 24, 1, 1)))), b.const(randn(24, 4, 1, 1)),
                  b.const(randn(24)))
    b.output(b.Mul(c, b.Sigmoid(gate)), "y")
    cm = check(b.build(), {"x": randn(2, 6, 9, 8)})
    convs = [s for s in cm.plan if s.kind == "nhwc" and s.node.op == "Conv"]
    assert [s.node.attrs.get("activation", "") for s in convs] == ["", "", "sigmoid"]
    assert not [s for s in cm.plan if "Sigmoid" in s.ops]


def prepares(monkeypatch) -> list:
    """The channels-last Convs whose launch is prepared, as they are."""
    from snipjit.runtime.implementations.channels_last import ConvKernel
    prepared, original = [], ConvKernel.prepare
    monkeypatch.setattr(ConvKernel, "prepare", lambda self, *a: prepared.append(self) or original(self, *a))
    return prepared


def test_a_step_with_an_absent_input_is_prepared_once(monkeypatch):
    """A Conv without bias that adds a residual (inputs x, w, absent, residual) prepares its launch on the first
    run only, and joins the native segment."""
    b = GraphBuilder()
    x = b.input("x", "f32", [1, 8, 6, 6])
    y = b.Conv(b.Relu(b.Conv(x, b.const(randn(8, 8, 3, 3, scale=0.2)), pads=[1, 1, 1, 1])),
               b.const(randn(8, 8, 1, 1, scale=0.3)))
    b.output(b.Relu(b.Add(y, b.Relu(x))), "y")
    prepared = prepares(monkeypatch)
    cm = check(b.build(), {"x": randn(1, 8, 6, 6)})
    assert any(s.node.inputs[2:] == [None, s.node.inputs[3]] for s in cm.plan if len(s.node.inputs) == 4)
    prepared.clear()
    for _ in range(3):
        cm.run({"x": randn(1, 8, 6, 6)})
    assert not prepared


@pytest.mark.parametrize("residual", [False, True])
def test_squeeze_excitation_s_gate_scales_the_projection_s_weights(monkeypatch, residual):
    """The gated map is never made: the 1×1 projection reads the depthwise conv's output and scales its weights
    per image (its fifth input, the gate); the step is prepared once, its absent residual input or not."""
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 8, 9, 9])
    d = b.Conv(x, b.const(randn(8, 1, 3, 3)), b.const(randn(8)), pads=[1, 1, 1, 1], group=8)
    gate = b.Sigmoid(b.Conv(b.Relu(b.Conv(b.GlobalAveragePool(d), b.const(randn(4, 8, 1, 1)))),
                            b.const(randn(8, 4, 1, 1))))
    y = b.Conv(b.Mul(d, gate), b.const(randn(8, 8, 1, 1, scale=0.3)), b.const(randn(8)))
    b.output(b.Add(y, x) if residual else y, "y")
    prepared = prepares(monkeypatch)
    for n in (2, 1):
        cm = check(b.build(), {"x": randn(n, 8, 9, 9)})
    assert not [s for s in cm.plan if "Mul" in s.ops]
    projection = next(s for s in cm.plan if s.kind == "nhwc" and len(s.node.inputs) == 5)
    assert (projection.node.inputs[3] is not None) == residual
    prepared.clear()
    for _ in range(3):
        cm.run({"x": randn(1, 8, 9, 9)})
    assert not prepared   # (every step's launch prepared on the first run, then rerun)


def test_convs_write_straight_into_their_concat():
    """A SqueezeNet fire module: the two expand convs' outputs are slices of the Concat's output, so the
    Concat copies nothing; a Concat whose input has another reader still copies."""
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 8, 9, 9])
    squeeze = b.Relu(b.Conv(x, b.const(randn(6, 8, 1, 1, scale=0.4)), b.const(randn(6))))
    e1 = b.Relu(b.Conv(squeeze, b.const(randn(20, 6, 1, 1, scale=0.4)), b.const(randn(20))))
    e3 = b.Relu(b.Conv(squeeze, b.const(randn(13, 6, 3, 3, scale=0.4)), b.const(randn(13)), pads=[1, 1, 1, 1]))
    fire = b.Concat(e1, e3, axis=1)
    other = b.Concat(fire, b.Conv(x, b.const(randn(3, 8, 1, 1))), axis=1)   # fire has two readers
    b.output(b.Conv(fire, b.const(randn(5, 33, 1, 1, scale=0.3))), "y")
    b.output(b.Conv(other, b.const(randn(4, 36, 1, 1, scale=0.3))), "z")
    graph = b.build()
    for n in (1, 3):
        cm = check(graph, {"x": randn(n, 8, 9, 9)})
    plan = next(iter(cm.program.plans().values()))
    concats = [i for i, s in enumerate(cm.plan) if s.ops == ["Concat"]]
    assert [plan.modes[i] for i in concats] == ["skip", "into"]
    assert len(plan.channel_slices) == 2
    explained = cm.explain(show_passes=False)
    assert "2 outputs written straight into their Concat" in explained
    layout = next(line for line in explained.splitlines() if line.startswith("== layout: channels-last:"))
    assert "Concat 2" in layout and "reorders inserted: 1 in, 2 out" in layout   # x in; y and z out


def test_pools_and_depthwise_convs_write_straight_into_their_concat():
    """ShuffleNet's stride-2 unit concatenates a convolution branch with an AveragePool of the unit's input;
    a MobileNet-style branch ends in a depthwise conv: every producer writes its slice of the Concat."""
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 8, 17, 17])   # (a Concat of 9×9×56: planned memory)
    stem = b.Relu(b.Conv(x, b.const(randn(12, 8, 1, 1, scale=0.4)), b.const(randn(12))))
    branch = b.Conv(stem, b.const(randn(12, 1, 3, 3, scale=0.4)), b.const(randn(12)), group=12, strides=[2, 2],
                    pads=[1, 1, 1, 1])
    branch = b.Conv(branch, b.const(randn(20, 12, 1, 1, scale=0.4)))
    pooled = b.AveragePool(stem, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    peak = b.MaxPool(stem, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    depthwise = b.Conv(stem, b.const(randn(12, 1, 3, 3, scale=0.4)), group=12, strides=[2, 2], pads=[1, 1, 1, 1])
    unit = b.Relu(b.Concat(branch, pooled, peak, depthwise, axis=1))
    b.output(b.Conv(unit, b.const(randn(5, 56, 1, 1, scale=0.3))), "y")
    for n in (1, 2):
        cm = check(b.build(), {"x": randn(n, 8, 17, 17)})
    plan = next(iter(cm.program.plans().values()))
    concat = next(i for i, s in enumerate(cm.plan) if s.ops == ["Concat"])
    assert plan.modes[concat] == "skip" and len(plan.channel_slices) == 4


def dense_block(layers: int, growth: int = 5):
    """DenseNet's block: each layer's BatchNorm-ReLU (a Subgraph) and convolutions read the block's feature
    map so far, which the layer's Concat then extends by the layer's output; a MaxPool makes the first."""
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 6, 11, 11])
    features = b.MaxPool(b.Conv(x, b.const(randn(12, 6, 3, 3, scale=0.4)), pads=[1, 1, 1, 1]),
                         kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = 12
    for _ in range(layers):
        normed = b.Relu(b.Add(b.Mul(features, b.const(randn(channels, 1, 1, scale=0.5))),
                              b.const(randn(channels, 1, 1, scale=0.1))))
        bottleneck = b.Relu(b.Conv(normed, b.const(randn(8, channels, 1, 1, scale=0.4)), b.const(randn(8))))
        grown = b.Conv(bottleneck, b.const(randn(growth, 8, 3, 3, scale=0.4)), pads=[1, 1, 1, 1])
        features = b.Concat(features, grown, axis=1)
        channels += growth
    b.output(b.Relu(b.Mul(features, b.const(randn(channels, 1, 1, scale=0.5)))), "y")
    return b.build()


def test_a_dense_block_assembles_its_concats_in_one_buffer():
    """Every Concat of the block is assembled in place: the pool and each layer's last convolution write into
    the final Concat's output, and the BatchNorm-ReLU Subgraphs read the feature map so far from it (rows of
    channels farther apart than their length) — no step copies a feature map."""
    graph = dense_block(3)
    for n in (1, 2):
        cm = check(graph, {"x": randn(n, 6, 11, 11)})
    plan = next(iter(cm.program.plans().values()))
    concats = [i for i, s in enumerate(cm.plan) if s.ops == ["Concat"]]
    assert [plan.modes[i] for i in concats] == ["skip"] * 3
    assert len(plan.channel_slices) == 6   # (the pool's output, three layers' outputs, two inner Concats')
    assert [plan.channel_slices[s][1:] for s in cm.plan[concats[0]].in_slots] == [(0, 12), (12, 17)]
    inner = [cm.plan[i].out_slots[0] for i in concats]
    assert [plan.channel_slices[s] for s in inner[:-1]] == [(inner[1], 0, 17), (inner[2], 0, 22)]
    assert inner[-1] in plan.arena_slots   # the one buffer
    pitched = [s for s in cm.plan if s.kind == "snippet" and s.kernel.pitched_inputs()]
    assert len(pitched) == 3   # the layers' BatchNorm-ReLU (the last Mul-Relu reads the whole buffer)


def test_a_concat_input_read_by_a_convolution_too_is_copied():
    """A Concat's input that a convolution also reads (it takes only contiguous inputs) is copied, and the
    Concats around it copy too: results stay right whichever way a block is planned."""
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 6, 9, 9])
    first = b.Conv(x, b.const(randn(10, 6, 3, 3, scale=0.4)), pads=[1, 1, 1, 1])
    side = b.Conv(first, b.const(randn(4, 10, 1, 1, scale=0.4)))
    joined = b.Concat(first, side, axis=1)
    normed = b.Relu(b.Mul(joined, b.const(randn(14, 1, 1))))
    b.output(b.Concat(joined, b.Conv(normed, b.const(randn(3, 14, 1, 1, scale=0.4))), axis=1), "y")
    cm = check(b.build(), {"x": randn(2, 6, 9, 9)})
    plan = next(iter(cm.program.plans().values()))
    assert [plan.modes[i] for i, s in enumerate(cm.plan) if s.ops == ["Concat"]] == ["into", "into"]


@pytest.mark.parametrize("size", [5, 4])
def test_lrn_between_convolutions_is_one_step_on_the_layout(size):
    """Inception's LRN after a convolution: its own generated kernel on the channels-last tensor."""
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 6, 15, 15])
    y = b.Relu(b.Conv(x, b.const(randn(40, 6, 3, 3, scale=0.5)), b.const(randn(40)), pads=[1, 1, 1, 1]))
    y = b.LRN(y, size=size, alpha=1e-3, beta=0.75, bias=1.0)
    b.output(b.Conv(y, b.const(randn(8, 40, 1, 1, scale=0.3))), "y")
    for n in (1, 2):
        cm = check(b.build(), {"x": randn(n, 6, 15, 15)})
    assert ("nhwc", ["LRN"]) in steps(cm)


def test_a_residual_block_adds_its_shortcut_in_the_conv_kernel():
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 12, 7, 6])
    main = b.Relu(b.Conv(x, b.const(randn(12, 12, 3, 3, scale=0.2)), b.const(randn(12)), pads=[1, 1, 1, 1]))
    main = b.Conv(main, b.const(randn(24, 12, 1, 1, scale=0.3)), b.const(randn(24)))
    shortcut = b.Conv(x, b.const(randn(24, 12, 1, 1, scale=0.3)))
    b.output(b.Relu(b.Add(shortcut, main)), "y")
    for n in (1, 2):
        cm = check(b.build(), {"x": randn(n, 12, 7, 6)})
    convs = [s for s in cm.plan if s.kind == "nhwc"]
    assert [s.ops for s in convs] == [["Conv", "Relu"], ["Conv"], ["Conv", "Relu"]]
    assert len(convs[2].node.inputs) == 4 and not [s for s in cm.plan if s.kind == "snippet"]


def test_any_image_size_without_recompiling():
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 3, "h", "w"])
    y = b.Relu(b.Conv(x, b.const(randn(8, 3, 3, 3, scale=0.3)), b.const(randn(8)), pads=[1, 1, 1, 1], strides=[2, 2]))
    y = b.MaxPool(b.Conv(y, b.const(randn(8, 1, 3, 3)), group=8, pads=[1, 1, 1, 1]), kernel_shape=[2, 2],
                  strides=[2, 2])
    b.output(b.GlobalAveragePool(b.Conv(y, b.const(randn(12, 8, 1, 1)))), "y")
    graph = b.build()
    cm = snipjit.compile(graph)
    ref = snipjit.compile(graph, implementations={"reference"}, channels_last=False)
    kernels = [s.kernel for s in cm.plan]
    for shape in ((1, 3, 17, 23), (2, 3, 32, 32), (1, 3, 9, 40)):
        xv = randn(*shape)
        np.testing.assert_allclose(cm.run({"x": xv})[0], ref.run({"x": xv})[0], rtol=1e-4, atol=1e-4)
    assert [s.kernel for s in cm.plan] == kernels


def test_a_vision_transformers_patch_tokens_are_a_view_of_the_conv_output():
    """ViT's embedding as exporters write it: the patch Conv flattened to [N, C, H·W] and transposed to tokens,
    then the class token concatenated: the tokens are the channels-last output reshaped (no reorder step)."""
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 3, 32, 32])
    patches = b.Conv(x, b.const(randn(24, 3, 8, 8, scale=0.1)), b.const(randn(24)), strides=[8, 8])
    flat = b.Reshape(patches, b.const(np.array([0, 24, 16])))
    tokens = b.Transpose(flat, perm=[0, 2, 1])
    cls = b.Expand(b.const(randn(1, 1, 24)), b.Concat(b.Slice(b.Shape(x), b.const(np.array([0])),
                                                               b.const(np.array([1]))),
                                                      b.const(np.array([1, 24])), axis=0))
    b.output(b.Add(b.Concat(cls, tokens, axis=1), b.const(randn(17, 24))), "y")
    graph = b.build()
    for n in (1, 2):
        cm = check(graph, {"x": randn(n, 3, 32, 32)})
    assert "Transpose" not in [op for _, ops in steps(cm) for op in ops]


def winograd_network():
    """Two 3×3 convolutions of stride 1 (a residual block): 24 and 14 pixels wide, channels in vectors of
    every level."""
    b = GraphBuilder()
    x = b.input("x", "f32", [2, 3, 24, 14])
    stem = b.Relu(b.Conv(x, b.const(randn(32, 3, 3, 3, scale=0.3)), pads=[1, 1, 1, 1]))
    block = b.Relu(b.Conv(stem, b.const(randn(32, 32, 3, 3, scale=0.1)), b.const(randn(32)), pads=[1, 1, 1, 1]))
    b.output(b.Relu(b.Add(b.Conv(block, b.const(randn(32, 32, 3, 3, scale=0.1)), pads=[1, 1, 1, 1]), stem)), "y")
    return b.build()


def test_3x3_convolutions_of_stride_1_run_as_winograds(tmp_path):
    from snipjit.runtime.implementations.winograd_launch import PackedWinograd
    graph, feeds = winograd_network(), {"x": randn(2, 3, 24, 14)}
    cm = check(graph, feeds)
    tiles = [s.kernel.tile for s in cm.plan if s.kind == "nhwc"]
    assert tiles == [0, 2, 2]   # (the 3-channel image: direct) 14 pixels wide: tiles of 2
    assert all(isinstance(s.kernel.packed, PackedWinograd) for s in cm.plan if s.kind == "nhwc" and s.kernel.tile)
    direct = snipjit.compile(graph, winograd=False)
    assert not any(s.kernel.tile for s in direct.plan if s.kind == "nhwc")
    np.testing.assert_allclose(cm.run(feeds)[0], direct.run(feeds)[0], rtol=1e-5, atol=1e-5)
    cm.save(tmp_path / "m.snipjit")   # the transformed weights are what the model keeps, and saves
    np.testing.assert_allclose(snipjit.load(tmp_path / "m.snipjit").run(feeds)[0], cm.run(feeds)[0], rtol=0, atol=0)


@pytest.mark.parametrize("vectors", [1, 2])
def test_a_regnet_block_s_grouped_conv_runs_on_the_grouped_window_kernel(level, vectors):
    """RegNetY's bottleneck: 1×1, a grouped 3×3 of as many channels in as out per group (one or two of the
    level's vectors; stride 2 and 1), squeeze-excitation, 1×1 with the residual; the grouped convs run on the
    window kernel's grouped variant with their bias and Relu (where it takes them), and agree with the
    reference."""
    from snipjit.runtime.implementations import window_launch
    group = level.f32_lanes * vectors
    c = 3 * group
    b = GraphBuilder()
    x = b.input("x", "f32", [2, 5, 15, 13])
    stem = b.Relu(b.Conv(x, b.const(randn(c, 5, 1, 1, scale=0.4)), b.const(randn(c))))
    grouped = b.Relu(b.Conv(stem, b.const(randn(c, group, 3, 3, scale=0.2)), b.const(randn(c)), group=3,
                            strides=[2, 2], pads=[1, 1, 1, 1]))
    again = b.Relu(b.Conv(grouped, b.const(randn(c, group, 3, 3, scale=0.2)), group=3, pads=[1, 1, 1, 1]))
    squeeze = b.Relu(b.Conv(b.GlobalAveragePool(again), b.const(randn(4, c, 1, 1, scale=0.4))))
    scaled = b.Mul(again, b.Sigmoid(b.Conv(squeeze, b.const(randn(c, 4, 1, 1, scale=0.4)))))
    y = b.Relu(b.Add(b.Conv(scaled, b.const(randn(c, c, 1, 1, scale=0.3))), grouped))
    b.output(y, "y")
    cm = check(b.build(), {"x": randn(2, 5, 15, 13)})
    grouped_convs = [s.kernel for s in cm.plan if s.kind == "nhwc" and s.ops[0] == "Conv"
                     and getattr(s.kernel, "group_width", 0)]
    taken = window_launch.grouped_width((c, group, 3, 3), 3, window_launch.Window((3, 3)))
    assert taken in (0, group) and (taken or vectors == 2)
    assert len(grouped_convs) == (2 if taken else 0) and all(k.group_width == group for k in grouped_convs)
