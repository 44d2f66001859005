"""The metadata catalog (touched by rank 0 only)."""

from .catalog import Catalog, DatasetSpec, normalize_url
from .urls import redact_url
from .records import DatasetRecord, FileRecord, GroupRecord, RunRecord, WriteRecord
from .values import Condition, parse_condition

__all__ = [
    "Catalog",
    "DatasetSpec",
    "normalize_url",
    "redact_url",
    "DatasetRecord",
    "FileRecord",
    "GroupRecord",
    "RunRecord",
    "WriteRecord",
    "Condition",
    "parse_condition",
]
