"""The compiled-graph cache: a second compile of an unchanged model file skips parsing and passes."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import snipjit
from snipjit.runtime.caches import model_cache


def make_model(path, scale=2.0):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    c = helper.make_tensor("c", TensorProto.FLOAT, [], [scale])
    g = helper.make_graph([helper.make_node("Mul", ["x", "c"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                          "g", [x], [y], [c])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SNIPJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SNIPJIT_CACHE", raising=False)
    return tmp_path / "cache"


def compile_in_new_process(model_path, cache_dir, forbid_loading: bool) -> str:
    """Compile in a fresh interpreter; with `forbid_loading`, parsing the model raises."""
    code = textwrap.dedent(f"""
        import numpy as np, snipjit, snipjit.compiler as c
        if {forbid_loading}:
            def no(*a, **k): raise AssertionError("the model was parsed again")
            c.load_graph = no
        cm = snipjit.compile({str(model_path)!r})
        print(cm.run({{"x": np.full((4, 8), -1.5, np.float32)}})[0].sum())
    """)
    env = {**os.environ, "SNIPJIT_CACHE_DIR": str(cache_dir)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_second_compile_in_a_new_process_does_not_parse_the_model(tmp_path, cache_dir):
    path = tmp_path / "m.onnx"
    make_model(path)
    first = compile_in_new_process(path, cache_dir, forbid_loading=False)
    assert compile_in_new_process(path, cache_dir, forbid_loading=True) == first == "0.0"


def test_a_copy_at_another_path_finds_the_entry(tmp_path, cache_dir):
    path = tmp_path / "m.onnx"
    make_model(path)
    first = compile_in_new_process(path, cache_dir, forbid_loading=False)
    copy = tmp_path / "elsewhere" / "copy.onnx"
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes())
    assert compile_in_new_process(copy, cache_dir, forbid_loading=True) == first


def test_external_data_is_part_of_the_key(tmp_path, cache_dir):
    import onnx
    path = tmp_path / "m.onnx"
    make_model(path, scale=2.0)
    model = onnx.load(path)
    model.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(np.array(2.0, np.float32), "c"))
    onnx.save(model, path, save_as_external_data=True, location="w.bin", size_threshold=0)
    x = np.ones((4, 8), np.float32)
    assert snipjit.compile(path).run({"x": x})[0][0, 0] == 2.0
    key, onnx_bytes = model_cache.model_key(path, {}), path.read_bytes()
    (tmp_path / "w.bin").write_bytes(np.float32(3.0).tobytes())   # other weights, the same .onnx file
    assert path.read_bytes() == onnx_bytes and model_cache.model_key(path, {}) != key
    assert snipjit.compile(path).run({"x": x})[0][0, 0] == 3.0


def test_a_changed_model_file_is_compiled_again(tmp_path, cache_dir):
    path = tmp_path / "m.onnx"
    make_model(path, scale=2.0)
    x = np.ones((4, 8), np.float32)
    assert snipjit.compile(path).run({"x": x})[0][0, 0] == 2.0
    make_model(path, scale=3.0)
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    assert snipjit.compile(path).run({"x": x})[0][0, 0] == 3.0


def test_options_are_part_of_the_key(tmp_path, cache_dir):
    path = tmp_path / "m.onnx"
    make_model(path)
    assert [s.kind for s in snipjit.compile(path).plan] == ["snippet"]
    assert [s.kind for s in snipjit.compile(path, fuse=False).plan] == ["reference", "reference"]


def test_a_damaged_entry_is_recompiled(tmp_path, cache_dir):
    path = tmp_path / "m.onnx"
    make_model(path)
    snipjit.compile(path)
    entries = list((cache_dir / "models").glob("*.pkl"))
    assert len(entries) == 1
    entries[0].write_bytes(b"garbage")
    x = np.ones((4, 8), np.float32)
    assert snipjit.compile(path).run({"x": x})[0][0, 0] == 2.0


def test_graphs_and_unkeyable_options_are_not_cached(tmp_path):
    g = snipjit.parse_graph("graph(x: f32[2]) -> [y] { [y] = Relu(x) }")
    assert model_cache.model_key(g, {}) is None
    assert model_cache.model_key(b"bytes", {"constant_inputs": {"w": np.zeros(2)}}) is None
    assert model_cache.model_key(b"bytes", {"fuse": False}) != model_cache.model_key(b"bytes", {})


def test_a_long_chain_pickles_and_keeps_its_producers(tmp_path, cache_dir):
    import pickle
    b = snipjit.GraphBuilder()
    v = b.input("x", "f32", [4])
    for _ in range(3000):   # deeper than Python's recursion limit if producers were followed
        v = b.Neg(v)
    b.output(v, "y")
    g = pickle.loads(pickle.dumps(b.build()))
    assert all(o.producer is n for n in g.nodes for o in n.outputs)
    g.validate()


def test_a_failing_cache_write_does_not_fail_the_compile(tmp_path, cache_dir, monkeypatch):
    path = tmp_path / "m.onnx"
    make_model(path)
    monkeypatch.setattr(model_cache.pickle_file.pickle, "dumps", lambda *a, **k: (_ for _ in ()).throw(RecursionError("deep")))
    assert snipjit.compile(path).run({"x": np.ones((4, 8), np.float32)})[0][0, 0] == 2.0
    assert not list((cache_dir / "models").glob("*.pkl"))


def test_large_arrays_come_back_mapped_read_only_and_a_truncated_entry_is_not_trusted(cache_dir):
    weights = np.arange(50_000, dtype=np.float32)
    model_cache.store("k", {"graph": [weights, np.ones(3)], "note": "x"})
    entry = model_cache.load("k")
    np.testing.assert_array_equal(entry["graph"][0], weights)
    assert not entry["graph"][0].flags.writeable and entry["note"] == "x"
    path = next((cache_dir / "models").glob("k.pkl"))
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - 1000])   # the last buffer cut short
    assert model_cache.load("k") is None


def test_the_key_covers_every_compiler_stage_source():
    """A change to any pass, op or code generator may change the compiled graph: their sources are all
    part of the fingerprint the key includes."""
    hashed = {p.relative_to(model_cache.PACKAGE_ROOT).parts[0] for p in model_cache.package_sources()}
    assert model_cache.PACKAGE_ROOT.name == "snipjit"
    assert {"passes", "ops", "frontend", "snippets", "targets", "runtime", "compiler.py"} <= hashed
