"""Convolutions, pools and their inverses (Col2Im, MaxUnpool): inference (static and symbolic spatial dims,
auto_pad, errors) and kernels against direct loop implementations of the definitions."""
import itertools

import numpy as np
import pytest

import snipjit.ops.nn  # noqa: F401  (registers the ops)
from snipjit import parse_graph
from snipjit.ops import OpError
from snipjit.ops.common import evaluate
from op_cases import output_types

INPUTS = ("x: f32[N,3,224,224], w7: f32[64,3,7,7], f: f32[N,16,H,W], w3: f32[16,16,3,3], dw: f32[16,1,3,3], "
          "x1: f32[2,4,10], w1: f32[6,2,3], v: f32[1,2,4,6,6], wv: f32[3,2,2,3,3], t: f32[1,8,5,5], "
          "wt: f32[8,4,4,4], b64: f32[64], b5: f32[5], h: f16[N,16,H,W], i: i32[1,1,4,4], p: f32[1,1,5,5]")
rng = np.random.default_rng(0)


def types(body):
    outs = body.strip().splitlines()[-1].split("]")[0].lstrip("[")
    g = parse_graph(f"graph({INPUTS}) -> [{outs}] {{\n{body}\n}}")
    return "; ".join(str(v.type) for v in g.outputs)


def run(op, *inputs, outputs=1, **attrs):
    res = evaluate(op, inputs, attrs, outputs=outputs)
    return res[0] if outputs == 1 else res


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ---- direct definitions (loops) ------------------------------------------------------------------------
def taps(out_pos, strides, dilations, begin, kernel):
    """Input coordinates read by the window at out_pos, with the kernel offsets."""
    for k in itertools.product(*(range(n) for n in kernel)):
        yield k, tuple(o * s - b + j * d for o, s, b, j, d in zip(out_pos, strides, begin, k, dilations))


def inside(pos, shape):
    return all(0 <= p < n for p, n in zip(pos, shape))


def naive_conv(x, w, b, out, strides, dilations, begin, group):
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    y = np.zeros((n, m) + tuple(out))
    for bn, oc in itertools.product(range(n), range(m)):
        g = oc // (m // group)
        for pos in itertools.product(*(range(o) for o in out)):
            acc = 0.0 if b is None else float(b[oc])
            for k, src in taps(pos, strides, dilations, begin, w.shape[2:]):
                if inside(src, x.shape[2:]):
                    acc += float(np.dot(x[(bn, slice(g * cg, (g + 1) * cg)) + src], w[(oc, slice(None)) + k]))
            y[(bn, oc) + pos] = acc
    return y


def naive_conv_transpose(x, w, b, out, strides, dilations, begin, group):
    n, c = x.shape[:2]
    cg, mg = c // group, w.shape[1]
    y = np.zeros((n, mg * group) + tuple(out))
    for bn, ic in itertools.product(range(n), range(c)):
        g = ic // cg
        for pos in itertools.product(*(range(s) for s in x.shape[2:])):
            for k, dst in taps(pos, strides, dilations, begin, w.shape[2:]):
                if inside(dst, out):
                    y[(bn, slice(g * mg, (g + 1) * mg)) + dst] += x[(bn, ic) + pos] * w[(ic, slice(None)) + k]
    if b is not None:
        y += b.reshape((-1,) + (1,) * len(out))
    return y


def naive_pool(x, kind, out, kernel, strides, begin, end, dilations=None, include_pad=False, order=2):
    dilations = dilations or [1] * len(kernel)
    y = np.zeros(x.shape[:2] + tuple(out))
    for bn, ch in itertools.product(*(range(s) for s in x.shape[:2])):
        for pos in itertools.product(*(range(o) for o in out)):
            vals, padded = [], 0
            for _, src in taps(pos, strides, dilations, begin, kernel):
                if inside(src, x.shape[2:]):
                    vals.append(float(x[(bn, ch) + src]))
                elif all(-b <= s < n + e for s, b, e, n in zip(src, begin, end, x.shape[2:])):
                    padded += 1
            y[(bn, ch) + pos] = {"max": lambda: max(vals),
                                 "avg": lambda: sum(vals) / (len(vals) + (padded if include_pad else 0)),
                                 "lp": lambda: sum(abs(v) ** order for v in vals) ** (1 / order)}[kind]()
    return y


# ---- inference -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("body, expected", [
    ("[y] = Conv(x, w7, b64) {strides=[2, 2], pads=[3, 3, 3, 3]}", "f32[N,64,112,112]"),
    ("[y] = Conv(f, w3) {auto_pad=\"SAME_UPPER\"}", "f32[N,16,H,W]"),
    ("[y] = Conv(f, w3) {pads=[1, 1, 1, 1]}", "f32[N,16,H,W]"),
    ("[y] = Conv(f, w3) {auto_pad=\"SAME_LOWER\", strides=[2, 2]}", "f32[N,16,?,?]"),
    ("[y] = Conv(f, w3)", "f32[N,16,?,?]"),
    ("[y] = Conv(f, dw) {group=16, pads=[1, 1, 1, 1]}", "f32[N,16,H,W]"),
    ("[y] = Conv(x1, w1) {group=2, dilations=[2]}", "f32[2,6,6]"),
    ("[y] = Conv(v, wv) {strides=[1, 2, 2], pads=[0, 1, 1, 1, 0, 0], kernel_shape=[2, 3, 3]}", "f32[1,3,4,3,3]"),
    ("[y] = Conv(x, w7) {auto_pad=\"VALID\", strides=[3, 3]}", "f32[N,64,73,73]"),
    ("[y] = ConvTranspose(t, wt) {strides=[2, 2], pads=[1, 1, 1, 1]}", "f32[1,4,10,10]"),
    ("[y] = ConvTranspose(t, wt) {strides=[2, 2], output_padding=[1, 0]}", "f32[1,4,13,12]"),
    ("[y] = ConvTranspose(t, wt) {strides=[2, 2], output_shape=[11, 9]}", "f32[1,4,11,9]"),
    ("[y] = ConvTranspose(t, wt) {strides=[2, 2], auto_pad=\"SAME_UPPER\"}", "f32[1,4,10,10]"),
    ("[y] = ConvTranspose(t, wt) {group=2}", "f32[1,8,8,8]"),
    ("[y] = ConvTranspose(f, w3) {strides=[2, 2]}", "f32[N,16,?,?]"),
    ("[y] = ConvTranspose(f, w3) {pads=[1, 1, 1, 1]}", "f32[N,16,H,W]"),
    ("[y, ix] = MaxPool(x) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]}",
     "f32[N,3,112,112]; i64[N,3,112,112]"),
    ("[y] = MaxPool(p) {kernel_shape=[2, 2], strides=[2, 2]}", "f32[1,1,2,2]"),
    ("[y] = MaxPool(p) {kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1}", "f32[1,1,3,3]"),
    ("[y] = AveragePool(p) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1}", "f32[1,1,3,3]"),
    ("[y] = AveragePool(f) {kernel_shape=[3, 3], auto_pad=\"SAME_UPPER\"}", "f32[N,16,H,W]"),
    ("[y] = LpPool(f) {kernel_shape=[2, 2], strides=[2, 2]}", "f32[N,16,?,?]"),
    ("[y] = GlobalAveragePool(f)", "f32[N,16,1,1]"),
    ("[y] = GlobalMaxPool(v)", "f32[1,2,1,1,1]"),
    ("[y] = GlobalLpPool(h)", "f16[N,16,1,1]"),
], ids=itertools.count())
def test_inference(body, expected):
    assert types(body) == expected


@pytest.mark.parametrize("body, message", [
    ("[y] = Conv(x, w3)", "input has 3 channels but weights expect 16 per group x 1 groups"),
    ("[y] = Conv(f, dw) {group=3}", "16 output channels do not split into 3 groups|input has 16 channels"),
    ("[y] = Conv(x, w7) {kernel_shape=[3, 3]}", r"kernel_shape \[3, 3\] does not match the weights"),
    ("[y] = Conv(x, w7, b5)", "bias of shape"),
    ("[y] = Conv(x, w1)", "differ in rank"),
    ("[y] = Conv(h, w3)", "input 1 has dtype f32"),
    ("[y] = Conv(i, w3)", "input 0 has dtype i32"),
    ("[y] = Conv(x, w7) {auto_pad=\"SAME\"}", "auto_pad must be one of"),
    ("[y] = Conv(x, w7) {strides=[2]}", "strides has 1 values but 2 are needed"),
    ("[y] = Conv(x, w7) {pads=[-1, 0, 0, 0]}", "non-negative"),
    ("[y] = ConvTranspose(t, wt) {output_padding=[2, 0]}", "output_padding"),
    ("[y] = MaxPool(p)", "required attribute 'kernel_shape'"),
    ("[y] = MaxPool(p) {kernel_shape=[2]}", "does not fit a 1-D window"),
    ("[y] = MaxPool(p) {kernel_shape=[2, 2], storage_order=2}", "storage_order=2 must be one of"),
    ("[y] = AveragePool(i) {kernel_shape=[2, 2]}", "input 0 has dtype i32"),
    ("[y] = GlobalAveragePool(b5)", "rank at least 3"),
], ids=itertools.count())
def test_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        types(body)


# ---- Conv / ConvTranspose kernels ----------------------------------------------------------------------
@pytest.mark.parametrize("x_shape, w_shape, strides, dilations, pads, group", [
    ((2, 3, 9), (4, 3, 3), [2], [1], [1, 0], 1),
    ((1, 4, 7, 6), (6, 2, 3, 2), [1, 2], [2, 1], [2, 0, 1, 1], 2),
    ((1, 3, 6, 6), (6, 1, 3, 3), [1, 1], [1, 1], [1, 1, 1, 1], 3),       # depthwise, multiplier 2
    ((1, 2, 4, 5, 4), (2, 2, 2, 3, 2), [1, 2, 1], [1, 1, 2], [0, 1, 0, 1, 0, 1], 1),
    ((1, 8, 5, 5), (4, 8, 1, 1), [1, 1], [1, 1], [0, 0, 0, 0], 1),      # 1x1: no im2col needed
])
def test_conv_matches_definition(x_shape, w_shape, strides, dilations, pads, group):
    x, w, b = randn(*x_shape), randn(*w_shape), randn(w_shape[0])
    d = len(strides)
    out = [(n + pads[i] + pads[i + d] - (k - 1) * dl - 1) // s + 1
           for i, (n, k, s, dl) in enumerate(zip(x_shape[2:], w_shape[2:], strides, dilations))]
    y = run("Conv", x, w, b, strides=strides, dilations=dilations, pads=pads, group=group)
    np.testing.assert_allclose(y, naive_conv(x, w, b, out, strides, dilations, pads[:d], group), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("auto_pad, pads", [("SAME_UPPER", [1, 1, 2, 2]), ("SAME_LOWER", [2, 2, 1, 1]),
                                            ("VALID", [0, 0, 0, 0])])
def test_conv_auto_pad_equals_explicit_pads(auto_pad, pads):
    x, w = randn(1, 2, 6, 6), randn(3, 2, 4, 4)      # even kernel: SAME pads are uneven
    y = run("Conv", x, w, auto_pad=auto_pad)
    np.testing.assert_allclose(y, run("Conv", x, w, pads=pads), rtol=1e-6)
    assert y.shape[2:] == ((6, 6) if auto_pad != "VALID" else (3, 3))


def test_conv_half_precision_and_errors():
    y = run("Conv", randn(1, 2, 5, 5, dtype=np.float16), randn(2, 2, 3, 3, dtype=np.float16))
    assert y.dtype == np.float16 and y.shape == (1, 2, 3, 3)
    with pytest.raises(OpError, match="smaller than the window extent"):
        run("Conv", randn(1, 2, 2, 2), randn(2, 2, 3, 3))


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((1, 2, 4), (2, 3, 3), dict(strides=[2], output_padding=[1])),
    ((2, 2, 3, 3), (2, 2, 2, 3), dict(strides=[2, 1], dilations=[2, 1], pads=[1, 0, 0, 1])),
    ((1, 4, 3, 2), (4, 1, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], group=2)),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], pads=[4, 0, 0, 0])),        # pads beyond the kernel
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[3, 2], output_shape=[10, 6], auto_pad="SAME_UPPER")),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[3, 2], output_shape=[10, 6])),
])
def test_conv_transpose_matches_definition(x_shape, w_shape, attrs):
    x, w = randn(*x_shape), randn(*w_shape)
    b = randn(w_shape[1] * attrs.get("group", 1))
    d = len(x_shape) - 2
    s = attrs.get("strides", [1] * d)
    dil = attrs.get("dilations", [1] * d)
    full = [st * (n - 1) + op + (k - 1) * dl + 1 for st, n, op, k, dl in
            zip(s, x_shape[2:], attrs.get("output_padding", [0] * d), w_shape[2:], dil)]
    if "output_shape" in attrs:
        out = attrs["output_shape"]
        total = [f - o for f, o in zip(full, out)]
        begin = [t // 2 if attrs.get("auto_pad") == "SAME_UPPER" else t - t // 2 for t in total]
    else:
        pads = attrs.get("pads", [0] * 2 * d)
        begin, out = pads[:d], [f - pads[i] - pads[i + d] for i, f in enumerate(full)]
    y = run("ConvTranspose", x, w, b, **attrs)
    expected = naive_conv_transpose(x, w, b, out, s, dil, begin, attrs.get("group", 1))
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


# ---- pools ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, attrs", [
    ("max", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("max", dict(kernel_shape=[2, 3], strides=[2, 2], dilations=[2, 1], ceil_mode=1)),
    ("avg", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    ("avg", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1)),
    ("avg", dict(kernel_shape=[2, 2], auto_pad="SAME_LOWER", count_include_pad=1)),
    ("lp", dict(kernel_shape=[2, 2], strides=[1, 2], pads=[0, 1, 0, 1], p=3)),
])
def test_pools_match_definition(kind, attrs):
    x = randn(2, 3, 7, 6)
    op = {"max": "MaxPool", "avg": "AveragePool", "lp": "LpPool"}[kind]
    y = run(op, x, **attrs)
    k = attrs["kernel_shape"]
    s, dil = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    if attrs.get("auto_pad") == "SAME_LOWER":
        begin, end = [1, 1], [0, 0]
    else:
        pads = attrs.get("pads", [0] * 4)
        begin, end = pads[:2], pads[2:]
    out = []
    for i in range(2):
        if attrs.get("auto_pad"):
            out.append(-(-x.shape[2 + i] // s[i]))
            continue
        span = x.shape[2 + i] + begin[i] + end[i] - (k[i] - 1) * dil[i] - 1
        n = (-(-span // s[i]) if attrs.get("ceil_mode") else span // s[i]) + 1
        out.append(n - 1 if (n - 1) * s[i] >= x.shape[2 + i] + begin[i] else n)
    expected = naive_pool(x, kind, out, k, s, begin, end, dil, bool(attrs.get("count_include_pad")), attrs.get("p", 2))
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_indices(storage_order):
    x = randn(2, 3, 5, 4)
    y, idx = run("MaxPool", x, outputs=2, kernel_shape=[2, 3], pads=[1, 1, 0, 1], storage_order=storage_order)
    assert idx.dtype == np.int64 and idx.shape == y.shape
    flat = x.transpose(0, 1, 3, 2).reshape(-1) if storage_order else x.reshape(-1)
    np.testing.assert_array_equal(flat[idx], y)


def test_max_pool_integer_and_ties():
    x = np.array([[[[1, 5, 5], [-128, 5, 0]]]], np.int8)
    y, idx = run("MaxPool", x, outputs=2, kernel_shape=[2, 2], pads=[0, 0, 1, 1])
    assert y.dtype == np.int8 and y.tolist() == [[[[5, 5, 5], [5, 5, 0]]]]
    assert idx.tolist() == [[[[1, 1, 2], [4, 4, 5]]]]    # the first maximum of each window


def test_global_pools():
    x = randn(2, 3, 4, 5)
    np.testing.assert_allclose(run("GlobalAveragePool", x), x.mean(axis=(2, 3), keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(run("GlobalMaxPool", x), x.max(axis=(2, 3), keepdims=True))
    np.testing.assert_allclose(run("GlobalLpPool", x, p=1), np.abs(x).sum(axis=(2, 3), keepdims=True), rtol=1e-5)
    y = run("GlobalAveragePool", randn(1, 2, 3, dtype=np.float16))
    assert y.dtype == np.float16 and y.shape == (1, 2, 1)


# ---- Col2Im, MaxUnpool -------------------------------------------------------------------------------------
INVERSE_INPUTS = ("img: f32[N,C,H,W], sz: i64[4], cols: f32[N,12,L], idx: i64[N,C,2,2], pool: f32[N,C,2,2], "
                  "wi: i64[B]")


@pytest.mark.parametrize("body, expected", [
    ("const s: i64[2] = [5, 5]\nconst k: i64[2] = [2, 2]\n[y] = Col2Im(cols, s, k)", "f32[N,3,5,5]"),
    ("const k: i64[2] = [2, 2]\n[y] = Col2Im(cols, sz, k)", "f32[N,3,?,?,?,?]"),
    ("[y] = Col2Im(cols, wi, wi)", "f32[*]"),
    ("[y] = MaxUnpool(pool, idx) {kernel_shape=[2, 2], strides=[2, 2]}", "f32[N,C,4,4]"),
    ("[y] = MaxUnpool(img, idx) {kernel_shape=[3, 3], pads=[1, 1, 1, 1]}", "f32[N,C,H,W]"),
    ("[y] = MaxUnpool(img, idx) {kernel_shape=[3, 3], strides=[2, 2]}", "f32[N,C,?,?]"),
    ("const s: i64[4] = [1, 1, 5, 5]\n[y] = MaxUnpool(pool, idx, s) {kernel_shape=[2, 2], strides=[2, 2]}",
     "f32[1,1,5,5]"),
    ("[y] = MaxUnpool(pool, idx, sz) {kernel_shape=[2, 2]}", "f32[?,?,?,?]"),
])
def test_col2im_max_unpool_inference(body, expected):
    assert output_types(body, INVERSE_INPUTS) == expected


@pytest.mark.parametrize("body, message", [
    ("const s: i64[2] = [5, 5]\nconst k: i64[2] = [5, 5]\n[y] = Col2Im(cols, s, k)", "not a multiple"),
    ("[y] = MaxUnpool(pool, idx) {kernel_shape=[2]}", "2 spatial dims but kernel_shape has 1"),
])
def test_col2im_max_unpool_inference_errors(body, message):
    with pytest.raises(OpError, match=message):
        output_types(body, INVERSE_INPUTS)


def naive_col2im(cols, image, block, strides, dilations, pads):
    n, c = cols.shape[0], cols.shape[1] // int(np.prod(block))
    out = [(i + pads[k] + pads[k + len(image)] - (block[k] - 1) * dilations[k] - 1) // strides[k] + 1
           for k, i in enumerate(image)]
    y = np.zeros((n, c, *image))
    cols = cols.reshape(n, c, *block, *out)
    for k in itertools.product(*map(range, block)):
        for o in itertools.product(*map(range, out)):
            pos = tuple(oi * s - p + ki * d for oi, s, p, ki, d in zip(o, strides, pads, k, dilations))
            if all(0 <= q < dim for q, dim in zip(pos, image)):
                y[(slice(None), slice(None)) + pos] += cols[(slice(None), slice(None)) + k + o]
    return y


@pytest.mark.parametrize("image, block, attrs", [
    ([5, 5], [2, 2], {}),
    ([5, 6], [2, 3], {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 1, 2]}),
    ([3, 4, 4], [1, 2, 2], {"strides": [1, 2, 2]}),
])
def test_col2im_sums_blocks_into_the_image(image, block, attrs):
    strides, dilations = attrs.get("strides", [1] * len(image)), attrs.get("dilations", [1] * len(image))
    pads = attrs.get("pads", [0] * 2 * len(image))
    out = [(i + pads[k] + pads[k + len(image)] - (block[k] - 1) * dilations[k] - 1) // strides[k] + 1
           for k, i in enumerate(image)]
    cols = randn(2, 2 * int(np.prod(block)), int(np.prod(out)))
    y = run("Col2Im", cols, np.array(image, np.int64), np.array(block, np.int64), **attrs)
    np.testing.assert_allclose(y, naive_col2im(cols, image, block, strides, dilations, pads), rtol=1e-5, atol=1e-6)


def test_col2im_checks_the_number_of_blocks():
    with pytest.raises(OpError, match="input has 3 blocks"):
        run("Col2Im", randn(1, 4, 3), np.array([3, 3], np.int64), np.array([2, 2], np.int64))


def test_max_unpool_puts_values_back_at_their_pooled_positions():
    x = randn(1, 2, 4, 4)
    pooled, indices = evaluate("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]}, outputs=2)
    y = run("MaxUnpool", pooled, indices, kernel_shape=[2, 2], strides=[2, 2])
    expected = np.where(x == np.repeat(np.repeat(pooled, 2, axis=2), 2, axis=3), x, 0)
    np.testing.assert_array_equal(y, expected)
    bigger = run("MaxUnpool", pooled, indices, np.array([1, 2, 5, 6], np.int64), kernel_shape=[2, 2], strides=[2, 2])
    assert bigger.shape == (1, 2, 5, 6)
    np.testing.assert_array_equal(bigger[:, :, :4, :4], expected)
    assert not bigger[:, :, 4:].any() and not bigger[:, :, :, 4:].any()
    with pytest.raises(OpError, match="outside the unpooled tensor"):
        run("MaxUnpool", pooled, indices + 100, kernel_shape=[2, 2], strides=[2, 2])
