"""The point-in-time cut: ``as_of`` parsed once, and the one function that applies it.

An ``as_of`` (a scalar, or a per-row column of a label table) is parsed once, when the options
or the label table are built, into an exact value: :class:`Cut` (the instant as an exact fraction
of epoch seconds, so it converts to integer ticks of any unit without rounding) or
:class:`RowCuts` (int64 nanosecond ticks per row). :func:`at_or_before` is the only place an event
time is compared with a cut-off, for every reader (``read_events(until=)`` and so ``encode``, the
export, Spark and ``update``; the label rows of a fine-tuning fit; the aggregates and the probe;
drift): on integer ticks when the log's times are instants, so an event one nanosecond after
``as_of`` is out and one exactly at it is in; on float seconds only when the log's times are
numbers (which are float seconds already).
"""

from __future__ import annotations

import decimal
import numbers
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pandas as pd

from seqenc.errors import SeqencError

# Numeric epoch times above this (year 5138) are almost surely milliseconds or finer, not seconds.
MAX_EPOCH_SECONDS = 1e11
TICKS_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
NS = TICKS_PER_SECOND["ns"]
# The exact times (int64 nanoseconds since the epoch) of a table read for per-row cut-offs
# (read_events(..., exact=True)); absent when the log's times are numbers (float seconds).
EXACT = "__seqenc_ticks_ns"
# A number above MAX_EPOCH_SECONDS, by magnitude: the unit it most likely is, ticks per second.
_FINER_UNITS = (("nanoseconds", 1e9), ("microseconds", 1e6), ("milliseconds", 1e3))
_INT64_MAX = int(np.iinfo(np.int64).max)

# Event times as one reader holds them: ``(int64 ticks, ticks per second)`` for instants, or
# ``(float64 epoch seconds, None)`` for a log whose times are numbers.
Times = tuple[np.ndarray, int | None]


def seconds(ticks: np.ndarray, per_second: int) -> np.ndarray:
    """Ticks → float64 seconds, the whole seconds and the fraction apart: an instant gives the same
    float whatever its unit (s, ms, us, ns), so a time and an ``as_of`` equal to it compare equal."""
    whole, rest = np.divmod(ticks, per_second)
    return whole.astype(np.float64) + rest / per_second


def unit_hint(values: np.ndarray) -> str:
    """Why numbers above :data:`MAX_EPOCH_SECONDS` are refused, naming their probable unit."""
    top = float(np.max(np.abs(values)))
    unit, factor = next((u, f) for u, f in _FINER_UNITS if top > f * MAX_EPOCH_SECONDS / 1e3)
    return (
        f"numeric timestamps must be epoch SECONDS, this looks like {unit} "
        f"(divide by {factor:,.0f}, or pass datetime values)"
    )


@dataclass(frozen=True)
class Cut:
    """One ``as_of``, parsed: ``value`` as given (for messages and metadata), ``at`` the exact
    epoch seconds, ``seconds`` the float the timestamp column gives the same instant."""

    value: object
    at: Fraction
    seconds: float

    def ticks(self, per_second: int) -> int:
        """The last tick of unit ``per_second`` at or before the cut (int64-clipped)."""
        floor = (self.at.numerator * per_second) // self.at.denominator
        return max(min(floor, _INT64_MAX), -_INT64_MAX)

    @property
    def float_floor(self) -> float:
        """The largest float64 at or before the cut: a float seconds time is at or before the cut
        exactly when it is at or before this."""
        f = float(self.at)
        return float(np.nextafter(f, -np.inf)) if Fraction(f) > self.at else f


@dataclass(frozen=True)
class RowCuts:
    """Per-row cut-offs of a label table, parsed: ``ns`` int64 nanosecond ticks (instants; ``None``
    when the column holds numbers), ``seconds`` float64 epoch seconds (the query times)."""

    ns: np.ndarray | None
    seconds: np.ndarray

    def take(self, rows: np.ndarray) -> RowCuts:
        """The cut-offs of ``rows`` (e.g. each event's row)."""
        return RowCuts(None if self.ns is None else self.ns[rows], self.seconds[rows])

    def as_column(self) -> np.ndarray:
        """The cut-offs as a column that :func:`parse_column` reads back to these exactly:
        datetime64[ns] (UTC) instants, or float64 epoch seconds."""
        return self.seconds if self.ns is None else self.ns.view("datetime64[ns]")


def parse(value: object) -> Cut | None:
    """An ``as_of`` → :class:`Cut` (``None`` stays ``None``; a :class:`Cut` is returned as is).

    Accepts ``datetime`` / ``pd.Timestamp`` / ``np.datetime64`` / ISO-8601 strings (naive values are
    UTC; any year up to 9999) and numbers or numeric strings (``"1704119688"``, as the command
    line passes them), read as epoch **seconds**; a number above 1e11 is refused as probable
    milliseconds."""
    if value is None or isinstance(value, Cut):
        return value
    instant = instant_ticks(value)
    if instant is not None:
        ticks, per_second = instant
        return Cut(
            value, Fraction(ticks, per_second), float(seconds(np.array([ticks]), per_second)[0])
        )
    number = _number(value)
    return Cut(value, Fraction(number), number)


def _number(value: object) -> float:
    """A number or numeric text as float epoch seconds, checked as the timestamp column is."""
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
    if not isinstance(number, (numbers.Real, decimal.Decimal)):
        raise SeqencError(f"cannot read {value!r} as a point in time")
    try:
        number = float(number)
    except (ValueError, OverflowError) as e:
        raise SeqencError(f"cannot read {value!r} as a point in time: {e}") from e
    if not np.isfinite(number):
        raise SeqencError(f"time must be finite, got {value!r}")
    if abs(number) > MAX_EPOCH_SECONDS:
        raise SeqencError(f"time {value!r}: {unit_hint(np.array([number]))}")
    return number


def epoch_seconds(value: object) -> float:
    """A point in time → float epoch seconds, UTC (:func:`parse`; an instant gives exactly the
    float its timestamp column value gives)."""
    return parse(value).seconds


def instant_ticks(value: object) -> tuple[int, int] | None:
    """A point in time given as an instant (datetime, ``pd.Timestamp``, ``np.datetime64``, ISO
    text; naive values are UTC) → ``(ticks since the epoch, ticks per second)`` in its own unit;
    ``None`` for a number or numeric text (epoch seconds)."""
    if isinstance(value, (bool, np.bool_)):
        raise SeqencError(f"cannot read {value!r} as a point in time")
    if isinstance(value, (numbers.Real, decimal.Decimal)):
        return None
    if isinstance(value, str):
        try:
            float(value)
            return None
        except ValueError:
            pass
    try:
        ts = pd.Timestamp(value)
    except (TypeError, ValueError, OverflowError) as e:
        raise SeqencError(f"cannot read {value!r} as a point in time: {e}") from e
    if ts is pd.NaT:
        raise SeqencError(f"cannot read {value!r} as a point in time (NaT)")
    if ts.tzinfo is not None:
        ts = ts.tz_convert("UTC").tz_localize(None)
    ticks = ts.asm8  # numpy datetime64 in the Timestamp's own unit: no overflow up to 9999
    unit = np.datetime_data(ticks.dtype)[0]
    return int(ticks.astype(np.int64)), TICKS_PER_SECOND[unit]


def parse_column(values: pd.Series, name: str) -> RowCuts:
    """A label table's column of cut-offs → :class:`RowCuts`, each row read by :func:`parse`'s
    rules: the same forms (a datetime column of any unit or zone; ISO text of any spelling, rows
    mixing spellings; numbers or numeric text as epoch seconds), the same checks (a number above
    :data:`MAX_EPOCH_SECONDS` refused as probable milliseconds, with a scalar's message) and the
    same range (instants beyond the years 1678-2262 clipped to the nanosecond range, which every
    event read per row lies within). A missing cut-off, a value that is no point in time, or a
    column mixing instants and numbers is refused in one line naming the first such row."""
    if pd.api.types.is_bool_dtype(values):
        raise SeqencError(f"column {name!r} holds booleans, not points in time")
    missing = values.isna().to_numpy()
    if missing.any():
        row = int(np.flatnonzero(missing)[0])
        raise SeqencError(
            f"column {name!r} row {row}: no cut-off ({_shown(values.iloc[row])}): give every row a "
            "point in time, or leave the column out to read whole histories"
        )
    if pd.api.types.is_datetime64_any_dtype(values):
        ticks = values.dt.tz_convert("UTC") if values.dt.tz is not None else values
        ticks = ticks.dt.tz_localize(None).to_numpy()
        per_second = TICKS_PER_SECOND[np.datetime_data(ticks.dtype)[0]]
        return _instant_cuts(ticks.view(np.int64), per_second)
    if pd.api.types.is_numeric_dtype(values):
        return RowCuts(None, _row_numbers(values, values.to_numpy(dtype=np.float64), name))
    return _parsed_rows(values, name)


def _shown(value: object) -> str:
    """A cell as a message shows it: a numpy scalar as the Python value it holds."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def _row_numbers(values: pd.Series, numbers: np.ndarray, name: str) -> np.ndarray:
    """Per-row epoch seconds checked as a scalar number is (:func:`_number`)."""
    for bad, why in ((~np.isfinite(numbers), None), (np.abs(numbers) > MAX_EPOCH_SECONDS, 1)):
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            hint = "not finite" if why is None else unit_hint(numbers[bad])
            raise SeqencError(f"column {name!r} row {row}: time {_shown(values.iloc[row])}: {hint}")
    return numbers


def _instant_cuts(ticks: np.ndarray, per_second: int | np.ndarray) -> RowCuts:
    """Instants as ``(ticks, ticks per second)`` per row → :class:`RowCuts` (ns clipped to int64,
    as :meth:`Cut.ticks` clips)."""
    factor = NS // np.asarray(per_second, dtype=np.int64)
    limit = _INT64_MAX // factor
    ns = np.clip(ticks, -limit, limit) * factor
    ns = np.where(ticks > limit, _INT64_MAX, np.where(ticks < -limit, -_INT64_MAX, ns))
    return RowCuts(ns.astype(np.int64), seconds(ticks, per_second))


def _parsed_rows(values: pd.Series, name: str) -> RowCuts:
    """A column of text or mixed objects, each distinct value by :func:`parse`."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    parsed = []
    for code, value in enumerate(uniques):
        try:
            parsed.append(instant_ticks(value) or _number(value))
        except SeqencError as e:
            row = int(np.argmax(codes == code))
            raise SeqencError(f"column {name!r} row {row}: {e}") from None
    instant = np.array([isinstance(p, tuple) for p in parsed])
    if instant.any() and not instant.all():
        rows = [int(np.argmax(codes == np.argmax(instant == k))) for k in (True, False)]
        raise SeqencError(
            f"column {name!r} mixes instants (row {rows[0]}: {_shown(values.iloc[rows[0]])}) and "
            f"epoch numbers (row {rows[1]}: {_shown(values.iloc[rows[1]])}): give every row one "
            "form"
        )
    if not instant.all():
        return RowCuts(None, np.asarray(parsed, dtype=np.float64)[codes])
    ticks = np.array([t for t, _ in parsed], dtype=np.int64)[codes]
    return _instant_cuts(ticks, np.array([p for _, p in parsed], dtype=np.int64)[codes])


def reference_seconds(cut: np.ndarray | None, newest: np.ndarray) -> np.ndarray:
    """The time an entity's output is for, float epoch seconds: its cut-off where one is given,
    else (``cut`` ``None``, or NaN in a row) its own newest event (``newest``, aligned with
    ``cut``), never a time read from other entities. The one rule of the encoder's store
    (``dt_ref``, the query time) and of the aggregates (tenure, recency), so that an entity's
    output does not depend on what else is read with it."""
    if cut is None:
        return newest
    return np.where(np.isnan(cut), newest, cut)


def at_or_before(times: Times, cut: Cut | RowCuts) -> np.ndarray:
    """Which event ``times`` are at or before ``cut``: the one comparison of the project.

    ``cut`` is one :class:`Cut` for every event, or :class:`RowCuts` aligned with the events (each
    event's own row's cut-off). Instants compare on integer ticks (an event one nanosecond after
    the cut is out, one exactly at it is in); float seconds compare with the largest float at or
    before the cut (a per-row numeric cut-off: its own value)."""
    values, per_second = times
    if isinstance(cut, Cut):
        if per_second is None:
            return np.asarray(values) <= cut.float_floor
        return values <= cut.ticks(per_second)
    if per_second is not None and cut.ns is not None:  # t / p <= n / 1e9  <=>  t <= n // (1e9 / p)
        return values <= cut.ns // (NS // per_second)
    if per_second is not None:
        values = seconds(values, per_second)
    return np.asarray(values) <= cut.seconds


def ends_at_or_before(
    times: Times, starts: np.ndarray, ends: np.ndarray, cuts: RowCuts
) -> np.ndarray:
    """``[n]`` end (exclusive) of each row's events at or before its own cut-off, row ``i``'s
    events being ``times[starts[i]:ends[i]]`` in time order: a bisection, every step one
    :func:`at_or_before` of one event per row."""
    values, per_second = times
    lo, hi = np.asarray(starts, np.int64).copy(), np.asarray(ends, np.int64).copy()
    last = max(len(values) - 1, 0)
    while (lo < hi).any():
        mid = (lo + hi) // 2
        kept = at_or_before((values[np.minimum(mid, last)], per_second), cuts)
        open_ = lo < hi
        lo, hi = np.where(open_ & kept, mid + 1, lo), np.where(open_ & ~kept, mid, hi)
    return lo


def same_cut(a: Cut | None, b: Cut | None) -> bool:
    """Whether two cut-offs are the same instant (``None``, whole histories, only as ``None``)."""
    return a is b is None or (a is not None and b is not None and a.at == b.at)


def same_instants(cut: Cut | None, rows: RowCuts) -> np.ndarray:
    """Which ``rows`` cut-offs are exactly ``cut`` (``None``, whole histories: none), each way
    by :func:`at_or_before`: the row's cut-off is at or before ``cut``, and ``cut`` at or before
    the row's."""
    n = len(rows.seconds)
    if cut is None:
        return np.zeros(n, bool)
    if rows.ns is not None:
        return at_or_before((rows.ns, NS), cut) & at_or_before(
            (np.full(n, cut.ticks(NS)), NS), rows
        )
    here = (np.full(n, cut.float_floor), None)
    return at_or_before((rows.seconds, None), cut) & at_or_before(here, rows)
