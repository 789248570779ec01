"""``seqenc items``, ``seqenc index`` and ``seqenc neighbours`` end to end on a tiny bundle, and
their bad input in one line: an output over an input, a file that is not Parquet, a folder that
is not an index, an unknown id, a query of another model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from tiny import tiny_bundle, tiny_events

from seqenc.cli import main
from seqenc.inference import load_encoder


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    events = tiny_events(n_entities=30)
    bundle = tiny_bundle(folder / "bundle", events)
    return folder, bundle, events


def error(capsys, argv: list[str]) -> str:
    """The one line a failing command prints."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_items_index_neighbours(made, capsys):
    folder, bundle, events = made
    main(["items", "--model", str(bundle), "--output", str(folder / "items.parquet")])
    assert "frequency: not stored in the bundle" in capsys.readouterr().out
    items = pq.read_table(folder / "items.parquet")
    expected = load_encoder(bundle, "cpu").items()
    assert items.column_names == ["item_id", "vector", "frequency_rank"]
    assert items["item_id"].to_pylist() == expected.item_id.tolist()
    main(["index", "--vectors", str(folder / "items.parquet"), "--output", str(folder / "ix")])
    assert "exact" in capsys.readouterr().out
    first = expected.item_id.iloc[0]
    out = folder / "near.parquet"
    main(
        [
            "neighbours",
            "--index",
            str(folder / "ix"),
            "--ids",
            str(first),
            "--k",
            "3",
            "--output",
            str(out),
        ]
    )
    near = pd.read_parquet(out)
    vectors = np.stack(expected.vector)
    scores = vectors @ vectors[0]
    scores[0] = -np.inf
    assert near["id"].tolist() == expected.item_id.iloc[np.argsort(-scores)[:3]].tolist()
    queries = load_encoder(bundle, "cpu").encode(events, query=True, output="arrow")
    pq.write_table(queries, folder / "queries.parquet")
    main(["neighbours", "--index", str(folder / "ix"), "--queries", str(folder / "queries.parquet"),
          "--output", str(out)])  # fmt: skip
    assert pd.read_parquet(out).groupby("query_id").size().eq(10).all()


def test_bad_input_is_one_line(made, capsys):
    folder, bundle, events = made
    config = str(bundle / "config.json")
    assert "is the input" in error(capsys, ["items", "--model", str(bundle), "--output", config])
    (folder / "notes.parquet").write_text("not parquet")
    line = error(
        capsys, ["index", "--vectors", str(folder / "notes.parquet"), "--output", str(folder / "x")]
    )
    assert "is not a readable Parquet file" in line
    (folder / "plain").mkdir(exist_ok=True)
    (folder / "plain" / "a.txt").write_text("x")
    main(["items", "--model", str(bundle), "--output", str(folder / "items.parquet")])
    line = error(
        capsys,
        ["index", "--vectors", str(folder / "items.parquet"), "--output", str(folder / "plain")],
    )
    assert "is not a seqenc index" in line
    main(["index", "--vectors", str(folder / "items.parquet"), "--output", str(folder / "ix2")])
    out = str(folder / "n.parquet")
    line = error(
        capsys, ["neighbours", "--index", str(folder / "plain"), "--ids", "1", "--output", out]
    )
    assert "is not a seqenc index" in line
    line = error(
        capsys, ["neighbours", "--index", str(folder / "ix2"), "--ids", "-77", "--output", out]
    )
    assert "not in the index" in line
    events.drop(columns="account_type").to_parquet(folder / "events.parquet")
    line = error(capsys, ["neighbours", "--index", str(folder / "ix2"), "--queries",
                          str(folder / "events.parquet"), "--output", out])  # fmt: skip
    assert "names no seqenc model and space" in line
