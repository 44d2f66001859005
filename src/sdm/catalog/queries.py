"""Attribute conditions as SQL: finding runs and datasets inside the database.

A dataset's attributes are its run's, overridden by its group's, overridden by its own.
A condition ``key <op> value`` holds for a dataset when the most specific row with that
key exists and its value satisfies the comparison exactly as Python compares the decoded
values (:meth:`sdm.catalog.values.Condition.matches`):

* numbers compare with numbers (``int`` and ``float`` rows alike, never ``bool``), exactly:
  integers beyond 2**53 are compared as integers (``CAST(value_str AS BIGINT)``), and a
  comparison of a float row with an integer (or of an integer row with a float) is
  rewritten into an exact comparison with the neighbouring representable bound, so SQL
  never rounds where Python does not;
* ``bool`` compares with ``bool`` (``false < true``), text with text in code point order
  (``COLLATE "C"`` on PostgreSQL; SQLite's ``BINARY`` collation compares UTF-8 bytes,
  which is code point order);
* a missing key matches no condition, ``!=`` included.

Every predicate also carries a non-strict comparison on ``value_num`` (or an equality
on ``value_str``) that the ``(key, value_num)`` / ``(key, value_str)`` indexes answer, so
the candidate runs come from an index range, not from a scan of the catalog: a run can
only match if, for every condition, one of its rows with that key satisfies it. The
override rule is then checked for those candidates only, with correlated ``EXISTS`` on
the ``(run_id, group_id, dataset_id)`` index.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import sqlalchemy as sa
from sqlalchemy.sql.elements import ColumnElement

from . import schema as S
from .values import INT_MAX, INT_MIN, Condition

__all__ = ["value_predicate", "index_predicate", "run_matches", "dataset_matches", "candidate_runs"]

_Pred = ColumnElement[bool]


def _compare(expr: Any, op: str, bound: Any) -> _Pred:
    if op in ("=", "=="):
        return expr == bound
    return {"!=": expr != bound, "<": expr < bound, "<=": expr <= bound, ">": expr > bound,
            ">=": expr >= bound}[op]


def _constant(value: bool) -> _Pred:
    return sa.true() if value else sa.false()


def _int_rows(t: sa.Table | Any, op: str, v: int | float) -> _Pred:
    """Rows of type ``int`` whose value satisfies ``x <op> v`` exactly (*v* int or float)."""
    x = sa.cast(sa.case((t.c.value_type == "int", t.c.value_str)), sa.BigInteger)
    if isinstance(v, float):
        if math.isinf(v):  # every integer is below +inf and above -inf
            below = v > 0
            return _constant({"<": below, "<=": below, ">": not below, ">=": not below, "=": False,
                              "==": False, "!=": True}[op])
        lo, hi = math.floor(v), math.ceil(v)
        if op in ("=", "=="):
            if lo != hi:
                return sa.false()
            op, v = "=", lo
        elif op == "!=":
            if lo != hi:
                return sa.true()
            v = lo
        else:  # x < v <=> x < ceil(v); x <= v <=> x <= floor(v); x > v <=> x > floor(v); x >= v <=> x >= ceil(v)
            v = hi if op in ("<", ">=") else lo
    if not INT_MIN <= v <= INT_MAX:  # no stored integer lies beyond the int64 range
        above = v > INT_MAX
        return _constant({"<": above, "<=": above, ">": not above, ">=": not above, "=": False,
                          "==": False, "!=": True}[op])
    return _compare(x, op, int(v))


def _float_rows(t: sa.Table | Any, op: str, v: int | float) -> _Pred:
    """Rows of type ``float`` whose value satisfies ``x <op> v`` exactly (*v* int or float)."""
    if isinstance(v, float) or float(v) == v:
        return _compare(t.c.value_num, op, float(v))
    f = float(v)  # the integer lies strictly between two adjacent doubles lo < v < hi
    lo, hi = (math.nextafter(f, -math.inf), f) if f > v else (f, math.nextafter(f, math.inf))
    if op in ("=", "=="):
        return sa.false()
    if op == "!=":
        return sa.true()
    return t.c.value_num <= lo if op in ("<", "<=") else t.c.value_num >= hi


def _text(column: Any, op: str, dialect: str) -> Any:
    """*column* for an ordering comparison in code point order (equality needs no collation)."""
    return column.collate("C") if dialect == "postgresql" and op not in ("=", "==", "!=") else column


def value_predicate(t: sa.Table | Any, c: Condition, dialect: str) -> _Pred:
    """Attribute rows of *t* (any level) with key ``c.key`` whose value satisfies *c* exactly."""
    v, op = c.value, c.op
    if isinstance(v, bool):
        typed = _compare(_text(t.c.value_str, op, dialect), op, "true" if v else "false")
        return sa.and_(t.c.key == c.key, t.c.value_type == "bool", typed)
    if isinstance(v, (int, float)):
        exact = sa.or_(sa.and_(t.c.value_type == "int", _int_rows(t, op, v)),
                       sa.and_(t.c.value_type == "float", _float_rows(t, op, v)))
        return sa.and_(t.c.key == c.key, *index_predicate(t, c), exact)
    return sa.and_(t.c.key == c.key, t.c.value_type == "str", _compare(_text(t.c.value_str, op, dialect), op, v))


def index_predicate(t: sa.Table | Any, c: Condition) -> list[_Pred]:
    """A necessary, index-friendly form of a numeric condition on ``value_num``.

    ``value_num`` holds ``float(value)``; rounding to float never reverses an order, so
    ``x < v`` implies ``float(x) <= float(v)``: the comparisons are made non-strict.
    """
    v = c.value
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return []
    f = float(v)
    if c.op in ("=", "=="):
        return [t.c.value_num == f]
    if c.op in ("<", "<="):
        return [t.c.value_num <= f]
    if c.op in (">", ">="):
        return [t.c.value_num >= f]
    return []


def _owner_row(run_id: Any, key: str, *, group_id: Any = None, dataset_id: Any = None) -> tuple[Any, list[_Pred]]:
    """A fresh alias of ``attributes`` and the predicates naming one owner's row of *key*."""
    a = S.attributes.alias()
    where = [a.c.run_id == run_id, a.c.key == key]
    if dataset_id is not None:
        where.append(a.c.dataset_id == dataset_id)
    else:
        where.append(a.c.dataset_id.is_(None))
        where.append(a.c.group_id == group_id if group_id is not None else a.c.group_id.is_(None))
    return a, where


def _has(run_id: Any, c: Condition, dialect: str, *, satisfied: bool, **owner: Any) -> _Pred:
    a, where = _owner_row(run_id, c.key, **owner)
    if satisfied:
        where.append(value_predicate(a, c, dialect))
    return sa.exists().where(*where)


def run_matches(run_id: Any, conds: Sequence[Condition], dialect: str) -> _Pred:
    """The run's own attributes (run level) satisfy every condition."""
    return sa.and_(sa.true(), *(_has(run_id, c, dialect, satisfied=True) for c in conds))


def dataset_matches(run_id: Any, group_id: Any, dataset_id: Any, conds: Sequence[Condition], dialect: str) -> _Pred:
    """The dataset's effective attributes (dataset over group over run) satisfy every condition."""
    preds = []
    for c in conds:
        ds, grp = {"dataset_id": dataset_id}, {"group_id": group_id}
        preds.append(sa.or_(
            _has(run_id, c, dialect, satisfied=True, **ds),
            sa.and_(~_has(run_id, c, dialect, satisfied=False, **ds), sa.or_(
                _has(run_id, c, dialect, satisfied=True, **grp),
                sa.and_(~_has(run_id, c, dialect, satisfied=False, **grp), _has(run_id, c, dialect, satisfied=True)),
            )),
        ))
    return sa.and_(sa.true(), *preds)


def candidate_runs(run_id: Any, conds: Sequence[Condition], dialect: str) -> list[_Pred]:
    """Index-answered predicates: for every condition, the run holds a row (any level) satisfying it."""
    out = []
    for c in conds:
        a = S.attributes.alias()
        out.append(run_id.in_(sa.select(a.c.run_id).where(value_predicate(a, c, dialect))))
    return out


def matching_run_filter(run_id: Any, conds: Sequence[Condition], dialect: str) -> list[_Pred]:
    """Predicates on ``runs`` selecting the runs that :meth:`Catalog.find` returns.

    A run is returned when its own attributes satisfy every condition, or when it holds
    a dataset whose effective attributes do.
    """
    if not conds:
        return []
    g, d = S.groups.alias("mg"), S.datasets.alias("md")
    has_dataset = sa.exists().where(g.c.run_id == run_id, d.c.group_id == g.c.id,
                                    dataset_matches(run_id, g.c.id, d.c.id, conds, dialect))
    return [*candidate_runs(run_id, conds, dialect), sa.or_(run_matches(run_id, conds, dialect), has_dataset)]
