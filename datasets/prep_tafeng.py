"""Ta-Feng supermarket line items -> a seqenc event log and leakage-safe per-customer labels.

Usage::

    python datasets/prep_tafeng.py --data ../shared/data/ta-feng --out DIR

writes three Parquet files (research use only: never commit them; see ``datasets/cards/ta-feng.md``):

- ``DIR/tafeng_events.parquet``: every line item, one row each: ``customer_id`` (8-digit text, kept
  as text), ``product_id`` (barcode text), ``timestamp`` (UTC midnight of the day), categorical
  ``subclass`` (product subclass), numeric ``amount`` (units) and ``price`` (the line's sales total).
- ``DIR/tafeng_train.parquet``: the same rows up to the forward cut-off (``CUTOFF``, 2001-01-31
  inclusive): the only events a model may be trained on, so that no task's input or label is seen in
  training beyond what its own cut-off allows.
- ``DIR/tafeng_labels.parquet``: one *static* row per customer with a label (``as_of`` = the log's
  last day): ``age_group`` (10 bins as text), ``age_under_35`` (0/1), ``area`` (residence code); and
  one *forward* row per customer with an event on or before ``CUTOFF`` (``as_of`` = ``CUTOFF``):
  ``buys_february`` (0/1: a purchase in February 2001) and ``february_spend`` (log1p of February's
  sales total, 0 without a purchase). A column is null on the rows of the other kind.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
from prep_common import PrepError, prep_main

CUTOFF = pd.Timestamp("2001-01-31", tz="UTC")  # forward tasks: inputs on or before this day
FILE = "ta_feng.csv.zip"
COLUMNS = {
    "TRANSACTION_DT": "date",
    "CUSTOMER_ID": "customer_id",
    "AGE_GROUP": "age_group",
    "PIN_CODE": "area",
    "PRODUCT_SUBCLASS": "subclass",
    "PRODUCT_ID": "product_id",
    "AMOUNT": "amount",
    "SALES_PRICE": "price",
}
UNDER_35 = {"<25", "25-29", "30-34"}


def read_raw(data: Path) -> pd.DataFrame:
    """The published zip as text columns (ids keep their leading zeros)."""
    path = data / FILE
    try:
        raw = pd.read_csv(path, dtype=str, encoding="utf-8-sig", keep_default_na=False)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise PrepError(f"cannot read {str(path)!r}: {e}") from e
    missing = [c for c in COLUMNS if c not in raw.columns]
    if missing:
        raise PrepError(
            f"{str(path)!r} has no column {missing[0]!r} (columns: {list(raw.columns)})"
        )
    df = raw[list(COLUMNS)].rename(columns=COLUMNS)
    for column in ("customer_id", "product_id", "subclass", "date"):
        empty = df[column].str.strip() == ""
        if empty.any():
            raise PrepError(f"{path.name}: row {int(np.flatnonzero(empty)[0])} has no {column}")
    return df


def to_number(df: pd.DataFrame, column: str) -> np.ndarray:
    values = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise PrepError(f"{FILE}: row {row}: {column} is not a number: {df[column].iloc[row]!r}")
    return values


def events_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per line item, in file order (same-day ties: seqenc orders them by product)."""
    day = pd.to_datetime(df["date"], format="%m/%d/%Y", errors="coerce", utc=True)
    if day.isna().any():
        row = int(np.flatnonzero(day.isna())[0])
        raise PrepError(
            f"{FILE}: row {row}: TRANSACTION_DT {df['date'].iloc[row]!r} is not m/d/yyyy"
        )
    return pd.DataFrame(
        {
            "customer_id": df["customer_id"].to_numpy(),
            "product_id": df["product_id"].to_numpy(),
            "timestamp": day.dt.as_unit("us"),
            "subclass": df["subclass"].to_numpy(),
            "amount": to_number(df, "amount"),
            "price": to_number(df, "price"),
        }
    )


def one_per_customer(df: pd.DataFrame, column: str) -> pd.Series:
    """The customer's value of a column that never changes (checked); blank = null."""
    values = df[["customer_id", column]].drop_duplicates()
    dup = values["customer_id"].duplicated()
    if dup.any():
        raise PrepError(f"customer {values['customer_id'][dup].iloc[0]} has two values of {column}")
    out = values.set_index("customer_id")[column].str.strip()
    return out.where(out != "")


def labels_table(df: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """Static rows (age, area at the log's end) and forward rows (February, from January's end)."""
    age = one_per_customer(df, "age_group")
    area = one_per_customer(df, "area")
    static = pd.DataFrame({"customer_id": age.index, "as_of": events["timestamp"].max()})
    static["age_group"] = age.to_numpy()
    static["age_under_35"] = age.isin(UNDER_35).astype(float).where(age.notna()).to_numpy()
    static["area"] = area.loc[age.index].to_numpy()
    static = static[static["age_group"].notna() | static["area"].notna()]
    before = events[events["timestamp"] <= CUTOFF]
    february = events[events["timestamp"] > CUTOFF]
    spend = february.groupby("customer_id")["price"].sum()
    forward = pd.DataFrame(
        {"customer_id": np.sort(before["customer_id"].unique()), "as_of": CUTOFF}
    )
    got = spend.reindex(forward["customer_id"]).to_numpy()
    forward["buys_february"] = np.isfinite(got).astype(float)
    forward["february_spend"] = np.log1p(np.nan_to_num(got, nan=0.0))
    return pd.concat([static, forward], ignore_index=True).sort_values(
        ["customer_id", "as_of"], kind="stable", ignore_index=True
    )


def prepare(data: Path) -> dict[str, pd.DataFrame]:
    raw = read_raw(data)
    events = events_table(raw)
    return {
        "tafeng_events.parquet": events,
        "tafeng_train.parquet": events[events["timestamp"] <= CUTOFF],
        "tafeng_labels.parquet": labels_table(raw, events),
    }


def summary(tables: dict[str, pd.DataFrame], out: Path) -> str:
    events, labels = tables["tafeng_events.parquet"], tables["tafeng_labels.parquet"]
    return (
        f"{len(events):,} events of {events['customer_id'].nunique():,} customers "
        f"({len(tables['tafeng_train.parquet']):,} up to {CUTOFF.date()}); "
        f"{int(labels['age_group'].notna().sum()):,} age labels, "
        f"{int(labels['buys_february'].notna().sum()):,} forward rows -> {out}"
    )


def main(argv: list[str] | None = None) -> int:
    return prep_main(__doc__, "../shared/data/ta-feng", prepare, summary, argv)


if __name__ == "__main__":
    sys.exit(main())
