"""BPI Challenge 2013 incidents (CSV of Tax et al. 2017) -> a seqenc event log.

Usage::

    python datasets/prep_bpic2013.py --data ../shared/data/bpic2013 --out DIR

writes ``DIR/bpic2013_events.parquet``, one row per event: ``case_id`` (the ticket, entity),
``activity`` (the status token ``A1`` .. ``A13``, item) and ``timestamp`` (minute resolution). The
CSV has no other column: the original log's resource, org group, impact and product fields are not
in it, so the log has no categorical or numeric event features. The data must not be committed.
See ``datasets/cards/bpic2013.md``.

Times are local (Volvo IT Belgium) with no offset in the file; they are written as UTC wall-clock
values unchanged, so gaps are exact and hours of day are local. Rows keep the file order within a
ticket and minute (the CSV is grouped by case and in time order).

    seqenc fit --config configs/X.yaml --data.path DIR/bpic2013_events.parquet \\
        --data.schema.entity case_id --data.schema.item activity
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
from prep_common import PrepError, prep_main

FILE = "bpi_13_incidents.csv"
COLUMNS = ["CaseID", "ActivityID", "CompleteTimestamp"]


def read_log(path: Path) -> pd.DataFrame:
    """The three CSV columns as strings; names the file and the missing column."""
    try:
        table = pacsv.read_csv(
            path,
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(COLUMNS, pa.string()), include_columns=COLUMNS
            ),
        )
    except FileNotFoundError as e:
        raise PrepError(f"cannot read {str(path)!r}: no such file") from e
    except (OSError, pa.ArrowException) as e:
        raise PrepError(f"cannot read {str(path)!r} as CSV with columns {COLUMNS}: {e}") from e
    if table.num_rows == 0:
        raise PrepError(f"{str(path)!r} has no events")
    return table.to_pandas()


def first_bad(mask: pd.Series, values: pd.Series, column: str, path: Path, expected: str) -> None:
    """Raise naming the first row (1-based file line) where ``mask`` is true."""
    if mask.any():
        row = int(np.flatnonzero(mask.to_numpy())[0])
        raise PrepError(
            f"{path.name}: column {column!r} line {row + 2} is not {expected}: {values.iloc[row]!r}"
        )


def events_table(data: Path) -> pd.DataFrame:
    path = data / FILE
    raw = read_log(path)
    case = raw["CaseID"].str.strip()
    first_bad(case.isna() | (case == ""), raw["CaseID"], "CaseID", path, "a ticket id")
    activity = pd.to_numeric(raw["ActivityID"].str.strip(), errors="coerce")
    bad = activity.isna() | (activity != activity.round()) | (activity < 1)
    first_bad(bad, raw["ActivityID"], "ActivityID", path, "a positive integer")
    times = pd.to_datetime(raw["CompleteTimestamp"], format="%Y-%m-%d %H:%M:%S", errors="coerce")
    first_bad(times.isna(), raw["CompleteTimestamp"], "CompleteTimestamp", path, "a time")
    events = pd.DataFrame(
        {
            "case_id": case,
            "activity": "A" + activity.astype("int64").astype(str),
            "timestamp": times.dt.tz_localize("UTC"),
        }
    )
    # Stable: same-minute events of a ticket keep the file order (the log's own order).
    return events.sort_values(["case_id", "timestamp"], kind="stable", ignore_index=True)


def repeat_share(events: pd.DataFrame) -> float:
    """Share of events whose activity already occurred earlier in the same ticket."""
    return float(events.duplicated(["case_id", "activity"]).mean())


def summary(tables: dict[str, pd.DataFrame], out: Path) -> str:
    events = tables["bpic2013_events.parquet"]
    return (
        f"{len(events)} events of {events['case_id'].nunique()} tickets, "
        f"{events['activity'].nunique()} activities, repeat share {repeat_share(events):.3f}, "
        f"{events['timestamp'].min()} .. {events['timestamp'].max()} -> "
        f"{out / 'bpic2013_events.parquet'}"
    )


def main(argv: list[str] | None = None) -> int:
    def prepare(data: Path) -> dict[str, pd.DataFrame]:
        return {"bpic2013_events.parquet": events_table(data)}

    return prep_main(__doc__, "../shared/data/bpic2013", prepare, summary, argv)


if __name__ == "__main__":
    sys.exit(main())
