"""Scale-out on Ray (`snipjit.integrations.ray`): batch inference over a Ray Dataset with a pool of actors, a Ray
Serve deployment called through its handle and over HTTP, and a compiled model passed through the object store,
each matching a direct run of the tiny BERT fixture.

Slow on purpose (about 20 s on 2 cores): the tests start a real local Ray instance (`ray.init(num_cpus=2)`),
Ray Data actors and Ray Serve; the checks of the predictor's errors run in this process and take no time."""
import gc
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the Ray integration needs ray (pip install -e '.[ray]')")
pytest.importorskip("ray.data", reason="the Ray integration needs ray[data] (pip install -e '.[ray]')")
serve = pytest.importorskip("ray.serve", reason="the Ray integration needs ray[serve] (pip install -e '.[ray]')")

import snipjit  # noqa: E402
from snipjit.integrations.ray import (SnipjitPredictor, predict_dataset, snipjit_deployment,  # noqa: E402
                                      model_input_types)

BERT = Path(__file__).resolve().parents[1] / "data" / "tiny_bert.onnx"
ROWS, SEQUENCE = 16, 12
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(scope="module")
def feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    mask = np.ones((ROWS, SEQUENCE), np.int64)
    for row, length in enumerate(rng.integers(4, SEQUENCE + 1, ROWS)):
        mask[row, length:] = 0
    return {"input_ids": rng.integers(0, 100, (ROWS, SEQUENCE), dtype=np.int64), "attention_mask": mask}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, feeds) -> str:
    """The model saved with the kernels of the shapes it will run: batches of 4 rows and of all 16."""
    path = tmp_path_factory.mktemp("ray") / "tiny_bert.snipjit"
    snipjit.compile(BERT).save(path, feeds=[{name: value[:4] for name, value in feeds.items()}, feeds])
    return str(path)


@pytest.fixture(scope="module")
def expected(feeds) -> dict[str, np.ndarray]:
    model = snipjit.compile(BERT)
    return dict(zip(model.output_names, model.run(feeds)))


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, logging_level="warning")
    yield
    ray.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_outputs(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert set(got) >= set(expected)
    for name, want in expected.items():
        np.testing.assert_allclose(np.asarray(got[name]), want, rtol=RTOL, atol=ATOL, err_msg=name)


def test_dataset_map_batches_on_two_actors_matches_a_direct_run(cluster, artifact, feeds, expected):
    items = [{"row": i, "input_ids": feeds["input_ids"][i], "attention_mask": feeds["attention_mask"][i]}
             for i in range(ROWS)]
    ds = ray.data.from_items(items, override_num_blocks=4)
    out = predict_dataset(ds, artifact, num_threads=1, concurrency=2, batch_size=4)
    rows = sorted(out.take_all(), key=lambda r: r["row"])
    assert [r["row"] for r in rows] == list(range(ROWS))
    got = {name: np.stack([r[name] for r in rows]) for name in [*expected, "input_ids"]}
    assert_outputs(got, expected)
    np.testing.assert_array_equal(got["input_ids"], feeds["input_ids"])   # input columns pass through


def wait_for_cpus(cpus: int, seconds: float = 30) -> None:
    """Wait until `cpus` CPUs of the cluster are free: a Ray Data actor pool gives its CPUs back only once
    nothing refers to its dataset any more."""
    gc.collect()
    deadline = time.monotonic() + seconds
    while ray.available_resources().get("CPU", 0) < cpus:
        assert time.monotonic() < deadline, f"Ray still holds CPUs: {ray.available_resources()}"
        time.sleep(0.2)


def test_serve_deployment_through_its_handle_and_over_http_matches_a_direct_run(cluster, artifact, feeds, expected):
    requests = pytest.importorskip("requests")
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        handle = serve.run(snipjit_deployment(artifact, num_threads=1), name="snipjit", route_prefix="/bert")
        assert_outputs(handle.predict.remote(feeds).result(timeout_s=60), expected)

        body = {"inputs": {name: value.tolist() for name, value in feeds.items()}}
        response = requests.post(f"http://127.0.0.1:{port}/bert", json=body, timeout=60)
        assert response.status_code == 200, response.text
        assert_outputs(response.json()["outputs"], expected)

        response = requests.post(f"http://127.0.0.1:{port}/bert", json={"inputs": {"input_ids": [[1, 2]]}},
                                 timeout=60)
        assert response.status_code == 400 and "attention_mask" in response.json()["error"]
        response = requests.post(f"http://127.0.0.1:{port}/bert", json={"inputs": {
            "input_ids": [[1.5, 2.0]], "attention_mask": [[1, 1]]}}, timeout=60)
        assert response.status_code == 400 and "float64" in response.json()["error"]
    finally:
        serve.shutdown()


def test_a_compiled_model_goes_through_the_object_store_into_a_remote_task(cluster, feeds, expected):
    model = snipjit.compile(BERT)

    @ray.remote(num_cpus=1)
    def run(model, feeds):
        return dict(zip(model.output_names, model.run(feeds)))

    assert_outputs(ray.get(run.remote(ray.put(model), feeds), timeout=60), expected)


def test_actors_default_to_the_cpus_ray_gave_them(cluster, artifact):
    @ray.remote(num_cpus=2)
    def threads(artifact):
        return SnipjitPredictor(artifact).model.settings.num_threads

    wait_for_cpus(2)
    assert ray.get(threads.remote(artifact), timeout=60) == 2


def test_importing_snipjit_and_the_integration_does_not_import_ray():
    code = "import sys, snipjit, snipjit.integrations.ray; print('ray' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_a_missing_column_fails_with_the_input_and_the_columns_present_through_ray(cluster, artifact, feeds):
    """Last of the tests on the cluster: the failed run's actor keeps its CPU while anything refers to the error,
    and under pytest something does (its log capture, it seems) until the test is over."""
    ds = ray.data.from_numpy(feeds["input_ids"]).rename_columns({"data": "input_ids"})
    with pytest.raises(Exception, match=r"model input 'attention_mask' needs column 'attention_mask'.*\['input_ids'\]"):
        predict_dataset(ds, artifact, concurrency=1).take_all()


# The predictor itself, in this process: its errors name what is wrong and what the batch has.

@pytest.fixture(scope="module")
def predictor(artifact) -> SnipjitPredictor:
    return SnipjitPredictor(artifact, num_threads=1)


def test_missing_column_names_the_input_and_the_columns_present(predictor, feeds):
    with pytest.raises(snipjit.FeedError, match=r"model input 'attention_mask' needs column 'attention_mask'.*"
                                                r"columns are \['ids', 'input_ids'\]"):
        predictor({"input_ids": feeds["input_ids"], "ids": feeds["input_ids"]})


def test_renamed_inputs_selected_outputs_and_converted_dtypes(artifact, feeds, expected):
    predictor = SnipjitPredictor(artifact, num_threads=1, input_columns={"input_ids": "ids"},
                                 output_columns={"pooler_output": "pooled"})
    batch = {"ids": feeds["input_ids"].astype(np.int32), "attention_mask": feeds["attention_mask"]}
    out = predictor(batch)
    assert sorted(out) == ["attention_mask", "ids", "pooled"]
    np.testing.assert_allclose(out["pooled"], expected["pooler_output"], rtol=RTOL, atol=ATOL)


def object_column(cells: list[np.ndarray]) -> np.ndarray:
    """A column as Ray Data hands over cells of varying shapes: a numpy array of dtype object, a cell each."""
    column = np.empty(len(cells), dtype=object)
    for i, cell in enumerate(cells):
        column[i] = cell
    return column


def test_columns_of_array_cells_are_stacked_and_ragged_ones_refused(predictor, feeds, expected):
    cells = {name: object_column(list(value)) for name, value in feeds.items()}
    np.testing.assert_allclose(predictor(cells)["pooler_output"], expected["pooler_output"], rtol=RTOL, atol=ATOL)
    ragged = dict(cells, input_ids=object_column([row[: 4 + i % 3] for i, row in enumerate(feeds["input_ids"])]))
    with pytest.raises(snipjit.FeedError, match="column 'input_ids'.*cells of different shapes"):
        predictor(ragged)


def test_wrong_dtype_and_rank_name_the_column_and_the_model_input(predictor, feeds):
    with pytest.raises(snipjit.FeedError, match=r"column 'input_ids' \(model input 'input_ids'\) has dtype float32"):
        predictor(dict(feeds, input_ids=feeds["input_ids"].astype(np.float32)))
    with pytest.raises(snipjit.FeedError, match=r"column 'attention_mask'.*rank 1.*axis 0 is the rows"):
        predictor(dict(feeds, attention_mask=feeds["attention_mask"][:, 0]))


def test_options_naming_nothing_in_the_model_are_refused(artifact):
    inputs = r"\['input_ids', 'attention_mask'\]"
    with pytest.raises(ValueError, match=rf"input_columns names \['ids'\].*inputs are {inputs}"):
        SnipjitPredictor(artifact, num_threads=1, input_columns={"ids": "x"})
    with pytest.raises(ValueError, match=r"output_columns names \['logits'\]"):
        SnipjitPredictor(artifact, num_threads=1, output_columns=["logits"])


def test_input_types_come_from_the_model(predictor):
    assert {n: str(t) for n, t in model_input_types(predictor.model).items()} == {
        "input_ids": "i64[batch,sequence]", "attention_mask": "i64[batch,sequence]"}
