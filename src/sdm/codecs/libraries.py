"""The optional packages behind the codecs, imported on first use only (``import sdm`` loads none of them).

Each loader gives back the module (or the class) the codecs call, or raises
:class:`~sdm.errors.CompressionSpecError` naming the package to install.
"""

from __future__ import annotations

import importlib
from functools import cache
from types import ModuleType
from typing import Any

from ..errors import CompressionSpecError
from .spec import CompressionSpec

__all__ = ["load", "require_installed"]

#: The module each codec imports.
_MODULES = {"zstd": "numcodecs.zstd", "lz4": "numcodecs.lz4", "blosc2": "blosc2", "zfp": "zfpy", "sz3": "pysz"}


@cache
def _import(module: str) -> ModuleType:
    return importlib.import_module(module)


def load(codec: str, package: str) -> Any:
    """The module codec *codec* uses (imported once).

    Parameters
    ----------
    codec : str
        The codec's name (``"zstd"``, ``"lz4"``, ``"blosc2"``, ``"zfp"``, ``"sz3"``).
    package : str
        Its package's ``pip install`` name (for the message).

    Raises
    ------
    CompressionSpecError
        When the module cannot be imported (missing, or a broken install: the message says why).
    """
    try:
        return _import(_MODULES[codec])
    except ImportError as exc:
        top = _MODULES[codec].partition(".")[0]
        missing = isinstance(exc, ModuleNotFoundError) and (exc.name or "").partition(".")[0] == top
        why = "" if missing else f" ({type(exc).__name__}: {exc})"
        raise CompressionSpecError(f"compression {codec!r} needs the {package!r} package: pip install {package}"
                                   f"{why}") from None
    except Exception as exc:  # a broken install: a missing shared library, an ABI mismatch
        raise CompressionSpecError(f"compression {codec!r} needs the {package!r} package, which fails to import "
                                   f"({type(exc).__name__}: {exc}); reinstall it: pip install --force-reinstall "
                                   f"{package}") from None


def require_installed(spec: CompressionSpec) -> None:
    """Refuse *spec* when its codec's package cannot be imported (see :func:`load`)."""
    load(spec.codec, spec.package)
