"""Saved compiled models: `cm.save` / `snipjit.load` / pickle give the same outputs; the weights kernels
hold in packed form are rebuilt exactly; a fresh process loads a saved model without generating code;
another CPU, ISA level or snipjit compiles again with a warning; damaged files raise clear errors."""
import pickle
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import snipjit
from snipjit import ArtifactError, ArtifactWarning, GraphBuilder
from snipjit.compiler import _run_passes
from snipjit.ir.graph import is_held_placeholder
from snipjit.runtime.caches import artifact
from snipjit.runtime.implementations import gemm_launch

pytestmark = pytest.mark.skipif(not gemm_launch.available(), reason="no LLVM JIT")

rng = np.random.default_rng(0)


def randn(*shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def dense_model():
    """MatMul and Gemm (transB) on constant weights: both held packed by their kernels."""
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 40])
    h = b.Relu(b.Add(b.MatMul(x, b.const(randn(40, 70))), b.const(randn(70))))
    y = b.Gemm(h, b.const(randn(33, 70)), b.const(randn(33)), transB=1)
    b.output(b.Softmax(b.Mul(y, b.const(np.float32(0.5))), axis=-1), "y")
    return b.build()


def conv_model():
    """Channels-last convolutions of every packed kind: grouped (on the GEMM, and of groups one vector wide on
    the window kernel), depthwise, strided and dilated ConvTranspose."""
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 8, 11, 11])
    y = b.Relu(b.Conv(x, b.const(randn(16, 4, 3, 3)), b.const(randn(16)), group=2, pads=[1, 1, 1, 1]))
    y = b.Conv(y, b.const(randn(16, 1, 5, 5)), group=16, pads=[2, 2, 2, 2])
    y = b.Conv(y, b.const(randn(16, 4, 3, 3)), b.const(randn(16)), group=4, pads=[1, 1, 1, 1])
    y = b.ConvTranspose(y, b.const(randn(16, 6, 3, 3)), strides=[2, 2])
    y = b.ConvTranspose(y, b.const(randn(6, 5, 3, 2)), dilations=[2, 2])
    b.output(y, "y")
    return b.build()


def loop_model():
    """A Loop whose body (a product by constant weights and a fused elementwise chain) is a program of its own."""
    from onnx import TensorProto, helper, numpy_helper
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h", "w"], ["p"]), helper.make_node("Tanh", ["p"], ["t"]),
         helper.make_node("Mul", ["t", "half"], ["h2"]), helper.make_node("Identity", ["cond"], ["go"])],
        "body", [vi("i", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, []), vi("h", TensorProto.FLOAT, ["n", 40])],
        [vi("go", TensorProto.BOOL, []), vi("h2", TensorProto.FLOAT, ["n", 40])],
        [numpy_helper.from_array(np.float32(0.5), "half")])
    graph = helper.make_graph([helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body)], "g",
                              [vi("x", TensorProto.FLOAT, ["n", 40])], [vi("y", TensorProto.FLOAT, ["n", 40])],
                              [numpy_helper.from_array(np.int64(3), "trips"), numpy_helper.from_array(randn(40, 40), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


MODELS = {"dense": (dense_model, [40]), "conv": (conv_model, [8, 11, 11]), "loop": (loop_model, [40])}


@pytest.fixture(params=sorted(MODELS))
def model(request):
    make, shape = MODELS[request.param]
    return make(), shape


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SNIPJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SNIPJIT_CACHE", raising=False)
    return tmp_path / "cache"


def test_held_weights_are_rebuilt_exactly(model):
    graph, _ = model
    if not isinstance(graph, snipjit.Graph):
        pytest.skip("the loop model's weights are its body's")
    passed, _, _ = _run_passes(graph, None, {})
    cm = snipjit.compile(graph)
    released = [v.name for v in cm.graph.constants if is_held_placeholder(v.data)]
    assert released   # the kernels hold these in their own form
    rebuilt = cm._artifact().graph_to_build(packed=False)   # what a load on another CPU compiles
    restored = {v.name: v.data for v in rebuilt.constants}
    for v in passed.constants:
        np.testing.assert_array_equal(restored[v.name], v.data, err_msg=v.name)


def test_save_load_and_pickle_give_the_same_outputs(model, tmp_path):
    graph, shape = model
    cm = snipjit.compile(graph)
    x = randn(2, *shape)
    want = cm.run({"x": x})[0]
    cm.save(tmp_path / "m.snipjit")
    for loaded in (snipjit.load(tmp_path / "m.snipjit"), pickle.loads(pickle.dumps(cm))):
        np.testing.assert_array_equal(loaded.run({"x": x})[0], want)
        x3 = randn(3, *shape)   # another batch size than the one run before saving
        np.testing.assert_array_equal(loaded.run({"x": x3})[0], cm.run({"x": x3})[0])


def test_execution_settings_are_kept_unless_given(tmp_path):
    cm = snipjit.compile(dense_model(), num_threads=1, streams=2)
    cm.save(tmp_path / "m.snipjit")
    loaded = snipjit.load(tmp_path / "m.snipjit")
    assert (loaded.settings.num_threads, loaded.settings.streams) == (1, 2)
    assert snipjit.load(tmp_path / "m.snipjit", streams=1).settings.streams == 1
    assert pickle.loads(pickle.dumps(cm)).settings.num_threads == 1


LOAD_WITHOUT_CODEGEN = textwrap.dedent("""
    import sys, time, numpy as np
    from snipjit.targets.llvm import jit, objects
    from snipjit.runtime.implementations import conv_launch, conv_transpose_launch, gemm_launch, window_launch
    def refuse(*a, **k):
        raise AssertionError("code was generated or weights packed while loading a saved model")
    jit.optimized_module = objects.optimized_module = refuse
    if sys.argv[4] == "no packing":
        gemm_launch.pack = conv_launch.pack_conv = window_launch.pack_depthwise = window_launch.pack_grouped = refuse
        conv_transpose_launch.pack_conv_transpose = refuse
    import snipjit
    cm = snipjit.load(sys.argv[1])
    x = np.load(sys.argv[2])
    np.save(sys.argv[3], cm.run({"x": x})[0])
""")


def test_a_fresh_process_loads_without_generating_code(model, tmp_path):
    graph, shape = model
    cm = snipjit.compile(graph)
    x = randn(2, *shape)
    cm.save(tmp_path / "m.snipjit", feeds={"x": x})   # kernels chosen for these shapes are in it too
    want = cm.run({"x": x})[0]
    np.save(tmp_path / "x.npy", x)
    env = {"SNIPJIT_CACHE_DIR": str(tmp_path / "empty-cache"), "SNIPJIT_COMPILE_WORKERS": "0", "PATH": "/usr/bin:/bin"}
    packing = "no packing" if isinstance(graph, snipjit.Graph) else "bodies pack their weights"
    done = subprocess.run([sys.executable, "-c", LOAD_WITHOUT_CODEGEN, str(tmp_path / "m.snipjit"),
                           str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), packing],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want)


def test_kernels_that_do_not_take_the_packed_weights_are_not_used(model, tmp_path, monkeypatch):
    graph, shape = model
    if not isinstance(graph, snipjit.Graph):
        pytest.skip("the loop model's weights are its body's")
    cm = snipjit.compile(graph)
    x = randn(2, *shape)
    want = cm.run({"x": x})[0]
    cm.save(tmp_path / "m.snipjit")
    from snipjit.runtime.implementations import held_weights
    monkeypatch.setattr(held_weights, "offered", lambda *args: None)   # they pack the placeholders
    with pytest.warns(ArtifactWarning, match="did not all take the weights packed for them"):
        loaded = snipjit.load(tmp_path / "m.snipjit")
    np.testing.assert_allclose(loaded.run({"x": x})[0], want, rtol=1e-5, atol=1e-5)


def test_a_weight_two_steps_hold_differently(tmp_path):
    """One square weight read by a MatMul (packed as it is) and a Gemm with transB (packed transposed)."""
    b = GraphBuilder()
    x = b.input("x", "f32", ["n", 24])
    w = b.const(randn(24, 24))
    b.output(b.Add(b.MatMul(x, w), b.Gemm(x, w, transB=1)), "y")
    cm = snipjit.compile(b.build())
    x = randn(3, 24)
    want = cm.run({"x": x})[0]
    cm.save(tmp_path / "m.snipjit")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = snipjit.load(tmp_path / "m.snipjit")
    np.testing.assert_allclose(loaded.run({"x": x})[0], want, rtol=1e-5, atol=1e-5)


def test_loaded_weights_stay_in_the_file(tmp_path):
    cm = snipjit.compile(dense_model())
    cm.save(tmp_path / "m.snipjit")
    loaded = snipjit.load(tmp_path / "m.snipjit")
    packed = [f.packed.data for forms in loaded.program.held_weights().values() for f in forms]
    assert packed and all(not a.flags.writeable for a in packed)   # mapped from the file, not copied


def count_compiles(monkeypatch) -> list:
    from snipjit.targets.llvm import objects
    calls, real = [], objects.optimized_module
    monkeypatch.setattr(objects, "optimized_module", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    return calls


def test_another_cpu_compiles_again_with_a_warning(tmp_path, cache_dir, monkeypatch):
    cm = snipjit.compile(conv_model())
    x = randn(1, 8, 11, 11)
    want = cm.run({"x": x})[0]
    here = artifact.Machine.here()
    other = artifact.Machine("othercpu", here.features + ",+madeup", "avx9", here.version, here.compiler)
    with monkeypatch.context() as m:
        m.setattr(artifact.Machine, "here", staticmethod(lambda: other))
        cm.save(tmp_path / "m.snipjit")
    from snipjit.runtime.caches import kernel_cache, object_cache
    monkeypatch.setattr(kernel_cache, "_offered", {})   # as a new process: nothing loaded, nothing offered
    monkeypatch.setattr(kernel_cache, "_cache", None)
    monkeypatch.setattr(object_cache, "_loaded", {})
    compiles = count_compiles(monkeypatch)
    with pytest.warns(ArtifactWarning, match="built for othercpu .avx9., this CPU is"):
        loaded = snipjit.load(tmp_path / "m.snipjit")
    np.testing.assert_allclose(loaded.run({"x": x})[0], want, rtol=1e-5, atol=1e-5)
    assert compiles   # its kernels came from this process's compiler, not from the file


def test_another_snipjit_version_compiles_again(tmp_path, monkeypatch):
    cm = snipjit.compile(dense_model())
    here = artifact.Machine.here()
    with monkeypatch.context() as m:
        m.setattr(artifact.Machine, "here", staticmethod(lambda: artifact.Machine(
            here.cpu, here.features, here.level, "0.0.1", here.compiler)))
        cm.save(tmp_path / "m.snipjit")
    with pytest.warns(ArtifactWarning, match="built by snipjit 0.0.1"):
        snipjit.load(tmp_path / "m.snipjit")


def test_a_lower_isa_level_never_runs_the_saved_code(tmp_path, monkeypatch):
    from snipjit.targets import isa
    if isa.current().level.name == "sse":
        pytest.skip("the host's level is the lowest already")
    cm = snipjit.compile(dense_model())
    x = randn(5, 40)
    want = cm.run({"x": x})[0]
    cm.save(tmp_path / "m.snipjit")
    monkeypatch.setenv(isa.ENV_VAR, "sse")
    with pytest.warns(ArtifactWarning, match="this CPU is .* \\(sse\\)"):
        loaded = snipjit.load(tmp_path / "m.snipjit")
    np.testing.assert_allclose(loaded.run({"x": x})[0], want, rtol=1e-5, atol=1e-5)


def test_no_warning_on_the_same_machine(tmp_path):
    snipjit.compile(dense_model()).save(tmp_path / "m.snipjit")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        snipjit.load(tmp_path / "m.snipjit")


def test_damaged_truncated_and_foreign_files_raise(tmp_path):
    path = tmp_path / "m.snipjit"
    snipjit.compile(dense_model()).save(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ArtifactError, match="truncated"):
        snipjit.load(path)
    damaged = bytearray(data)
    damaged[-100] ^= 1
    path.write_bytes(bytes(damaged))
    with pytest.raises(ArtifactError, match="damaged"):
        snipjit.load(path)
    with pytest.raises(ArtifactError, match="not a SNIPJITA1 file"):
        snipjit.load(b"an ONNX model, say")
    path.write_bytes(b"")
    with pytest.raises(ArtifactError, match="too short"):
        snipjit.load(path)
    with pytest.raises(FileNotFoundError):
        snipjit.load(tmp_path / "missing.snipjit")
