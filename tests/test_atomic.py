"""atomic_file / atomic_directory: all or nothing, unique temporaries, never a directory ↔ file swap."""

from __future__ import annotations

import pytest

from seqenc.atomic import atomic_directory, atomic_file
from seqenc.errors import SeqencError


def test_file_replaced_only_on_success(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_file(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    with atomic_file(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_two_writers_get_distinct_temporaries(tmp_path):
    with atomic_file(tmp_path / "a") as one, atomic_file(tmp_path / "a") as two:
        assert one != two and one.parent == two.parent == tmp_path
        one.write_text("1")
        two.write_text("2")
    assert (tmp_path / "a").read_text() == "1"  # the last to finish wins, whole


@pytest.mark.parametrize("name", ["dir/", "existing"])
def test_file_target_naming_a_directory_is_refused(tmp_path, name):
    (tmp_path / "existing").mkdir()
    with pytest.raises(SeqencError, match="names a directory"), atomic_file(f"{tmp_path}/{name}"):
        pass
    assert (tmp_path / "existing").is_dir() and not (tmp_path / "dir").exists()


def test_parent_that_is_a_file_is_one_clear_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SeqencError, match="parent is not a directory"):
        with atomic_file(tmp_path / "file" / "out.parquet"):
            pass


def test_directory_replace_rules(tmp_path):
    target = tmp_path / "bundle"
    with atomic_directory(target) as tmp:
        (tmp / "a").write_text("1")
    assert (target / "a").read_text() == "1"
    with pytest.raises(SeqencError, match="is not a bundle; refusing"):
        with atomic_directory(target, what="a bundle"):
            pass
    with atomic_directory(f"{target}/", replaceable=lambda p: (p / "a").exists()) as tmp:
        (tmp / "b").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]  # no temporaries left
    (tmp_path / "file").write_text("x")
    with pytest.raises(SeqencError, match="is a file"), atomic_directory(tmp_path / "file"):
        pass
    assert (tmp_path / "file").read_text() == "x"
