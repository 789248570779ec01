"""Write the bundled synthetic sample: ``events.parquet`` (zstd) and its card ``README.md``.

Usage: ``python datasets/make_sample.py [--out datasets/sample]``. Deterministic: the same
seqenc version writes the same rows; ``tests/test_synthetic.py`` checks the committed file still
equals ``generate_events(**SAMPLE_PARAMS)``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from seqenc.data.synthetic import (
    GAP_MEDIAN_S,
    LENGTH_MEDIAN,
    P_FOLLOW,
    P_REPEAT,
    P_REPEAT_START,
    PEAK_HOURS,
    PERIOD_GAPS,
    PERIOD_JITTER,
    SESSION_BREAK,
    SESSION_MEAN,
    behaviour_profile,
    generate_events,
)

SAMPLE_PARAMS = {
    "n_entities": 3000,
    "n_items": 400,
    "n_types": 4,
    "seed": 0,
    "min_events": 3,
    "max_events": 2000,
    "start": "2024-01-01",
}
METADATA_KEY = b"seqenc.synthetic"


def card(df: pd.DataFrame, params: dict) -> str:
    """The sample's dataset card (Markdown), with counts computed from ``df``."""
    lengths = df.groupby("entity_id").size()
    per_type = df.groupby("account_type")["entity_id"].nunique()
    twin = int(params["n_types"]) - 1
    gap_medians = np.geomspace(*GAP_MEDIAN_S, params["n_types"])
    ordered = df.sort_values(["entity_id", "timestamp"], kind="stable")
    repeat_share = ordered.duplicated(["entity_id", "item_id"]).mean()
    type_rows = "\n".join(
        f"| {t} | {per_type[t]:,} | {p} | {_duration(g)} | {PEAK_HOURS[p % len(PEAK_HOURS)]:02.0f}:00 |"
        for t, (p, g) in enumerate(
            zip(behaviour_profile(params["n_types"]), gap_medians, strict=True)
        )
    )
    return f"""# seqenc synthetic sample (`events.parquet`)

A synthetic account-event log made by `seqenc.data.synthetic.generate_events` with planted structure
an encoder can learn and a test can check. Not real data: free to redistribute with the repo.

Regenerate with `python datasets/make_sample.py` (writes this card too). Parameters
(also stored in the Parquet schema metadata under `{METADATA_KEY.decode()}`):

```
{json.dumps(params)}
```

## Counts
- {len(df):,} events, {df["entity_id"].nunique():,} accounts, {df["item_id"].nunique():,} distinct item ids (of 0..{params["n_items"] - 1})
- events per account: min {lengths.min()}, median {int(lengths.median())}, max {lengths.max()}
- time range: {df["timestamp"].min()} … {df["timestamp"].max()}
- rows sorted by `timestamp` (like a log file); events of an account at least one second apart
- {repeat_share:.1%} of events repeat an item the account used before

## Columns
| column | dtype | meaning |
|---|---|---|
| `entity_id` | string | account id, `acct_000000` … |
| `item_id` | int64 | item id |
| `timestamp` | timestamp[ns, UTC] | event time (millisecond resolution) |
| `event_type` | categorical | view / click / cart / purchase / login |
| `channel` | categorical | web / app / api |
| `amount` | float64 | purchase amount (item-specific log-normal price); 0 for other events |
| `account_type` | int64 | latent account type — the **ground-truth label; never use it as a feature** |

## Planted structure
| account_type | accounts | behaviour profile | tempo (median gap in a session) | peak hour (UTC) |
|---|---|---|---|---|
{type_rows}

- Each profile has its own Zipf item preference (over a profile-specific permutation, mixed with shared
  popular items), a second one for night hours (22:00–06:00), its own event-type / channel mix, and item
  chains: within a session, with probability {P_FOLLOW} the next item is the profile's fixed successor
  of the previous item. Next-item prediction from the previous item beats popularity by a wide margin.
- Stream dynamics, all in units of the account's tempo: sessions of {SESSION_MEAN:g} events on average
  with {SESSION_BREAK:g}x longer gaps between them; repeats of recent events (probability {P_REPEAT} within a
  session, {P_REPEAT_START} at a session start; "repeat the recent items" beats popularity); an account-specific
  habit item revisited every {PERIOD_GAPS:g} tempos (±{PERIOD_JITTER:.0%}); a daily rhythm that crowds events into each
  profile's active hours.
- Types 0 and {twin} share profile 0 and differ **only** in their tempo: an order-only model cannot
  separate them, a time-aware one can.
- Ordinary history lengths are log-normal (median {LENGTH_MEDIAN:g}) clipped to [{params["min_events"]}, {params["max_events"]}],
  plus the habit revisits (clipped to the same maximum).

Load it with seqenc: `seqenc.data.loaders.load_dataset("datasets/sample/events.parquet", "events")`;
model features: `EventSchema(categorical=("event_type", "channel"), numeric=("amount",))` (the defaults
name `entity_id`, `item_id`, `timestamp`; leave `account_type` out).
"""


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def write_sample(out: Path) -> pd.DataFrame:
    """Generate the sample and write ``events.parquet`` and ``README.md`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    df = generate_events(**SAMPLE_PARAMS)
    table = pa.Table.from_pandas(df, preserve_index=False)
    metadata = {**table.schema.metadata, METADATA_KEY: json.dumps(SAMPLE_PARAMS).encode()}
    pq.write_table(
        table.replace_schema_metadata(metadata), out / "events.parquet", compression="zstd"
    )
    (out / "README.md").write_text(card(df, SAMPLE_PARAMS))
    return df


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "sample")
    args = parser.parse_args()
    df = write_sample(args.out)
    size = (args.out / "events.parquet").stat().st_size
    print(f"wrote {len(df):,} events ({size / 1e6:.2f} MB) to {args.out}")


if __name__ == "__main__":
    main()
