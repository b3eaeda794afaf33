"""snipjit's benchmark suite against its peers (onnxruntime, OpenVINO, NumPy, numexpr, PyTorch and
the memory-bandwidth limit); run it with `python -m bench --help`."""
