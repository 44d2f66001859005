"""I/O methods: one module per method, one interface (:class:`IOMethod`)."""

from . import collective as _collective  # noqa: F401 - registers the method
from .base import IOMethod, Transfer, get_method, method_names, register

__all__ = ["IOMethod", "Transfer", "get_method", "method_names", "register"]
