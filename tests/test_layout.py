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
        "seqenc.reading",  # bounded reads of the files seqenc loads
        "seqenc.integers",  # what an integer option is (numpy's too, never a bool)
        "seqenc.devices",  # what the machine has: every device and accelerator is resolved here
        "seqenc.cli_support",  # one-line errors for every command's main (onnx, probe, cli)
        "seqenc.training.metrics",
        "seqenc.scores",  # the one scorer of a label's predictions (ROC-AUC, R²)
        "seqenc.model",
        "seqenc.retrieval",  # the package's face (a docstring)
        "seqenc.retrieval.topk",  # exact top-k, chunked; per-row top-k of scored pairs
        "seqenc.retrieval.approximate",  # faiss's inverted file (optional)
        "seqenc.retrieval.space",  # a vector table's model, space and role
        "seqenc.retrieval.index",  # the nearest-neighbour index, its kind by size
        "seqenc.retrieval.index_files",  # its files (JSON, .npy, faiss's own)
    ],
    ["seqenc.data", "seqenc.retrieval.filters"],  # allow / deny / candidate lists → item ids
    [
        "seqenc.bundle",
        "seqenc.training.checkpoint",
        "seqenc.testing",
        "seqenc.training.baselines",
        "seqenc.training.decay",
    ],
    ["seqenc.compat"],  # a space's map to its parent (parent_map), the lineage (lineage)
    [
        "seqenc.training",  # the LightningModule, its options and callbacks
        "seqenc.encoding.backends",
        "seqenc.encoding.outputs",
        "seqenc.incremental.state",
        "seqenc.incremental.ties",
        "seqenc.incremental.merge",
        "seqenc.retrieval.items",  # every item's vector, with the model's and space's ids
    ],
    ["seqenc.encoding"],  # the encoding core: every encode path calls it
    [
        "seqenc.incremental",  # the run over cached keys (update)
        "seqenc.retrieval.queries",  # each account's query vector and repeat part
        "seqenc.retrieval.recommend",  # top-k on the exact, candidate and indexed paths
    ],
    ["seqenc.inference"],  # the Encoder facade over the core and incremental encoding
    [
        "seqenc.export",
        "seqenc.evaluate",  # probes, features and the drift report between two versions
        "seqenc.encoding.spark",
        "seqenc.encoding.onnx",
    ],
    ["seqenc.finetune"],  # fine-tuning: the label module, its plan, wide start and baseline
    ["seqenc.cli", "seqenc.commands"],
]


def layer(module: str) -> int:
    """The layer of the most specific name in LAYERS that is ``module`` or a package above it
    (``seqenc.encoding.spark`` sits above the rest of ``seqenc.encoding``)."""
    found = [
        (len(n), i)
        for i, names in enumerate(LAYERS)
        for n in names
        if module == n or module.startswith(n + ".")
    ]
    if not found:
        raise AssertionError(f"{module} has no layer in tests/test_layout.py: add it")
    return max(found)[1]


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path) -> set[str]:
    """Every seqenc module ``path`` imports, at any depth of its code (imports inside functions,
    run only when called, included); ``from seqenc import x`` names the module ``seqenc.x``."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("seqenc"):
            out.add(node.module)
            if node.module == "seqenc":
                out |= {f"seqenc.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("seqenc")}
    return out


def import_graph() -> dict[str, set[str]]:
    """Module → the package modules it imports (the package face ``seqenc`` left out: it names
    everything, lazily)."""
    found = modules()
    return {
        name: {t for t in imports(path) if t in found and t != "seqenc"}
        for name, path in found.items()
        if name != "seqenc"
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: each strongly connected set of two or more modules (or a
    module importing itself), sorted (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            members = []
            while not members or members[-1] != node:
                members.append(stack.pop())
            if len(members) > 1 or node in graph[node]:
                out.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_circles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert circles(graph) == [["a", "b", "c"], ["e"]]


def test_no_import_circle():
    assert circles(import_graph()) == []


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


def test_no_function_is_over_60_lines():
    """A function (its ``def`` line to its last, docstring included) fits on a screen."""
    long = [
        f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for name, path in modules().items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > 60
    ]
    assert long == []


def test_no_module_reads_the_trainers_datamodule():
    """Modules and callbacks are handed what they read of the data (the CLI links it from the
    datamodule: ``labelled``, ``fit_splits``; the export's writer is given its datamodule), never
    ``trainer.datamodule``: an attribute access, found in the code's syntax tree."""
    found = [
        f"{name}:{node.lineno}"
        for name, path in modules().items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr == "datamodule" and _is_trainer(node.value)
    ]
    assert found == []


def _is_trainer(node: ast.expr) -> bool:
    """``trainer`` or ``<anything>.trainer``."""
    return (isinstance(node, ast.Name) and node.id == "trainer") or (
        isinstance(node, ast.Attribute) and node.attr == "trainer"
    )


def test_the_fine_tuning_wing_is_one_package_and_the_next_event_module_is_small():
    """Fine-tuning lives in ``seqenc/finetune``: no other package defines a label loss, a wide
    start or the label schedule; the next-event module takes at most 16 arguments."""
    import inspect

    from seqenc.training.module import SeqencModule

    label_words = (
        "def fit_wide_start",
        "def label_schedule",
        "class LabelLoss",
        "def class_weights",
    )
    places = {
        name for name, path in modules().items() for word in label_words if word in path.read_text()
    }
    assert places and all(name.startswith("seqenc.finetune.") for name in places), places
    assert len(inspect.signature(SeqencModule).parameters) <= 16
