"""The checksummed pickle file under the model cache and saved models: arrays come back mapped and
read-only, and a file that is truncated, damaged anywhere or not one of these raises, never loads."""
import numpy as np
import pytest

from snipjit.runtime.caches import pickle_file
from snipjit.runtime.caches.pickle_file import PickleFileError

MAGIC = b"SNIPJITT1\n"


def sample():
    return {"weights": np.arange(100_000, dtype=np.float32), "small": np.ones(3), "text": "graph"}


def test_round_trip_maps_large_arrays_read_only(tmp_path):
    path = tmp_path / "f.bin"
    pickle_file.write(path, sample(), MAGIC, key="k")
    fields, obj = pickle_file.read(path, MAGIC)
    assert fields == {"key": "k"} and obj["text"] == "graph"
    np.testing.assert_array_equal(obj["weights"], sample()["weights"])
    assert not obj["weights"].flags.writeable and obj["weights"].ctypes.data % pickle_file.ALIGN == 0


def test_bytes_round_trip_equals_the_file(tmp_path):
    path = tmp_path / "f.bin"
    pickle_file.write(path, sample(), MAGIC)
    data = pickle_file.dumps(sample(), MAGIC)
    assert data == path.read_bytes()
    np.testing.assert_array_equal(pickle_file.loads(data, MAGIC)[1]["weights"], sample()["weights"])


def test_no_arrays(tmp_path):
    assert pickle_file.loads(pickle_file.dumps({"a": 1}, MAGIC), MAGIC)[1] == {"a": 1}


@pytest.mark.parametrize("where", ["head", "array", "end"])
def test_a_changed_byte_is_found(tmp_path, where):
    data = bytearray(pickle_file.dumps(sample(), MAGIC))
    position = {"head": len(MAGIC) + 8 + 200, "array": pickle_file.ALIGN + 1000, "end": len(data) - 1}[where]
    data[position] ^= 0x10
    with pytest.raises(PickleFileError, match="damaged"):
        pickle_file.loads(bytes(data), MAGIC)


@pytest.mark.parametrize("keep", [5, 30, 200, pickle_file.ALIGN + 100])
def test_a_truncated_file_is_found(tmp_path, keep):
    path = tmp_path / "f.bin"
    pickle_file.write(path, sample(), MAGIC)
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(PickleFileError, match="truncated|too short|damaged"):
        pickle_file.read(path, MAGIC)


def test_another_kind_of_file(tmp_path):
    with pytest.raises(PickleFileError, match="not a SNIPJITT1 file"):
        pickle_file.loads(b"\x08\x01\x12\x04onnx and more bytes", MAGIC)
    with pytest.raises(PickleFileError, match="not a SNIPJITT1"):
        pickle_file.loads(pickle_file.dumps(1, b"SNIPJITX1\n"), MAGIC)


def test_a_failed_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "f.bin"
    pickle_file.write(path, {"v": 1}, MAGIC)
    with pytest.raises(Exception):
        pickle_file.write(path, {"v": lambda: 0}, MAGIC)   # not picklable
    assert pickle_file.read(path, MAGIC)[1] == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]
