"""The nine "light" models shipped with onnx (`onnx/backend/test/data/light`) run through snipjit.compile.

Each model ships only its expected output (`<model>_output_0.pb`). onnx's backend test runner computes
it from a fixed input, `Runner.generate_dummy_data(input, seed=0, random=False)`: the float32 tensor
`arange(n).reshape(shape) / n` (unset dims taken as 1); we feed the same. The weights are made inside the
models by ConstantOfShape nodes (every weight and bias is 0.02), so eight of the nine expected outputs are
a uniform softmax (all 0.001) that any finite logits reproduce; only densenet121 (no final Softmax) checks
values. So the softmax models are also checked on their logits (the Softmax input, where all 1000 values
are equal): the values below were computed once with onnxruntime 1.31 (CPU) on the same input.
"""
from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx.backend.test.runner import Runner

import snipjit

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = sorted(os.path.basename(p)[:-len(".onnx")] for p in glob.glob(os.path.join(LIGHT_DIR, "*.onnx")))

LOGITS = {  # model: (the final Softmax's input, its value)
    "light_bvlc_alexnet": ("r24", 3641264308224.0),
    "light_inception_v1": ("r143", 1.190478007061908e+21),
    "light_inception_v2": ("r507", 0.46919548511505127),
    "light_resnet50": ("r174", 1.2840588270865744e+19),
    "light_shufflenet": ("r201", 3.4927978515625),
    "light_squeezenet": ("r65", 9475685376.0),
    "light_vgg19": ("r46", 3.7195767808239818e+31),
    "light_zfnet512": ("r20", 4107599085568.0),
}


def test_all_nine_light_models_are_found():
    assert len(MODELS) == 9, MODELS


def model_input(model: onnx.ModelProto) -> tuple[str, np.ndarray]:
    """The model's single non-initializer input and the array the runner feeds it."""
    inits = {t.name for t in model.graph.initializer}
    (vi,) = [vi for vi in model.graph.input if vi.name not in inits]
    return vi.name, Runner.generate_dummy_data(vi, seed=0, name=model.graph.name, random=False)


@pytest.mark.parametrize("name", MODELS)
def test_light_model(name):
    model = onnx.load(os.path.join(LIGHT_DIR, name + ".onnx"))
    expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT_DIR, name + "_output_0.pb")))
    input_name, x = model_input(model)
    assert x.shape == (1, 3, 224, 224) and x.dtype == np.float32
    if name in LOGITS:
        logits, value = LOGITS[name]
        assert model.graph.node[-1].op_type == "Softmax" and model.graph.node[-1].input[0] == logits
        model.graph.output.append(onnx.helper.make_empty_tensor_value_info(logits))

    cm = snipjit.compile(model)
    assert cm.input_names == [input_name]
    got, *rest = cm.run({input_name: x})

    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-5)
    if rest:
        assert rest[0].dtype == np.float32 and rest[0].shape[:2] == (1, 1000)
        np.testing.assert_allclose(rest[0], np.full_like(rest[0], value), rtol=1e-3)
