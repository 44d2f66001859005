"""The metadata catalog (touched by rank 0 only).

The records (:class:`RunRecord`, :class:`DatasetSpec`, ...) and URL helpers load
without SQLAlchemy, so ranks that never open the catalog never import it: names that
need the database engine (:class:`Catalog`, :func:`normalize_url`, the attribute
conditions) load on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .infos import InfoRecord, InfoValue
from .records import DatasetRecord, DatasetSpec, ExtentRecord, FileRecord, GroupRecord, RunRecord, Truncation, WriteRecord
from .urls import redact_url

if TYPE_CHECKING:
    from .catalog import Catalog, normalize_url
    from .values import Condition, parse_condition

__all__ = [
    "Catalog",
    "DatasetSpec",
    "normalize_url",
    "redact_url",
    "DatasetRecord",
    "ExtentRecord",
    "FileRecord",
    "GroupRecord",
    "InfoRecord",
    "InfoValue",
    "RunRecord",
    "Truncation",
    "WriteRecord",
    "Condition",
    "parse_condition",
]

# name -> submodule that defines it, imported on first use (SQLAlchemy, numpy)
_LAZY = {"Catalog": "catalog", "normalize_url": "catalog", "Condition": "values", "parse_condition": "values"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
