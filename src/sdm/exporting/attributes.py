"""The attributes and dimension names every export gives a run, its groups and its arrays."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..catalog import DatasetRecord, GroupRecord, RunRecord

__all__ = ["attribute_value", "run_attrs", "group_attrs", "dataset_attrs", "dimension_names"]


def attribute_value(value: Any, *, json_only: bool = False) -> Any:
    """An SDM attribute as a file attribute: numbers and text as they are, ``bool`` as 0/1
    (HDF5 and NetCDF have no boolean; Zarr keeps it: *json_only*), anything else as JSON text."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value) if json_only else np.int8(value)
    if isinstance(value, (int, float, str, np.integer, np.floating)):
        return value.item() if isinstance(value, np.generic) else value
    return json.dumps(value, default=str)


def dataset_attrs(g: GroupRecord, record: DatasetRecord, *, json_only: bool) -> dict[str, Any]:
    """The attributes of an exported array: the dataset's, and ``sdm_group``, ``sdm_dataset``, ``sdm_dtype``,
    ``sdm_order``, ``sdm_distribution``."""
    extra = {"sdm_group": g.name, "sdm_dataset": record.name, "sdm_dtype": record.dtype, "sdm_order": record.order,
             "sdm_distribution": json.dumps(record.distribution)}
    return {k: attribute_value(v, json_only=json_only) for k, v in {**record.attributes, **extra}.items()}


def run_attrs(rec: RunRecord, *, json_only: bool) -> dict[str, Any]:
    """The attributes of an export's root: the run's, and ``sdm_application``, ``sdm_run``, ``sdm_created``,
    ``sdm_nprocs``."""
    head = {"sdm_application": rec.application, "sdm_run": rec.id, "sdm_created": str(rec.created_at),
            "sdm_nprocs": rec.nprocs}
    return {k: attribute_value(v, json_only=json_only) for k, v in {**rec.attributes, **head}.items()}


def group_attrs(g: GroupRecord, *, json_only: bool) -> dict[str, Any]:
    """The attributes of an exported group: the group's, and ``sdm_group``, ``sdm_level``, ``sdm_kind``."""
    gattrs = {**g.attributes, "sdm_group": g.name, "sdm_level": g.level, "sdm_kind": g.kind}
    return {k: attribute_value(v, json_only=json_only) for k, v in gattrs.items()}


def dimension_names(dims: Sequence[str], shape: Sequence[int],
                     sizes: dict[str, int]) -> tuple[tuple[str, ...], list[tuple[str, int]]]:
    """A dataset's dimension names in its group (*sizes*: those used so far, updated; a name already used
    with another size becomes ``NAME_SIZE``), and the ones new to the group with their sizes."""
    out, new = [], []
    for name, size in zip(dims, shape):
        if sizes.get(name, size) != size:
            name = f"{name}_{size}"
        if name not in sizes:
            sizes[name] = size
            new.append((name, size))
        out.append(name)
    return tuple(out), new
