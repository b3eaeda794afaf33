"""Errors raised while running a compiled model."""


class ExecutionError(RuntimeError):
    """A step failed at run time; the message names the step."""


class KernelBoundsError(ExecutionError):
    """Checked mode: a generated load or store left its buffer; the message names the kernel, the
    expression, the buffer and the offending offset."""
