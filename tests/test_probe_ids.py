"""``seqenc probe`` joins labels and feature sets on the entity id: both must type it alike."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from seqenc.cli import main as cli_main


def main(argv: list[str]) -> None:
    """``seqenc probe ...``."""
    cli_main(["probe", *argv])


@pytest.mark.parametrize("per_row", [False, True])
def test_integer_label_ids_against_text_embedding_ids_fail_in_one_line(tmp_path, capsys, per_row):
    """Issue 28: this was a pandas merge traceback."""
    n = 12
    labels = pd.DataFrame({"entity_id": np.arange(n), "y": np.arange(n) % 2})
    if per_row:
        labels["as_of"] = pd.Timestamp("2024-01-01", tz="UTC")
    labels.to_parquet(tmp_path / "labels.parquet")
    vectors = np.ones((n, 4), dtype=np.float32)
    emb = pd.DataFrame({"entity_id": [str(i) for i in range(n)], "embedding": list(vectors)})
    emb.to_parquet(tmp_path / "emb.parquet")
    argv = ["--labels", str(tmp_path / "labels.parquet"), "--label-column", "y"]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--embeddings", str(tmp_path / "emb.parquet")])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert "'entity_id' ids are integers (int64)" in err and "ids are text" in err
    assert "emb.parquet" in err and "\n" not in err


def test_events_with_other_id_types_than_the_labels_cut_offs_fail_in_one_line(tmp_path, capsys):
    """Aggregates at per-row cut-offs join the labels to the events: the same one-line check."""
    n = 12
    labels = pd.DataFrame({"entity_id": np.arange(n), "y": np.arange(n) % 2})
    labels["as_of"] = pd.Timestamp("2024-01-02", tz="UTC")
    labels.to_parquet(tmp_path / "labels.parquet")
    events = pd.DataFrame(
        {
            "entity_id": [f"{i:03d}" for i in range(n)],
            "item_id": ["a"] * n,
            "timestamp": pd.Timestamp("2024-01-01", tz="UTC"),
        }
    )
    events.to_parquet(tmp_path / "events.parquet")
    argv = ["--labels", str(tmp_path / "labels.parquet"), "--label-column", "y"]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--events", str(tmp_path / "events.parquet")])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert "ids are integers (int64)" in err and "events' ids are text" in err and "\n" not in err
