"""Typed attribute values under the catalog's name for them: the names of :mod:`sdm.values`.

The rules of an attribute value hold wherever one is checked (the user's calls, the
meta-file's records, the catalog), so they are defined below every layer.
"""

from __future__ import annotations

from ..values import (
    INT_MAX,
    INT_MIN,
    MAX_KEY_LENGTH,
    MAX_VALUE_BYTES,
    Condition,
    check_key,
    conditions_from,
    conditions_of,
    decode,
    encode,
    encode_all,
    loaded_numpy,
    merge_attributes,
    normalize,
    parse_condition,
)

__all__ = ["conditions_of", "encode", "encode_all", "merge_attributes", "decode", "normalize", "check_key",
           "Condition", "parse_condition", "conditions_from", "MAX_KEY_LENGTH", "MAX_VALUE_BYTES", "INT_MIN", "INT_MAX",
           "loaded_numpy"]
