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

Statements are SQL text (run by :class:`~sdm.catalog.reader.Reader`), written once per
*shape* (the dialect, which filters are given, and for each condition its kind of value,
operator and which exact comparisons apply) and cached; keys, values and bounds travel as
bound parameters (``:name``; ``IN :run_ids`` for a list). Text is written here, never
built as SQLAlchemy expressions: compiling those cost a one-process reader most of its
first search, far more than running it on an indexed catalog.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Sequence

from .values import INT_MAX, INT_MIN, Condition

__all__ = ["compile_conditions", "candidates_query", "run_level_query", "datasets_query"]

#: What one condition needs in SQL, without its values: (kind, op, int rows, float rows, index op).
Shape = tuple[str, str, Any, Any, str | None]
_EQ = ("=", "==")


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


_TRUE, _FALSE = "1 = 1", "1 = 0"  # written the same on every engine


def _and(*parts: str) -> str:
    return "(" + " AND ".join(parts) + ")" if parts else _TRUE


def _bind(name: str, sql_type: str, dialect: str) -> str:
    """A bound parameter; PostgreSQL is told its type (as SQLAlchemy's psycopg dialect does)."""
    return f"CAST(:{name} AS {sql_type})" if dialect == "postgresql" else f":{name}"


def _typed(op_or_truth: Any, expr: str, bound: str) -> str:
    if isinstance(op_or_truth, bool):
        return _TRUE if op_or_truth else _FALSE
    return f"{expr} {op_or_truth} {bound}"


def _value_predicate(t: str, i: int, shape: Shape, dialect: str) -> str:
    """Attribute rows of alias *t* (any level) with condition *i*'s key whose value satisfies it exactly."""
    kind, op, int_op, float_op, index = shape
    key = f'{t}."key" = :key{i}'
    if kind in ("bool", "str"):
        column = f"{t}.value_str"
        if dialect == "postgresql" and op not in ("=", "!="):  # code point order (equality needs no collation)
            column += ' COLLATE "C"'
        return _and(key, f"{t}.value_type = '{kind}'", f"{column} {op} :text{i}")
    as_int = f"CAST(CASE WHEN {t}.value_type = 'int' THEN {t}.value_str END AS BIGINT)"
    exact = (f"(({t}.value_type = 'int' AND {_typed(int_op, as_int, _bind(f'int{i}', 'BIGINT', dialect))}) OR "
             f"({t}.value_type = 'float' AND "
             f"{_typed(float_op, f'{t}.value_num', _bind(f'float{i}', 'DOUBLE PRECISION', dialect))}))")
    num = [] if index is None else [f"{t}.value_num {index} {_bind(f'num{i}', 'DOUBLE PRECISION', dialect)}"]
    return _and(key, *num, exact)


class _Aliases:
    """Fresh aliases of the attributes table, one per subquery of a statement."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"attributes_{self.n}"


def _has(new: _Aliases, run_id: str, i: int, shape: Shape, dialect: str, *, satisfied: bool,
         group_id: str | None = None, dataset_id: str | None = None) -> str:
    """``EXISTS`` a row of condition *i*'s key on one owner (run, group or dataset), satisfying it or not."""
    a = new()
    where = [f"{a}.run_id = {run_id}"]
    if dataset_id is not None:
        where.append(f"{a}.dataset_id = {dataset_id}")
    else:
        where.append(f"{a}.dataset_id IS NULL")
        where.append(f"{a}.group_id = {group_id}" if group_id is not None else f"{a}.group_id IS NULL")
    where.append(_value_predicate(a, i, shape, dialect) if satisfied else f'{a}."key" = :key{i}')
    return f"EXISTS (SELECT 1 FROM attributes AS {a} WHERE {' AND '.join(where)})"


def _run_matches(new: _Aliases, run_id: str, shapes: Sequence[Shape], dialect: str) -> str:
    """The run's own attributes (run level) satisfy every condition."""
    return _and(*(_has(new, run_id, i, s, dialect, satisfied=True) for i, s in enumerate(shapes)))


def _dataset_matches(new: _Aliases, run_id: str, group_id: str, dataset_id: str, shapes: Sequence[Shape],
                     dialect: str) -> str:
    """The dataset's effective attributes (dataset over group over run) satisfy every condition."""
    preds = []
    for i, s in enumerate(shapes):
        def has(satisfied: bool, **owner: str) -> str:
            return _has(new, run_id, i, s, dialect, satisfied=satisfied, **owner)

        preds.append(
            f"({has(True, dataset_id=dataset_id)} OR (NOT {has(False, dataset_id=dataset_id)} AND "
            f"({has(True, group_id=group_id)} OR (NOT {has(False, group_id=group_id)} AND {has(True)}))))")
    return _and(*preds)


@lru_cache(maxsize=256)
def candidates_query(dialect: str, shapes: tuple[Shape, ...], application: bool = False, run: bool = False,
                     since: bool = False, until: bool = False, newest_first: bool = False) -> str:
    """``SELECT runs.id`` of the runs that may match: the filters, and for every condition a row
    of the run (any level) satisfying it, which the attribute indexes answer.

    Oldest first; *newest_first*: newest first, a page at a time (parameters ``limit``
    and ``offset``). Every run :meth:`Catalog.find` returns is among them;
    :func:`run_level_query` and :func:`datasets_query` then apply the override rule to
    these runs only. (One statement with correlated ``EXISTS`` over the datasets of
    every candidate would do both at once, but PostgreSQL plans it as a scan of every
    dataset per candidate run.) Bound parameters: those of :func:`compile_conditions`,
    and ``application``, ``run``, ``since``, ``until`` for the filters flagged.
    """
    where = []
    if application:
        where.append("applications.name = :application")
    if run:
        where.append(f"runs.id = {_bind('run', 'BIGINT', dialect)}")
    if since:
        where.append("runs.created_at >= :since")
    if until:
        where.append("runs.created_at <= :until")
    new = _Aliases()
    for i, s in enumerate(shapes):
        t = new()
        where.append(f"runs.id IN (SELECT {t}.run_id FROM attributes AS {t} WHERE {_value_predicate(t, i, s, dialect)})")
    order = ("runs.created_at DESC, runs.id DESC LIMIT :limit OFFSET :offset" if newest_first
             else "runs.created_at, runs.id")
    return ("SELECT runs.id FROM runs JOIN applications ON applications.id = runs.application_id"
            f"{' WHERE ' + ' AND '.join(where) if where else ''} ORDER BY {order}")


@lru_cache(maxsize=256)
def run_level_query(dialect: str, shapes: tuple[Shape, ...]) -> str:
    """``SELECT runs.id`` of the runs bound as ``run_ids`` (a list) whose own attributes satisfy every condition."""
    return f"SELECT runs.id FROM runs WHERE runs.id IN :run_ids AND {_run_matches(_Aliases(), 'runs.id', shapes, dialect)}"


@lru_cache(maxsize=256)
def datasets_query(dialect: str, shapes: tuple[Shape, ...]) -> str:
    """``(run id, dataset id)`` of the datasets that match, in the runs bound as ``run_ids`` (a list)."""
    match = _dataset_matches(_Aliases(), "groups.run_id", "groups.id", "datasets.id", shapes, dialect)
    return ("SELECT groups.run_id, datasets.id FROM datasets JOIN groups ON groups.id = datasets.group_id "
            f"WHERE groups.run_id IN :run_ids AND {match}")
