"""PhysioNet/CinC 2012 ICU stays (set B) -> a seqenc event log and one mortality label per stay.

Usage::

    python datasets/prep_physionet.py --data ../shared/data/physionet2012-b --out DIR

writes ``DIR/physionet_events.parquet`` (one row per measurement) and
``DIR/physionet_labels.parquet`` (one row per stay). The data are PhysioNet "Challenge Open Access":
read them from ``../shared/data``, never commit the outputs. See ``datasets/cards/physionet2012.md``.

Events: ``stay_id`` (entity), ``parameter`` (item: one of the 37 time series, or a descriptor
``Age``, ``Gender``, ``Height``, ``ICUType``), ``timestamp`` (a common admission time, 2012-01-01
00:00 UTC, plus the record's ``hh:mm``) and numeric ``value`` in the parameter's own unit. A
descriptor of -1 (missing) is left out. Labels: ``stay_id``, ``as_of`` (admission + 48 h: every
event is before it) and ``in_hospital_death`` (0/1). The outcome file's other columns (SAPS-I,
SOFA, length of stay, survival) describe the future and are not kept.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
from prep_common import PrepError, prep_main

ADMISSION = pd.Timestamp("2012-01-01", tz="UTC")
WINDOW = pd.Timedelta(hours=48)
DESCRIPTORS = ("Age", "Gender", "Height", "ICUType")


def read_records(archive: Path) -> pd.DataFrame:
    """Every ``set-b/<id>.txt`` of the archive as (stay_id, minutes, parameter, value) rows."""
    frames = []
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar:
                if not (member.isfile() and member.name.endswith(".txt")):
                    continue
                text = tar.extractfile(member).read().decode()
                df = pd.read_csv(io.StringIO(text), dtype={"Time": str, "Parameter": str})
                df["stay_id"] = int(Path(member.name).stem)
                frames.append(df)
    except (OSError, tarfile.TarError) as e:
        raise PrepError(f"cannot read {str(archive)!r}: {e}") from e
    if not frames:
        raise PrepError(f"{str(archive)!r} holds no record files")
    raw = pd.concat(frames, ignore_index=True)
    hours, minutes = raw["Time"].str.split(":", expand=True).astype(int).T.to_numpy()
    raw["minutes"] = hours * 60 + minutes
    return raw.rename(columns={"Parameter": "parameter", "Value": "value"})


def prepare(data: Path) -> dict[str, pd.DataFrame]:
    raw = read_records(data / "set-b.tar.gz")
    raw = raw[raw["parameter"] != "RecordID"]
    missing_descriptor = raw["parameter"].isin(DESCRIPTORS) & (raw["value"] == -1)
    raw = raw[~missing_descriptor & raw["value"].notna()]
    events = pd.DataFrame(
        {
            "stay_id": raw["stay_id"].to_numpy(np.int64),
            "parameter": raw["parameter"].to_numpy(str),
            "timestamp": ADMISSION + pd.to_timedelta(raw["minutes"].to_numpy(), unit="min"),
            "value": raw["value"].to_numpy(np.float64),
        }
    )
    # Record order within a stay is the file's; stable sort keeps it among equal times.
    events = events.sort_values(["stay_id", "timestamp"], kind="stable", ignore_index=True)
    try:
        outcomes = pd.read_csv(data / "Outcomes-b.txt")
    except OSError as e:
        raise PrepError(f"cannot read the outcomes: {e}") from e
    labels = pd.DataFrame(
        {
            "stay_id": outcomes["RecordID"].astype(np.int64),
            "as_of": ADMISSION + WINDOW,
            "in_hospital_death": outcomes["In-hospital_death"].astype(np.int64),
        }
    )
    unknown = set(labels["stay_id"]) ^ set(events["stay_id"])
    if unknown:
        raise PrepError(f"{len(unknown)} stays are in only one of records and outcomes")
    return {"physionet_events.parquet": events, "physionet_labels.parquet": labels}


def summary(tables: dict[str, pd.DataFrame], out: Path) -> str:
    events, labels = tables["physionet_events.parquet"], tables["physionet_labels.parquet"]
    per_stay = events.groupby("stay_id").size()
    return (
        f"{out}: {len(events):,} events of {len(labels):,} stays "
        f"({events['parameter'].nunique()} parameters; median {per_stay.median():.0f}, "
        f"95th percentile {per_stay.quantile(0.95):.0f} events a stay); "
        f"in-hospital death {labels['in_hospital_death'].mean():.1%}"
    )


if __name__ == "__main__":
    raise SystemExit(prep_main(__doc__, "../shared/data/physionet2012-b", prepare, summary))
