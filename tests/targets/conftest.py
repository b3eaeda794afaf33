"""Target tests. pytest puts this directory on `sys.path` (it holds this conftest), so the LLVM and C
target tests share the `accuracy` module.

`level`: a test taking it runs once per ISA level (snipjit.targets.isa), with SNIPJIT_ISA forcing that
level for the test; levels this CPU cannot execute are skipped."""
import pytest

from snipjit.targets import isa


def executable(name: str) -> bool:
    """Whether this CPU can execute code of ISA level `name`."""
    try:
        isa.select_for_host(name)
        return True
    except isa.IsaError:
        return False


@pytest.fixture(params=[level.name for level in isa.LEVELS])
def level(request, monkeypatch) -> isa.IsaLevel:
    if not executable(request.param):
        pytest.skip(f"this CPU cannot execute {request.param} code")
    monkeypatch.setenv(isa.ENV_VAR, request.param)
    chosen = isa.current().level
    assert chosen.name == request.param
    return chosen
