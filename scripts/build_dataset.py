"""Build the ``mcm87`` dataset: 87 CNN / RNN / MLP graphs with a fixed train / val / test split.

The dataset follows the one of the multi-chip partitioning paper (Xie et al., MLSys 2022,
Section 5.1): 87 graphs from CNN and RNN applications, tens to hundreds of nodes, no
attention, split 66 / 5 / 16. It holds the attention-free CNNs of the built-in zoo and 79
variants generated from the families of :mod:`workloads.families`, each imported with
:func:`workloads.from_torch` (int8) and written to
``workloads/zoo/dataset/<name>.json.gz``. The dataset file
``workloads/zoo/dataset/mcm87.json`` lists the members and the split; the split is drawn
(stratified by family, seeded) only when that file does not exist yet or with
``--redraw-split``, and is otherwise kept as written. The member table of
``docs/datasets.md`` is rewritten from the files.

Usage::

    python scripts/build_dataset.py                  # build every generated member
    python scripts/build_dataset.py vgg-d11-w16      # rebuild some
    python scripts/build_dataset.py --check          # rebuild and compare with the files
    python scripts/build_dataset.py --list           # members, families, parameters
    python scripts/build_dataset.py --docs           # only rewrite the docs tables
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import workloads  # noqa: E402
from workloads import Workload  # noqa: E402
from workloads.datasets import FORMAT, stratified_split  # noqa: E402
from workloads.families import Variant  # noqa: E402
from workloads.zoo import DATASET_DIR, SUFFIX  # noqa: E402

log = logging.getLogger("build_dataset")

NAME = "mcm87"
SEED = 0  # weights and example inputs of the generated members
SPLIT_SEED = 87
SIZES = {"train": 66, "val": 5, "test": 16}
DOCS = Path(__file__).resolve().parents[1] / "docs" / "datasets.md"
TABLE_START, TABLE_END = "<!-- mcm87 table: start -->", "<!-- mcm87 table: end -->"
DESCRIPTION = (
    "87 attention-free CNN, RNN, MLP and recommender graphs of tens to hundreds of nodes, "
    "split 66 train / 5 val / 16 test, after Xie et al., MLSys 2022, Section 5.1"
)

#: zoo workloads in the dataset, with the family each belongs to; the zoo's transformers
#: (vit-b16, swin-tiny, bert-*, distilbert, gpt2, t5-small-encoder, wav2vec2-base) are not
ZOO_MEMBERS = {
    "resnet18": "resnet-basic",
    "resnet34": "resnet-basic",
    "resnet50": "resnet-bottleneck",
    "resnet101": "resnet-bottleneck",
    "resnet152": "resnet-bottleneck",
    "mobilenet-v2": "mobilenet",
    "efficientnet-b0": "mobilenet",
    "convnext-tiny": "mobilenet",
}


def _grid(family: str, keys: str, rows: list[tuple]) -> list[Variant]:
    """Variants of ``family`` with the parameters ``keys`` (space-separated) per row."""
    return [Variant(family, dict(zip(keys.split(), row))) for row in rows]


#: the generated members (79)
VARIANTS: list[Variant] = [
    *_grid("vgg", "depth width", [(d, w) for w in (16, 32) for d in (11, 13, 16, 19)]),
    *_grid("resnet-basic", "depth width", [(d, w) for w in (16, 32) for d in (10, 18, 26, 34)]),
    *_grid(
        "resnet-bottleneck",
        "depth width",
        [(26, 16), (38, 16), (50, 16), (101, 16), (26, 32), (38, 32)],
    ),
    *_grid(
        "mobilenet",
        "depth width kernel expansion",
        [
            (50, 100, 3, 6),
            (150, 100, 3, 6),
            (200, 100, 3, 6),
            (50, 50, 5, 4),
            (100, 50, 3, 6),
            (200, 50, 3, 6),
            (100, 75, 5, 6),
            (150, 75, 5, 4),
            (100, 100, 5, 4),
        ],
    ),
    *_grid(
        "inception",
        "modules width factorized",
        [
            ((1, 1, 1), 16, False),
            ((2, 5, 2), 16, False),
            ((3, 6, 3), 16, False),
            ((2, 2, 2), 16, True),
            ((3, 8, 3), 16, True),
            ((2, 3, 2), 32, False),
            ((1, 2, 1), 32, True),
            ((2, 5, 2), 32, True),
        ],
    ),
    *_grid(
        "unet",
        "levels width convs",
        [
            (3, 16, 2),
            (4, 16, 2),
            (5, 16, 2),
            (2, 32, 2),
            (4, 32, 2),
            (4, 16, 3),
            (3, 32, 3),
            (5, 32, 3),
        ],
    ),
    *_grid(
        "lstm",
        "layers hidden steps bidirectional",
        [
            (1, 128, 8, False),
            (1, 256, 16, False),
            (1, 256, 32, False),
            (2, 128, 16, False),
            (2, 256, 32, False),
            (3, 256, 24, False),
            (4, 512, 16, False),
            (1, 128, 16, True),
            (2, 128, 16, True),
            (2, 256, 32, True),
        ],
    ),
    *_grid(
        "gru",
        "layers hidden steps bidirectional",
        [
            (1, 128, 8, False),
            (1, 512, 32, False),
            (2, 256, 16, False),
            (2, 256, 32, False),
            (3, 128, 24, False),
            (4, 256, 12, False),
            (1, 256, 16, True),
            (2, 128, 24, True),
        ],
    ),
    *_grid(
        "mlp",
        "depth width",
        [(8, 256), (16, 256), (32, 256), (8, 1024), (16, 1024), (24, 512)],
    ),
    *_grid(
        "recsys",
        "interaction sparse dim layers",
        [
            ("dot", 8, 16, 2),
            ("dot", 26, 16, 2),
            ("dot", 13, 32, 3),
            ("dot", 26, 64, 3),
            ("wide", 8, 16, 2),
            ("wide", 16, 32, 3),
            ("wide", 26, 16, 3),
            ("wide", 26, 32, 4),
        ],
    ),
]


def member_records() -> list[dict]:
    """The dataset's members: zoo workloads first, then the generated variants."""
    zoo = [{"name": n, "family": f, "source": "zoo", "params": {}} for n, f in ZOO_MEMBERS.items()]
    generated = [
        {"name": v.name, "family": v.family, "source": "generated", "params": v.params}
        for v in VARIANTS
    ]
    return zoo + generated


def dataset_file(records: list[dict], redraw: bool) -> dict:
    """The dataset file's content; an existing split is kept unless ``redraw``."""
    path = DATASET_DIR / f"{NAME}.json"
    names = [r["name"] for r in records]
    if len(set(names)) != len(names):
        raise SystemExit(
            f"duplicate member names: {sorted(n for n in names if names.count(n) > 1)}"
        )
    if path.exists() and not redraw:
        split = json.loads(path.read_text())["split"]
        if sorted(n for part in split.values() for n in part) != sorted(names):
            raise SystemExit(
                f"{path}: the members changed since the split was drawn; "
                "rerun with --redraw-split to draw a new one"
            )
        log.info("keeping the split written in %s", path)
    else:
        family_of = {r["name"]: r["family"] for r in records}
        split = stratified_split(family_of, SIZES, np.random.default_rng(SPLIT_SEED))
        log.info("drew a new split with seed %d", SPLIT_SEED)
    return {
        "format": FORMAT,
        "name": NAME,
        "description": DESCRIPTION,
        "seed": SEED,
        "split_seed": SPLIT_SEED,
        "members": records,
        "split": split,
    }


def _comparable(workload: Workload) -> dict:
    """The workload as plain JSON data, library versions left out."""
    data = json.loads(json.dumps(workload.to_dict()))
    data["meta"].pop("versions", None)
    return data


def check(variant: Variant) -> list[str]:
    """Differences between a fresh import of ``variant`` and its file (empty if none)."""
    path = DATASET_DIR / f"{variant.name}{SUFFIX}"
    if not path.exists():
        return [f"{variant.name}: {path} is missing"]
    fresh, shipped = _comparable(variant.to_workload(SEED)), _comparable(Workload.load(path))
    return [] if fresh == shipped else [f"{variant.name}: differs from {path}"]


def _params_text(params: dict) -> str:
    return ", ".join(
        f"{k}={'x'.join(map(str, v)) if isinstance(v, list) else v}" for k, v in params.items()
    )


def table(data: dict) -> str:
    """The Markdown member table of ``docs/datasets.md``, measured from the files."""
    part_of = {n: part for part, ns in data["split"].items() for n in ns}
    rows = [
        "| name | family | parameters | nodes | edges | GMACs | weights (MiB, int8) | split |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in sorted(data["members"], key=lambda r: (r["family"], r["source"] != "zoo", r["name"])):
        w = workloads.load(r["name"])
        params = _params_text(r["params"]) if r["params"] else "built-in zoo"
        rows.append(
            f"| `{r['name']}` | {r['family']} | {params} | {w.num_nodes} | "
            f"{w.edge_index.shape[1]} | {w.macs.sum() / 1e9:.3g} | "
            f"{w.total_weight_bytes / 2**20:.2f} | {part_of[r['name']]} |"
        )
    return "\n".join(rows)


def summary(data: dict) -> str:
    """Per-family Markdown summary: members, node range and members per part."""
    part_of = {n: part for part, ns in data["split"].items() for n in ns}
    by_family: dict[str, list[str]] = {}
    for r in data["members"]:
        by_family.setdefault(r["family"], []).append(r["name"])
    rows = [
        "| family | members | from the zoo | nodes (min-max) | train | val | test |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for family, names in sorted(by_family.items()):
        nodes = [workloads.load(n).num_nodes for n in names]
        zoo = sum(n in ZOO_MEMBERS for n in names)
        count = {p: sum(part_of[n] == p for n in names) for p in SIZES}
        rows.append(
            f"| {family} | {len(names)} | {zoo} | {min(nodes)}-{max(nodes)} | "
            f"{count['train']} | {count['val']} | {count['test']} |"
        )
    nodes = [workloads.load(r["name"]).num_nodes for r in data["members"]]
    rows.append(
        f"| **all** | {len(nodes)} | {len(ZOO_MEMBERS)} | {min(nodes)}-{max(nodes)} | "
        f"{SIZES['train']} | {SIZES['val']} | {SIZES['test']} |"
    )
    return "\n".join(rows)


def write_docs(data: dict) -> None:
    """Replace the text between the table markers of ``docs/datasets.md``."""
    if not DOCS.exists():
        log.warning("%s does not exist; no table written", DOCS)
        return
    text = DOCS.read_text()
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    body = f"{summary(data)}\n\n{table(data)}"
    DOCS.write_text(f"{head}{TABLE_START}\n{body}\n{TABLE_END}{tail}")
    log.info("wrote the member table of %s", DOCS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="generated members to build (default: all)")
    parser.add_argument("--check", action="store_true", help="compare with the files")
    parser.add_argument("--list", action="store_true", help="list the members and exit")
    parser.add_argument("--redraw-split", action="store_true", help="draw a new split")
    parser.add_argument(
        "--docs", action="store_true", help="only rewrite the tables of docs/datasets.md"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    by_name = {v.name: v for v in VARIANTS}
    unknown = sorted(set(args.names) - set(by_name))
    if unknown:
        parser.error(f"unknown members {unknown}; generated: {sorted(by_name)}")
    chosen = [by_name[n] for n in args.names] if args.names else VARIANTS
    if args.list:
        for r in member_records():
            log.info("%-28s %-18s %-9s %s", r["name"], r["family"], r["source"], r["params"])
        return 0
    if args.docs:
        write_docs(json.loads((DATASET_DIR / f"{NAME}.json").read_text()))
        return 0
    if args.check:
        problems = [p for v in chosen for p in check(v)]
        for p in problems:
            log.error(p)
        log.info("%d members checked, %d problems", len(chosen), len(problems))
        return 1 if problems else 0
    DATASET_DIR.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for variant in chosen:
        t0 = time.perf_counter()
        workload = variant.to_workload(SEED)
        path = DATASET_DIR / f"{variant.name}{SUFFIX}"
        workload.save(path)
        log.info(
            "%-28s %4d nodes  %5.1f s -> %s",
            variant.name,
            workload.num_nodes,
            time.perf_counter() - t0,
            path.name,
        )
    log.info("built %d members in %.1f s", len(chosen), time.perf_counter() - start)
    data = dataset_file(member_records(), args.redraw_split)
    (DATASET_DIR / f"{NAME}.json").write_text(json.dumps(data, indent=1) + "\n")
    write_docs(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
