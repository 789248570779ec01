"""The quickstart notebook runs top to bottom and its embeddings predict the planted account type."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs the notebooks extra")
nbclient = pytest.importorskip("nbclient", reason="needs the notebooks extra")
pytest.importorskip("ipykernel", reason="needs the notebooks extra")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"


def _text(cell: dict) -> str:
    """Everything a code cell printed (streams and plain-text results)."""
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            parts.append(out["text"])
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)


def test_notebook_is_committed_without_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, f"clear the outputs of cells {dirty} before committing {NOTEBOOK.name}"


def test_notebook_runs_and_probe_beats_chance(monkeypatch: pytest.MonkeyPatch) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # A first cell reporting the kernel's interpreter: it must be this venv's, which has seqenc.
    nb.cells.insert(0, nbformat.v4.new_code_cell("import sys; print(sys.executable)"))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend renders PNGs
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=300,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},  # cwd = notebooks/
    )
    client.execute()  # raises CellExecutionError, naming the cell, if any cell fails

    assert Path(_text(nb.cells[0]).strip()).resolve() == Path(sys.executable).resolve()
    images = [
        out
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if "image/png" in out.get("data", {})
    ]
    assert len(images) == 2  # the loss curve and the PCA map

    text = "".join(_text(cell) for cell in nb.cells)
    match = re.search(r"probe accuracy ([\d.]+) \(chance ([\d.]+)\)", text)
    assert match, "the probe cell did not print its accuracy"
    accuracy, chance = map(float, match.groups())
    assert chance == pytest.approx(0.25, abs=0.05)  # four balanced types
    assert accuracy > 0.5, f"probe accuracy {accuracy} is not well above chance {chance}"

    recommend = next(c for c in nb.cells if c.cell_type == "code" and "enc.recommend" in c.source)
    assert re.search(r"entity_id\s+rank\s+item_id\s+score", _text(recommend))
    near = next(c for c in nb.cells if c.cell_type == "code" and ".neighbours(" in c.source)
    assert re.search(r"query_id\s+rank\s+id\s+score\s+type", _text(near))
