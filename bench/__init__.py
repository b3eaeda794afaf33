"""snipjit's benchmark suite against its peers (onnxruntime, OpenVINO, NumPy, numexpr, PyTorch, hand-written
C and the memory-bandwidth limit); run it with `python -m bench --help`.

The path of a run: `workloads` (a model, its inputs and hand-written versions) -> `engines` (what can run
it) -> `worker` (one process per engine) -> `timing` (alternating rounds) -> `measurement`, printed by
`table` and recorded by `report` with the `machine`; `runner` drives it over the chosen workloads. The
suite uses snipjit through its public API; the model engines come from `snipjit.benchmark`, which
`snipjit bench` uses in one process.
"""
