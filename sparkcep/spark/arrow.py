"""Arrow plumbing of the batch path: epoch times, a partition as one table, rows grouped by id."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sparkcep.ir.spec import OVERFLOW
from sparkcep.runtime_udfs.match import columnar as match_columnar
from sparkcep.spark.schema import _EXACT_LIMIT

__all__ = ["split_by"]


def _session_timezone() -> str:
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    return session.conf.get("spark.sql.session.timeZone") if session is not None else "UTC"


def _epoch_ms(s: pd.Series, timezone: str | None) -> list:
    """Epoch milliseconds of a datetime series (ints when every value is a whole ms), None for NaT.

    ``timezone`` is the zone naive values are in (None: they are UTC, as TIMESTAMP_NTZ values are read).
    """
    us, missing = _epoch_us(s, timezone)
    values = (us // 1000).tolist() if (us % 1000 == 0).all() else (us / 1000).tolist()
    if missing.any():
        values = [None if m else v for v, m in zip(values, missing, strict=True)]
    return values


def _epoch_ms_array(s: pd.Series, timezone: str | None) -> np.ndarray:
    """:func:`_epoch_ms` as a numpy array: int64 when every value is a whole ms and none is NaT, else float64
    (NaN for NaT)."""
    us, missing = _epoch_us(s, timezone)
    if not missing.any() and (us % 1000 == 0).all():
        return us // 1000
    ms = us / 1000
    ms[missing] = np.nan
    return ms


def _epoch_us(s: pd.Series, timezone: str | None) -> tuple[np.ndarray, np.ndarray]:
    """``(epoch µs as int64, NaT)`` of a datetime series whose naive values are in ``timezone``."""
    if s.dt.tz is None and timezone is not None:
        s = s.dt.tz_localize(timezone, ambiguous=False, nonexistent="shift_forward")
    if s.dt.tz is not None:
        s = s.dt.tz_convert("UTC").dt.tz_localize(None)
    return s.to_numpy(dtype="datetime64[us]").view("int64"), s.isna().to_numpy()


def _arrow_epoch_ms(col: pa.ChunkedArray | pa.Array) -> list:
    """Epoch milliseconds of an Arrow timestamp column (ints when every value is a whole ms), None for null.

    Arrow holds the instant itself (UTC), with or without a zone: no wall-clock reading is involved, so unlike
    :func:`_epoch_ms` there is no ambiguous hour."""
    ms = match_columnar.epoch_ms(col)  # int64 when every value is a whole ms, else float64
    if not ms.null_count:
        return ms.to_numpy().tolist()
    values = pc.fill_null(ms, 0).to_numpy().tolist()
    valid = pc.is_valid(ms).to_numpy(zero_copy_only=False)
    return [v if ok else None for v, ok in zip(values, valid, strict=True)]


def split_by(keys: Iterable, events: list[dict]) -> dict[Any, list[dict]]:
    """``events`` grouped by their ``keys`` (one key per event), each group in input order."""
    parts: dict[Any, list[dict]] = {}
    for k, ev in zip(keys, events, strict=True):
        part = parts.get(k)
        if part is None:
            parts[k] = [ev]
        else:
            part.append(ev)
    return parts


def gathered(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    """A ``mapInArrow`` partition's non-empty record batches as one table (a key's rows may span batches), or
    None for an empty partition."""
    batches = [b for b in batches if b.num_rows]
    return pa.Table.from_batches(batches) if batches else None


def by_id(table: pa.Table, ids: np.ndarray) -> tuple[pa.Table, list[int]]:
    """``(table, bounds)``: the rows of ``table`` stably sorted by their ``ids`` (rows of one id together, in
    input order), and where each id's rows start (``bounds[k]:bounds[k + 1]``, ending with the row count)."""
    n = table.num_rows
    if n < 2 or not (ids != ids[0]).any():
        return table, [0, n]
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    return table.take(order), [0, *(np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist(), n]


def _arrow_array(values: list, dtype: pa.DataType) -> pa.Array:
    """An Arrow array of ``dtype`` from Python values, NaN as null (as PySpark converts a pandas result)."""
    try:
        return pa.array(values, type=dtype, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # e.g. whole floats for a LONG column: cast as PySpark does
        return pa.array(values, from_pandas=True).cast(dtype, safe=False)


def _arrow_times(values: list, dtype: pa.DataType) -> pa.Array:
    """Arrow timestamps (``dtype``) from epoch-ms numbers or None (NaN: null), rounded to microseconds."""
    us = [None if v is None or v != v else round(v * 1000) for v in values]
    return pa.array(us, type=pa.int64()).cast(dtype)


def _from_ms(values: list, aware: bool) -> pd.Series:
    """Timestamps from epoch-ms numbers or None (tz-aware UTC, or naive UTC for TIMESTAMP_NTZ)."""
    us = np.round(np.array(list(values), dtype="float64") * 1000)  # None → NaN → NaT
    stamps = pd.to_datetime(us, unit="us", utc=True)
    return pd.Series(stamps if aware else stamps.tz_localize(None))


# ----------------------------------------------------------------------------------------------- adapters


@functools.lru_cache(maxsize=64)
def _rows_of(names: tuple[str, ...]) -> Callable[[list[list]], list[dict]]:
    """``fn(columns) -> rows``: dicts from column lists, as a comprehension over a dict display generated for
    ``names`` (several times faster per row than ``dict(zip(names, row))``)."""
    args = [f"c{i}" for i in range(len(names))]
    body = ", ".join(f"{name!r}: {a}" for name, a in zip(names, args, strict=True))
    source = f"lambda columns: [{{{body}}} for {', '.join(args)}, in zip(*columns, strict=True)]"
    return eval(source)  # noqa: S307 - the source is built from repr() of column names only


def _exact_row(row: dict, exact: list[str]) -> dict:
    """Exact integers as Decimals for DECIMAL(38, 0); a value with more digits is null and flags the row."""
    out, overflow = dict(row), False
    for name in exact:
        v = out.get(name)
        if v is None:
            continue
        if abs(v) >= _EXACT_LIMIT:
            out[name], overflow = None, True
        else:
            out[name] = Decimal(v)
    out[OVERFLOW] = overflow
    return out
