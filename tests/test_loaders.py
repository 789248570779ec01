"""Dataset readers on tiny files written here, and on the real files in ../shared/data."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seqenc.data.loaders import (
    detect_format,
    load_dataset,
    read_event_log,
    read_ml1m_sequences,
    read_movielens,
    read_movielens_latest,
    read_sasrec_txt,
)
from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError

RATINGS = pd.DataFrame(
    {
        "entity_id": [1, 1, 2],
        "item_id": [1193, 661, 914],
        "rating": [5.0, 3.5, 1.0],
        "timestamp": [978300760, 978302109, 978301968],
    }
)


def test_movielens_dat_and_udata(tmp_path):
    (tmp_path / "ratings.dat").write_text(
        "1::1193::5::978300760\n1::661::3.5::978302109\n2::914::1::978301968\n"
    )
    (tmp_path / "u.data").write_text(
        "1\t1193\t5\t978300760\n1\t661\t3.5\t978302109\n2\t914\t1\t978301968\n"
    )
    for name in ["ratings.dat", "u.data"]:
        df = read_movielens(tmp_path / name)
        pd.testing.assert_frame_equal(df, RATINGS)
        pd.testing.assert_frame_equal(load_dataset(tmp_path / name), RATINGS)
        assert df["timestamp"].dtype == "int64"


def test_movielens_latest_csv(tmp_path):
    path = tmp_path / "ratings.csv"
    path.write_text(
        "userId,movieId,rating,timestamp\n1,1193,5.0,978300760\n1,661,3.5,978302109\n2,914,1,978301968\n"
    )
    pd.testing.assert_frame_equal(read_movielens_latest(path), RATINGS)
    pd.testing.assert_frame_equal(load_dataset(path), RATINGS)


def test_sasrec_pairs_and_lines(tmp_path):
    (tmp_path / "pairs.txt").write_text("1 5\n1 3\n2 5\n\n10 7\n")
    (tmp_path / "lines.txt").write_text("1 5 3\n2 5\n10 7\n")
    expected = pd.DataFrame({"entity_id": [1, 1, 2, 10], "item_id": [5, 3, 5, 7]})
    pd.testing.assert_frame_equal(read_sasrec_txt(tmp_path / "pairs.txt"), expected)
    pd.testing.assert_frame_equal(read_sasrec_txt(tmp_path / "lines.txt"), expected)
    pd.testing.assert_frame_equal(load_dataset(tmp_path / "lines.txt"), expected)
    # A file of two-token lines is ambiguous: 'lines' reads each as a user with one item.
    pd.testing.assert_frame_equal(read_sasrec_txt(tmp_path / "pairs.txt", layout="lines"), expected)
    (tmp_path / "text.txt").write_text("alice x y\nbob z\n")
    df = read_sasrec_txt(tmp_path / "text.txt")
    assert df["entity_id"].tolist() == ["alice", "alice", "bob"]
    assert df["item_id"].tolist() == ["x", "y", "z"]


def test_ml1m_sequences_parquet(tmp_path):
    table = pa.table(
        {
            "user_id": pa.array([2, 1, 1, 2], pa.int32()),
            "item_id": pa.array([20, 11, 10, 21], pa.int32()),
            "position": pa.array([0, 1, 0, 1], pa.int32()),
        }
    )
    pq.write_table(table, tmp_path / "ml-1m_sequences.parquet")
    expected = pd.DataFrame({"entity_id": [1, 1, 2, 2], "item_id": [10, 11, 20, 21]})
    pd.testing.assert_frame_equal(
        read_ml1m_sequences(tmp_path / "ml-1m_sequences.parquet"), expected
    )
    pd.testing.assert_frame_equal(load_dataset(tmp_path / "ml-1m_sequences.parquet"), expected)
    pq.write_table(table.drop_columns(["position"]), tmp_path / "other.parquet")
    with pytest.raises(SeqencError, match=r"other\.parquet.*position"):
        read_ml1m_sequences(tmp_path / "other.parquet")


def test_event_log(tmp_path):
    RATINGS.to_csv(tmp_path / "log.csv", index=False)
    df = read_event_log(tmp_path / "log.csv", EventSchema(numeric=("rating",)))
    assert df.columns.tolist() == ["entity_id", "item_id", "timestamp", "rating"]
    assert df["timestamp"].tolist() == RATINGS["timestamp"].astype(float).tolist()
    assert load_dataset(tmp_path / "log.csv", format="events").shape == (3, 3)


def test_bad_files(tmp_path):
    (tmp_path / "ratings.dat").write_text("1::2::3::4\n1::2::3\n")
    with pytest.raises(SeqencError, match=r"malformed ratings file .*ratings\.dat.*3"):
        read_movielens(tmp_path / "ratings.dat")
    (tmp_path / "commas.dat").write_text("1,2,3,4\n")
    with pytest.raises(SeqencError, match=r"commas\.dat.*neither"):
        read_movielens(tmp_path / "commas.dat")
    (tmp_path / "ratings.csv").write_text("user,item\n1,2\n")
    with pytest.raises(SeqencError, match=r"ratings\.csv.*header"):
        read_movielens_latest(tmp_path / "ratings.csv")
    (tmp_path / "pairs.txt").write_text("1 5\n1 3 4\n7\n")
    with pytest.raises(SeqencError, match=r"pairs\.txt' line 2: expected 'user item'"):
        read_sasrec_txt(tmp_path / "pairs.txt", layout="pairs")
    with pytest.raises(SeqencError, match=r"pairs\.txt' line 3: .*lines layout.*'7'"):
        read_sasrec_txt(tmp_path / "pairs.txt")
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(SeqencError, match=r"empty\.txt.*no events"):
        read_sasrec_txt(tmp_path / "empty.txt")
    with pytest.raises(SeqencError, match=r"cannot read .*missing\.dat"):
        load_dataset(tmp_path / "missing.dat")
    with pytest.raises(SeqencError, match=r"cannot tell the format of .*data\.xlsx"):
        detect_format(tmp_path / "data.xlsx")
    with pytest.raises(SeqencError, match="unknown dataset format 'excel'"):
        load_dataset(tmp_path / "ratings.csv", format="excel")
    with pytest.raises(SeqencError, match="layout"):
        read_sasrec_txt(tmp_path / "pairs.txt", layout="rows")


@pytest.mark.shared_data
@pytest.mark.parametrize(
    "path, rows, users, items, has_time",
    [
        ("ml-100k/u.data", 100_000, 943, 1_682, True),
        ("ml-1m/ratings_partial_users1-2999.dat", 487_650, 2_999, 3_615, True),
        ("ml-1m/ml-1m_sequences.parquet", 1_000_209, 6_040, 3_706, False),
        ("beauty/Beauty.txt", 198_502, 22_363, 12_101, False),
        ("video/Video.txt", 287_107, 31_013, 23_715, False),
    ],
)
def test_real_datasets_match_their_source_counts(shared_data, path, rows, users, items, has_time):
    df = load_dataset(shared_data / path)
    assert len(df) == rows
    assert df["entity_id"].nunique() == users
    assert df["item_id"].nunique() == items
    assert ("timestamp" in df) == has_time
