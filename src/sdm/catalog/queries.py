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

Statements are built once per *shape* (the dialect, which filters are given, and for
each condition its kind of value, operator and which exact comparisons apply) and
cached; keys, values and bounds travel as bound parameters. Building the expression
costs far more than running it on an indexed catalog, and a cached statement also hits
SQLAlchemy's compiled-statement cache.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Sequence

import sqlalchemy as sa
from sqlalchemy.sql.elements import ColumnElement

from . import schema as S
from .values import INT_MAX, INT_MIN, Condition

__all__ = ["compile_conditions", "candidates_query", "run_level_query", "datasets_query"]

_Pred = ColumnElement[bool]
#: What one condition needs in SQL, without its values: (kind, op, int rows, float rows, index op).
Shape = tuple[str, str, Any, Any, str | None]
_EQ = ("=", "==")


def _compare(expr: Any, op: str, bound: Any) -> _Pred:
    if op in _EQ:
        return expr == bound
    return {"!=": expr != bound, "<": expr < bound, "<=": expr <= bound, ">": expr > bound,
            ">=": expr >= bound}[op]


def _beyond(op: str, above: bool) -> bool:
    """Truth of ``x <op> v`` for every x when v lies above (or below) every candidate x."""
    return {"<": above, "<=": above, ">": not above, ">=": not above, "=": False, "==": False, "!=": True}[op]


def _int_rows(op: str, v: int | float) -> tuple[Any, int | None]:
    """How ``int`` rows compare with *v* exactly: ``(True|False, None)`` or ``(op, integer bound)``."""
    if isinstance(v, float):
        if math.isinf(v):  # every integer lies below +inf and above -inf
            return _beyond(op, v > 0), None
        lo, hi = math.floor(v), math.ceil(v)
        if op in _EQ or op == "!=":
            if lo != hi:  # no integer equals a fraction
                return op == "!=", None
            v = lo
        else:  # x < v <=> x < ceil(v); x <= v <=> x <= floor(v); x > v <=> x > floor(v); x >= v <=> x >= ceil(v)
            v = hi if op in ("<", ">=") else lo
    if not INT_MIN <= v <= INT_MAX:  # no stored integer lies beyond the int64 range
        return _beyond(op, v > INT_MAX), None
    return ("=" if op in _EQ else op), int(v)


def _float_rows(op: str, v: int | float) -> tuple[Any, float | None]:
    """How ``float`` rows compare with *v* exactly: ``(True|False, None)`` or ``(op, float bound)``."""
    if isinstance(v, float) or float(v) == v:
        return ("=" if op in _EQ else op), float(v)
    f = float(v)  # the integer lies strictly between two adjacent doubles lo < v < hi
    lo, hi = (math.nextafter(f, -math.inf), f) if f > v else (f, math.nextafter(f, math.inf))
    if op in _EQ or op == "!=":
        return op == "!=", None
    return ("<=", lo) if op in ("<", "<=") else (">=", hi)


def _index_op(op: str) -> str | None:
    """A necessary, index-friendly form of a numeric comparison on ``value_num``.

    ``value_num`` holds ``float(value)``; rounding to float never reverses an order, so
    ``x < v`` implies ``float(x) <= float(v)``: the comparisons are made non-strict.
    """
    return {"=": "=", "==": "=", "<": "<=", "<=": "<=", ">": ">=", ">=": ">="}.get(op)


def compile_conditions(conds: Sequence[Condition]) -> tuple[tuple[Shape, ...], dict[str, Any]]:
    """The shapes of *conds* (what the cached statements depend on) and their bound values."""
    shapes: list[Shape] = []
    params: dict[str, Any] = {}
    for i, c in enumerate(conds):
        v, op = c.value, ("=" if c.op in _EQ else c.op)
        params[f"key{i}"] = c.key
        if isinstance(v, bool):
            shapes.append(("bool", op, None, None, None))
            params[f"text{i}"] = "true" if v else "false"
        elif isinstance(v, (int, float)):
            int_op, params[f"int{i}"] = _int_rows(op, v)
            float_op, params[f"float{i}"] = _float_rows(op, v)
            index = _index_op(op)
            params[f"num{i}"] = float(v)
            shapes.append(("num", op, int_op, float_op, index))
        else:
            shapes.append(("str", op, None, None, None))
            params[f"text{i}"] = v
    return tuple(shapes), params


def _text(column: Any, op: str, dialect: str) -> Any:
    """*column* for an ordering comparison in code point order (equality needs no collation)."""
    return column.collate("C") if dialect == "postgresql" and op not in ("=", "!=") else column


def _typed(op_or_truth: Any, expr: Any, bound: Any) -> _Pred:
    if isinstance(op_or_truth, bool):
        return sa.true() if op_or_truth else sa.false()
    return _compare(expr, op_or_truth, bound)


def _value_predicate(t: Any, i: int, shape: Shape, dialect: str) -> _Pred:
    """Attribute rows of *t* (any level) with condition *i*'s key whose value satisfies it exactly."""
    kind, op, int_op, float_op, index = shape
    key = t.c.key == sa.bindparam(f"key{i}", type_=sa.String)
    if kind in ("bool", "str"):
        value = _compare(_text(t.c.value_str, op, dialect), op, sa.bindparam(f"text{i}", type_=sa.Text))
        return sa.and_(key, t.c.value_type == kind, value)
    as_int = sa.cast(sa.case((t.c.value_type == "int", t.c.value_str)), sa.BigInteger)
    exact = sa.or_(
        sa.and_(t.c.value_type == "int", _typed(int_op, as_int, sa.bindparam(f"int{i}", type_=sa.BigInteger))),
        sa.and_(t.c.value_type == "float", _typed(float_op, t.c.value_num, sa.bindparam(f"float{i}", type_=sa.Float))),
    )
    num = [] if index is None else [_compare(t.c.value_num, index, sa.bindparam(f"num{i}", type_=sa.Float))]
    return sa.and_(key, *num, exact)


def _has(run_id: Any, i: int, shape: Shape, dialect: str, *, satisfied: bool, group_id: Any = None,
         dataset_id: Any = None) -> _Pred:
    """``EXISTS`` a row of condition *i*'s key on one owner (run, group or dataset), satisfying it or not."""
    a = S.attributes.alias()
    where = [a.c.run_id == run_id]
    if dataset_id is not None:
        where.append(a.c.dataset_id == dataset_id)
    else:
        where.append(a.c.dataset_id.is_(None))
        where.append(a.c.group_id == group_id if group_id is not None else a.c.group_id.is_(None))
    where.append(_value_predicate(a, i, shape, dialect) if satisfied
                 else a.c.key == sa.bindparam(f"key{i}", type_=sa.String))
    return sa.exists().where(*where).correlate_except(a)  # the owner's columns come from the enclosing query


def _run_matches(run_id: Any, shapes: Sequence[Shape], dialect: str) -> _Pred:
    """The run's own attributes (run level) satisfy every condition."""
    return sa.and_(sa.true(), *(_has(run_id, i, s, dialect, satisfied=True) for i, s in enumerate(shapes)))


def _dataset_matches(run_id: Any, group_id: Any, dataset_id: Any, shapes: Sequence[Shape], dialect: str) -> _Pred:
    """The dataset's effective attributes (dataset over group over run) satisfy every condition."""
    preds = []
    for i, s in enumerate(shapes):
        ds, grp = {"dataset_id": dataset_id}, {"group_id": group_id}
        preds.append(sa.or_(
            _has(run_id, i, s, dialect, satisfied=True, **ds),
            sa.and_(~_has(run_id, i, s, dialect, satisfied=False, **ds), sa.or_(
                _has(run_id, i, s, dialect, satisfied=True, **grp),
                sa.and_(~_has(run_id, i, s, dialect, satisfied=False, **grp),
                        _has(run_id, i, s, dialect, satisfied=True)),
            )),
        ))
    return sa.and_(sa.true(), *preds)


@lru_cache(maxsize=256)
def candidates_query(dialect: str, shapes: tuple[Shape, ...], application: bool = False, run: bool = False,
                     since: bool = False, until: bool = False) -> sa.Select:
    """``SELECT runs.id`` (oldest first) of the runs that may match: the filters, and for every
    condition a row of the run (any level) satisfying it, which the attribute indexes answer.

    Every run :meth:`Catalog.find` returns is among them; :func:`run_level_query` and
    :func:`datasets_query` then apply the override rule to these runs only. (One statement
    with correlated ``EXISTS`` over the datasets of every candidate would do both at once,
    but PostgreSQL plans it as a scan of every dataset per candidate run.) Bound
    parameters: those of :func:`compile_conditions`, and ``application``, ``run``,
    ``since``, ``until`` for the filters flagged.
    """
    r, a = S.runs, S.applications
    q = sa.select(r.c.id).select_from(r.join(a, a.c.id == r.c.application_id))
    if application:
        q = q.where(a.c.name == sa.bindparam("application", type_=sa.String))
    if run:
        q = q.where(r.c.id == sa.bindparam("run", type_=sa.BigInteger))
    if since:
        q = q.where(r.c.created_at >= sa.bindparam("since", type_=r.c.created_at.type))
    if until:
        q = q.where(r.c.created_at <= sa.bindparam("until", type_=r.c.created_at.type))
    for i, s in enumerate(shapes):
        t = S.attributes.alias()
        q = q.where(r.c.id.in_(sa.select(t.c.run_id).where(_value_predicate(t, i, s, dialect))))
    return q.order_by(r.c.created_at, r.c.id)


@lru_cache(maxsize=256)
def run_level_query(dialect: str, shapes: tuple[Shape, ...]) -> sa.Select:
    """``SELECT runs.id`` of the runs bound as ``run_ids`` (a list) whose own attributes satisfy every condition."""
    r = S.runs
    return sa.select(r.c.id).where(r.c.id.in_(sa.bindparam("run_ids", expanding=True)),
                                   _run_matches(r.c.id, shapes, dialect))


@lru_cache(maxsize=256)
def datasets_query(dialect: str, shapes: tuple[Shape, ...]) -> sa.Select:
    """``(run id, dataset id)`` of the datasets that match, in the runs bound as ``run_ids`` (a list)."""
    g, d = S.groups, S.datasets
    return (sa.select(g.c.run_id, d.c.id).select_from(d.join(g, g.c.id == d.c.group_id))
            .where(g.c.run_id.in_(sa.bindparam("run_ids", expanding=True)),
                   _dataset_matches(g.c.run_id, g.c.id, d.c.id, shapes, dialect)))
