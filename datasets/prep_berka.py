"""Berka (PKDD'99 Czech bank) tables -> a seqenc event log and leakage-safe per-account labels.

Usage::

    python datasets/prep_berka.py --data ../shared/data/berka --out DIR

writes ``DIR/berka_events.parquet`` (one row per transaction) and ``DIR/berka_labels.parquet``
(one row per account and label cut-off). The data are research-use only: never commit the outputs.
See ``datasets/cards/berka.md`` for the columns, the tasks and their leakage rules.

Events: ``account_id`` (entity), ``item`` = ``type|operation|k_symbol`` (the transaction category,
``-`` for an empty field), ``timestamp`` (UTC midnight of the booking day), categorical ``type``,
``operation``, ``k_symbol``, ``bank`` and numeric ``amount``, ``balance`` (CZK). Rows keep the file
order (by date), so same-day ties keep it too.

Labels: every account with a transaction gets one *static* row (``as_of`` = the last date in the
log) with ``gender``, ``age``, ``age_group``, ``region`` and ``statement``; every account with a
loan also gets one *loan* row whose ``as_of`` is the day before the loan (or the log's end if that
comes first), with ``loan_default`` and ``loan_status``; a loan with no transaction at or before its
``as_of`` has no row. Every account with a transaction and no loan at or before one common cut-off
(the log's last day) gets one *propensity* row with ``loan_next_12m``: 1 if it is granted a loan in
the 12 months after the cut-off. A column is null on the rows of the other kinds: select a task by
dropping the nulls of its column and read each row's events up to its ``as_of``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
from prep_common import PrepError, prep_main

# The day after the full Berka data's last day (1998-12-31): no loan after it is known.
DATA_END = pd.Timestamp("1999-01-01")
# Age is measured at one fixed date for every account (the end of the full Berka data), so the
# label does not depend on the cut-off of the log.
AGE_REFERENCE = DATA_END
HORIZON = pd.DateOffset(months=12)  # the loan-propensity window after its cut-off
EMPTY = "-"
STATEMENTS = {  # account.asc frequency -> statement label
    "POPLATEK MESICNE": "monthly",
    "POPLATEK TYDNE": "weekly",
    "POPLATEK PO OBRATU": "after_transaction",
}
TRANS_COLUMNS = ["trans_id", "account_id", "date", "type", "operation", "amount", "balance"]
TRANS_COLUMNS += ["k_symbol", "bank", "account"]


def read_table(path: Path, columns: list[str]) -> pd.DataFrame:
    """One ``;``-separated Berka table with a header; a cut-off last line is dropped."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PrepError(f"cannot read {str(path)!r}: {e.strerror}") from e
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        print(f"{path.name}: dropped a cut-off last line {data[cut:][:40]!r}", file=sys.stderr)
        data = data[:cut]
    try:
        df = pd.read_csv(pa.BufferReader(data), sep=";", dtype=str, keep_default_na=False)
    except (ValueError, pd.errors.ParserError) as e:
        raise PrepError(f"malformed table {str(path)!r}: {e}") from e
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise PrepError(f"{str(path)!r} has no column {missing[0]!r} (columns: {list(df.columns)})")
    return df[columns]


def to_int(df: pd.DataFrame, column: str, path: Path) -> pd.Series:
    """An integer column; names the first bad row."""
    values = pd.to_numeric(df[column].str.strip(), errors="coerce")
    bad = values.isna() | (values != values.round())
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise PrepError(
            f"{path.name}: column {column!r} row {row + 2} is not an integer: {df[column].iloc[row]!r}"
        )
    return values.astype("int64")


def to_float(df: pd.DataFrame, column: str, path: Path) -> pd.Series:
    values = pd.to_numeric(df[column].str.strip(), errors="coerce")
    if values.isna().any():
        row = int(np.flatnonzero(values.isna().to_numpy())[0])
        raise PrepError(
            f"{path.name}: column {column!r} row {row + 2} is not a number: {df[column].iloc[row]!r}"
        )
    return values.astype("float64")


def to_date(df: pd.DataFrame, column: str, path: Path) -> pd.Series:
    """Berka ``YYMMDD`` dates (all 19YY) as timezone-naive midnight timestamps."""
    text = "19" + df[column].str.strip()
    dates = pd.to_datetime(text, format="%Y%m%d", errors="coerce")
    if dates.isna().any():
        row = int(np.flatnonzero(dates.isna().to_numpy())[0])
        raise PrepError(
            f"{path.name}: column {column!r} row {row + 2} is not a YYMMDD date: {df[column].iloc[row]!r}"
        )
    return dates


def token(values: pd.Series) -> pd.Series:
    """A categorical field with blanks (empty or a single space) replaced by ``-``."""
    stripped = values.str.strip()
    return stripped.where(stripped != "", EMPTY)


def events_table(data: Path) -> pd.DataFrame:
    path = data / "trans.asc"
    raw = read_table(path, TRANS_COLUMNS)
    kinds = {c: token(raw[c]) for c in ["type", "operation", "k_symbol", "bank"]}
    events = pd.DataFrame(
        {
            "account_id": to_int(raw, "account_id", path),
            "item": kinds["type"] + "|" + kinds["operation"] + "|" + kinds["k_symbol"],
            "timestamp": to_date(raw, "date", path).dt.tz_localize("UTC"),
            **kinds,
            "amount": to_float(raw, "amount", path),
            "balance": to_float(raw, "balance", path),
        }
    )
    # The file is by date; a stable sort keeps its order within a day (which means nothing).
    return events.sort_values("timestamp", kind="stable", ignore_index=True)


def static_labels(data: Path, accounts: pd.Index, as_of: pd.Timestamp) -> pd.DataFrame:
    """Owner gender, age (at AGE_REFERENCE) and its quartile group, the account's region and its
    statement frequency (monthly, weekly, after each transaction: chosen by the owner)."""
    disp = read_table(data / "disp.asc", ["client_id", "account_id", "type"])
    client = read_table(data / "client.asc", ["client_id", "birth_number"])
    account = read_table(data / "account.asc", ["account_id", "district_id", "frequency"])
    district = read_table(data / "district.asc", ["A1", "A3"])
    owners = disp[disp["type"].str.strip() == "OWNER"]
    owners = pd.DataFrame(
        {
            "account_id": to_int(owners, "account_id", data / "disp.asc"),
            "client_id": to_int(owners, "client_id", data / "disp.asc"),
        }
    )
    birth = to_int(client, "birth_number", data / "client.asc")
    year, month, day = 1900 + birth // 10000, birth // 100 % 100, birth % 100
    female = month > 50
    born = pd.to_datetime(
        pd.DataFrame({"year": year, "month": month - 50 * female, "day": day}), errors="coerce"
    )
    clients = pd.DataFrame(
        {
            "client_id": to_int(client, "client_id", data / "client.asc"),
            "gender": np.where(female, "F", "M"),
            "age": (AGE_REFERENCE - born).dt.days / 365.25,
        }
    )
    regions = pd.DataFrame(
        {"district_id": to_int(district, "A1", data / "district.asc"), "region": district["A3"]}
    )
    accounts_df = pd.DataFrame(
        {
            "account_id": to_int(account, "account_id", data / "account.asc"),
            "district_id": to_int(account, "district_id", data / "account.asc"),
            "statement": account["frequency"].str.strip().map(STATEMENTS),
        }
    )
    unknown = accounts_df["statement"].isna()
    if unknown.any():
        value = account["frequency"][unknown.to_numpy()].iloc[0]
        raise PrepError(
            f"account.asc: column 'frequency' has {value!r}, not one of {list(STATEMENTS)}"
        )
    owner = owners.merge(clients, on="client_id", how="left")
    if owner["account_id"].duplicated().any():
        dup = owner.loc[owner["account_id"].duplicated(), "account_id"].iloc[0]
        raise PrepError(f"disp.asc: account_id {dup} has more than one OWNER")
    out = pd.DataFrame({"account_id": accounts})
    out = out.merge(owner[["account_id", "gender", "age"]], on="account_id", how="left")
    out = out.merge(accounts_df, on="account_id", how="left").merge(
        regions, on="district_id", how="left"
    )
    # Quartiles over the accounts that are labelled here, so the four groups have equal size.
    out["age_group"] = pd.qcut(out["age"], 4, labels=False).astype("Int64")
    out["as_of"] = as_of
    return out[["account_id", "as_of", "gender", "age", "age_group", "region", "statement"]]


def read_loans(data: Path) -> pd.DataFrame:
    """``loan.asc`` as ``account_id``, ``loan_date`` (UTC midnight) and ``loan_status`` (A/B/C/D)."""
    path = data / "loan.asc"
    loan = read_table(path, ["account_id", "date", "amount", "status"])
    loans = pd.DataFrame(
        {
            "account_id": to_int(loan, "account_id", path),
            "loan_date": to_date(loan, "date", path).dt.tz_localize("UTC"),
            "loan_status": loan["status"].str.strip(),
        }
    )
    bad = ~loans["loan_status"].isin(list("ABCD"))
    if bad.any():
        raise PrepError(
            f"loan.asc: column 'status' has {loans['loan_status'][bad].iloc[0]!r}, not A/B/C/D"
        )
    return loans


def loan_labels(loans: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """One row per loan: default (status B or D) read from the transactions before the loan day."""
    loans = loans.copy()
    log_end = events["timestamp"].max()
    loans["as_of"] = (loans["loan_date"] - pd.Timedelta(days=1)).clip(upper=log_end)
    first = events.groupby("account_id")["timestamp"].min()
    loans = loans[loans["account_id"].map(first) <= loans["as_of"]]
    loans["loan_default"] = loans["loan_status"].isin(["B", "D"]).astype("int64")
    return loans[["account_id", "as_of", "loan_default", "loan_status"]]


def propensity_labels(loans: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """Loan propensity at one common cut-off: ``loan_next_12m`` = 1 if the account is granted a loan
    in the ``HORIZON`` after it (the cut-off day excluded), else 0.

    The cut-off is the log's last day, or earlier if the window would pass the end of the full data
    (so every window is fully observed). Rows: the accounts with a transaction at or before the
    cut-off and no loan at or before it (a running loan's repayments would give the answer away).
    """
    cutoff = min(events["timestamp"].max(), DATA_END.tz_localize("UTC") - HORIZON)
    first = events.groupby("account_id")["timestamp"].min()
    had_loan = loans.loc[loans["loan_date"] <= cutoff, "account_id"]
    window = (loans["loan_date"] > cutoff) & (loans["loan_date"] <= cutoff + HORIZON)
    accounts = first.index[(first <= cutoff) & ~first.index.isin(had_loan)]
    granted = accounts.isin(loans.loc[window, "account_id"])
    return pd.DataFrame(
        {"account_id": accounts, "as_of": cutoff, "loan_next_12m": granted.astype("int64")}
    )


def labels_table(data: Path, events: pd.DataFrame) -> pd.DataFrame:
    accounts = pd.Index(np.sort(events["account_id"].unique()))
    static = static_labels(data, accounts, events["timestamp"].max())
    loans = read_loans(data)
    labels = pd.concat(
        [static, loan_labels(loans, events), propensity_labels(loans, events)], ignore_index=True
    )
    labels["gender"] = labels["gender"].astype("string")
    labels["region"] = labels["region"].astype("string")
    labels["statement"] = labels["statement"].astype("string")
    labels["loan_status"] = labels["loan_status"].astype("string")
    labels["loan_default"] = labels["loan_default"].astype("Int64")
    labels["loan_next_12m"] = labels["loan_next_12m"].astype("Int64")
    return labels.sort_values(["account_id", "as_of"], ignore_index=True)


def prepare(data: Path) -> dict[str, pd.DataFrame]:
    events = events_table(data)
    return {"berka_events.parquet": events, "berka_labels.parquet": labels_table(data, events)}


def summary(tables: dict[str, pd.DataFrame], out: Path) -> str:
    events, labels = tables["berka_events.parquet"], tables["berka_labels.parquet"]
    n_loans = int(labels["loan_default"].notna().sum())
    propensity = labels["loan_next_12m"].dropna()
    return (
        f"{len(events)} events of {events['account_id'].nunique()} accounts, "
        f"{events['item'].nunique()} categories, {events['timestamp'].min().date()} .. "
        f"{events['timestamp'].max().date()} -> {out / 'berka_events.parquet'}\n"
        f"{int(labels['gender'].notna().sum())} static label rows, {n_loans} loan rows "
        f"({int(labels['loan_default'].sum())} defaults), {len(propensity)} propensity rows "
        f"({int(propensity.sum())} with a loan in the next 12 months) -> "
        f"{out / 'berka_labels.parquet'}"
    )


def main(argv: list[str] | None = None) -> int:
    return prep_main(__doc__, "../shared/data/berka", prepare, summary, argv)


if __name__ == "__main__":
    sys.exit(main())
