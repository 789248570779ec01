"""The commands of compatible retrains: ``seqenc align NEW OLD --events ...``, ``seqenc drift OLD
NEW --events ...``, and what ``seqenc fit --compatible_with OLD`` runs after training."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from seqenc.atomic import atomic_file, file_target, is_json
from seqenc.bundle import bundle_inputs
from seqenc.compat.lineage import LINEAGE_FILE, MAP_FILE, Lineage
from seqenc.compat.parent_map import DEFAULT_KIND, KINDS
from seqenc.data.paths import expand_paths, output_file
from seqenc.encoding import MAX_TOKENS, EncodeOptions
from seqenc.evaluate.drift import CUTOFFS, align, drift
from seqenc.inference import load_encoder


def _describe(lineage: Lineage, bundle: str | Path) -> str:
    held = lineage.stats.get("held_out", {})
    score = f", held-out cosine {held['cosine']:.4f}, R2 {held['r2']:.4f}" if held else ""
    return (
        f"aligned: {bundle} -> space of {lineage.parent_name!r} ({lineage.parent_space}); "
        f"{lineage.kind} map on {lineage.stats['n_entities']} entities "
        f"at {lineage.stats.get('n_cutoffs', 1)} points in time{score}"
    )


def add_align_arguments(parser: argparse.ArgumentParser) -> None:
    """``seqenc align NEW OLD --events PATH [--kind ridge|mlp|blend|orthogonal] [--as-of T]
    [--cutoffs N]``: fit the map from bundle NEW's embedding space to bundle OLD's on the entities
    of the events both encode (each at its newest event and at N earlier points in time), and
    store it with the lineage in NEW (then encode(..., space='parent') gives embeddings OLD's
    downstream models can use)."""
    parser.add_argument("new", help="the retrained bundle (the map is written into it)")
    parser.add_argument("old", help="the bundle whose space downstream models were trained on")
    parser.add_argument("--events", required=True, nargs="+", help="Parquet/CSV file(s) or glob")
    kinds = f"default {DEFAULT_KIND}: the mean of ridge and mlp; BENCHMARKS.md compares them"
    parser.add_argument("--kind", choices=KINDS, default=DEFAULT_KIND, help=f"the map ({kinds})")
    parser.add_argument("--as-of", default=None, help="use only events at or before this time")
    parser.add_argument(
        "--cutoffs", type=int, default=CUTOFFS,
        help="also pair entities at this many quantiles of the event times (0: newest only)",
    )  # fmt: skip


def run_align(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    events = args.events[0] if len(args.events) == 1 else args.events
    for name in (MAP_FILE, LINEAGE_FILE):  # the map's files, before it is fitted
        file_target(Path(args.new) / name, expand_paths(events))
    lineage = align(args.new, args.old, events, args.kind, args.as_of, args.cutoffs)
    print(_describe(lineage, args.new))


def add_drift_arguments(parser: argparse.ArgumentParser) -> None:
    """``seqenc drift OLD NEW --events PATH [--json FILE] [--sample N] [--k K] [--as-of T]``:
    compare two versions of a model on the same events (after NEW's map to OLD where it has one):
    per-entity cosine, nearest-neighbour overlap, per-dimension statistics and a verdict (same /
    compatible / incompatible)."""
    parser.add_argument("old", help="the bundle in use")
    parser.add_argument("new", help="the candidate bundle")
    parser.add_argument("--events", required=True, nargs="+", help="Parquet/CSV file(s) or glob")
    parser.add_argument("--as-of", default=None, help="use only events at or before this time")
    parser.add_argument("--k", type=int, default=10, help="neighbours compared per entity")
    parser.add_argument("--sample", type=int, default=2000, help="entities whose neighbours count")
    parser.add_argument(
        "--max-tokens", type=int, default=MAX_TOKENS, help="padded positions per forward pass"
    )
    parser.add_argument("--json", default=None, help="also write the full report (JSON) here")


def run_drift(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    events = args.events[0] if len(args.events) == 1 else args.events
    inputs = [*bundle_inputs(args.old), *bundle_inputs(args.new), *expand_paths(events)]
    if args.json:
        # before the report
        output_file(args.json, inputs, [events], "--json", "drift.json", is_json, "JSON")
    old, new = load_encoder(args.old, "cpu"), load_encoder(args.new, "cpu")
    options = EncodeOptions(as_of=args.as_of, on_empty="skip", max_tokens=args.max_tokens)
    report = drift(old, new, events, options, k=args.k, sample=args.sample)
    if args.json:
        with atomic_file(args.json, inputs) as tmp:
            Path(tmp).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    print(report.table())


def align_after_fit(old: str | None, bundle: str | Path | None, datamodule: Any) -> None:
    """``seqenc fit --compatible_with OLD``: align the new bundle to ``old`` on the training
    events (the datamodule's log, read as training read it)."""
    if not old or bundle is None:
        return
    from seqenc.data.loaders import load_dataset

    dm = datamodule
    events = dm.path if dm.format == "events" else load_dataset(dm.path, dm.format)
    print(_describe(align(bundle, old, events), bundle))


def check_parent_bundle(old: str | None) -> None:
    """``--compatible_with OLD`` must name a readable bundle: checked before training starts."""
    if old:
        from seqenc.bundle import load_bundle

        load_bundle(old)
