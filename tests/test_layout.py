"""The package's shape: data flows one way, the model stands alone, files stay readable."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "seqenc"

# Bottom to top: a module may import its own layer or a lower one, never a higher one.
LAYERS = [
    [
        "seqenc.errors",
        "seqenc.version",
        "seqenc.atomic",
        "seqenc.signals",
        "seqenc.cli_support",  # one-line errors for every command's main (onnx, probe, cli)
        "seqenc.metrics",
        "seqenc.model",
    ],
    ["seqenc.data"],
    ["seqenc.bundle", "seqenc.baselines"],
    [
        "seqenc.module",
        "seqenc.callbacks",
        "seqenc.backends",
        "seqenc.outputs",
        "seqenc.state",
        "seqenc.inference",
        "seqenc.ties",
        "seqenc.incremental",
    ],
    ["seqenc.export", "seqenc.evaluate", "seqenc.spark", "seqenc.onnx"],
    ["seqenc.cli"],
]


def layer(module: str) -> int:
    for i, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return i
    raise AssertionError(f"{module} has no layer in tests/test_layout.py: add it")


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path) -> set[str]:
    """Every seqenc module ``path`` imports, at any depth of its code."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("seqenc"):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("seqenc")}
    return out


def test_no_import_runs_back_up():
    wrong = [
        f"{name} imports {target}"
        for name, path in modules().items()
        if name != "seqenc"  # the package face names everything, lazily
        for target in imports(path)
        if layer(target) > layer(name)
    ]
    assert not wrong


def test_model_package_imports_no_data_and_stands_alone():
    for name, path in modules().items():
        if name.startswith("seqenc.model"):
            assert not any(t.startswith("seqenc.data") for t in imports(path)), name
    code = "import seqenc, seqenc.model, sys; print('lightning' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_no_source_file_is_over_400_lines():
    long = {n: len(p.read_text().splitlines()) for n, p in modules().items()}
    assert {n: k for n, k in long.items() if k > 400} == {}
