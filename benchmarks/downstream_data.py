"""The labelled event logs of ``benchmarks/downstream.py``: where each comes from, its schema, its
tasks, and the rows a task is scored on."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from seqenc import EventSchema
from seqenc.data.aggregates import VALUE_STATS

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Dataset:
    """What the benchmark needs to know of one labelled event log."""

    config: str
    prep: str  # datasets/ script writing events, training events and labels into a folder
    events: str  # file names in that folder
    train: str
    labels: str
    schema: EventSchema
    on: list[str]
    tasks: dict[str, str]  # task -> metric
    tree_tasks: list[str]  # the tasks the tree probe runs on (all but controls)
    source: str  # its folder under ../shared/data
    max_categories: dict[str, int] = field(default_factory=dict)
    value_stats: tuple[str, ...] = ()  # aggregate_features' per-value numeric summaries
    reference_gru: bool = False  # also the GRU on hourly bins (ICU stays) in --folds mode
    fit_options: list[str] = field(default_factory=list)  # `seqenc fit` options of every fit


DATASETS = {
    "tafeng": Dataset(
        config="configs/tafeng.yaml",
        prep="datasets/prep_tafeng.py",
        events="tafeng_events.parquet",
        train="tafeng_train.parquet",
        labels="tafeng_labels.parquet",
        schema=EventSchema(
            entity="customer_id",
            item="product_id",
            timestamp="timestamp",
            categorical=["subclass"],
            numeric=["amount", "price"],
        ),
        on=["customer_id", "as_of"],
        tasks={
            "age_group": "roc_auc",
            "age_under_35": "roc_auc",
            "area": "roc_auc",
            "buys_february": "roc_auc",
            "february_spend": "r2",
        },
        tree_tasks=["age_group", "age_under_35", "buys_february", "february_spend"],
        source="ta-feng",
        # The most frequent 100 subclasses (of 2,012) and 50 products (of 23,812): counts, shares
        # and spend shares of each, plus an "<other>" column.
        max_categories={"subclass": 100, "product_id": 50},
    ),
    "berka": Dataset(
        config="configs/berka.yaml",
        prep="datasets/prep_berka.py",
        events="berka_events.parquet",
        train="berka_events.parquet",
        labels="berka_labels.parquet",
        schema=EventSchema(
            entity="account_id",
            item="item",
            timestamp="timestamp",
            categorical=["type", "operation", "k_symbol", "bank"],
            numeric=["amount", "balance"],
        ),
        on=["account_id", "as_of"],
        tasks={
            "gender": "roc_auc",
            "age_group": "roc_auc",
            "region": "roc_auc",
            "statement": "roc_auc",
            "loan_default": "roc_auc",
            "loan_next_12m": "roc_auc",
            "age": "r2",
        },
        tree_tasks=["gender", "age_group", "statement", "loan_default", "loan_next_12m", "age"],
        source="berka",
    ),
    "physionet": Dataset(
        config="configs/account_events.yaml",  # the documented config of an account-like log
        prep="datasets/prep_physionet.py",
        events="physionet_events.parquet",
        train="physionet_events.parquet",
        labels="physionet_labels.parquet",
        schema=EventSchema(
            entity="stay_id", item="parameter", timestamp="timestamp", numeric=["value"]
        ),
        on=["stay_id", "as_of"],
        tasks={"in_hospital_death": "roc_auc"},
        tree_tasks=["in_hospital_death"],
        source="physionet2012-b",
        # every one of the 41 parameters gets its own columns, with its values' mean, min, max
        # and last: a clinician's per-parameter summary
        max_categories={"parameter": 64},
        value_stats=VALUE_STATS,
        reference_gru=True,
        # the schema on the command line, as a user of a generic config gives it
        fit_options=[
            "--data.schema.entity",
            "stay_id",
            "--data.schema.item",
            "parameter",
            "--data.schema.categorical",
            "[]",
            "--data.schema.numeric",
            "[value]",
        ],  # fmt: skip
    ),
}
SAMPLE = ROOT / "datasets/sample/events.parquet"
SAMPLE_TASKS = {"account_type": "roc_auc"}
SAMPLE_SCHEMA = EventSchema(categorical=["event_type", "channel"], numeric=["amount"])


def prepare(dataset: Dataset, data: str, work: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The data set's prep script from ``data`` into ``work``: its events and labels tables."""
    work.mkdir(parents=True, exist_ok=True)
    prep = [sys.executable, str(ROOT / dataset.prep), "--data", data]
    subprocess.run([*prep, "--out", str(work)], check=True, cwd=ROOT)
    return pd.read_parquet(work / dataset.events), pd.read_parquet(work / dataset.labels)


def entity_subset(labels: pd.DataFrame, entity: str, n: int | None) -> pd.DataFrame:
    """The label rows of a fixed draw of ``n`` entities (all with ``None``)."""
    ids = labels[entity].drop_duplicates().sort_values()
    if n is None or n >= len(ids):
        return labels
    drawn = ids.sample(n, random_state=0)
    return labels[labels[entity].isin(drawn)].reset_index(drop=True)


def task_rows(
    labels: pd.DataFrame, features: pd.DataFrame, task: str, on: list[str]
) -> pd.DataFrame:
    """The rows a task is scored on: labelled, with features; their order fixes the folds."""
    return labels[labels[task].notna()][[*on, task]].merge(features[on], on=on, how="inner")
