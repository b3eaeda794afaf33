"""A value that holds for the duration of a `with` block on the current thread: the program recording its
kernels, the workers a request runs on, the packed weights offered to kernels being built."""
from __future__ import annotations

import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class ThreadScoped(Generic[T]):
    """`with scoped(value):` makes `scoped.get()` return `value` on this thread until the block ends
    (then the outer block's value again; None outside every block)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self) -> T | None:
        return getattr(self._local, "value", None)

    def __call__(self, value: T | None) -> "_Block":
        return _Block(self._local, value)


class _Block:
    __slots__ = ("local", "value", "previous")

    def __init__(self, local: threading.local, value) -> None:
        self.local, self.value = local, value

    def __enter__(self) -> None:
        self.previous = getattr(self.local, "value", None)
        self.local.value = self.value

    def __exit__(self, *exc) -> None:
        self.local.value = self.previous
