"""Data-movement elimination: pairs and bytes removed, and what it changes for the chips.

For a Parallel-WaveNet-like model (:mod:`workloads.wavenet`) and the zoo's transformers
(BERT-base and GPT-2, op and layer granularity), imported with access functions
recorded, :func:`workloads.eliminate_data_movement` is run and its rewrite checked with
NumPy (:func:`workloads.dme.verify`). Then, for the NNP-I and multi-chip (mcm) models,
each workload before and after the transform: nodes, activation bytes, the native
compiler's latency and CP-SAT's (short time limit, stated in the output).

The transformers are rebuilt from their ``transformers`` configs the way
``scripts/build_zoo.py`` builds the zoo (the shipped zoo files predate access
functions); without ``transformers`` installed they are skipped.

    python benchmarks/dme.py                       # writes benchmarks/results/dme.json and
                                                   # the "dme" section of docs/results.md
    python benchmarks/dme.py --page /tmp/page.md --time-limit 5 --hw-workloads bert-base@op
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import hwmodels  # noqa: E402
from workloads.dme import eliminate_data_movement, verify  # noqa: E402
from workloads.ir import Workload  # noqa: E402
from workloads.wavenet import PAPER_FLOWS, wavenet_workload  # noqa: E402

log = logging.getLogger("dme")

WAVENET = "parallel-wavenet-like"
TRANSFORMERS = ("bert-base", "gpt2")
DEFAULT_HW = (f"{WAVENET}@op", "bert-base@op", "gpt2@op", "bert-base")
HW_MODELS = ("nnpi", "mcm")


def build_workloads(names: list[str], flows: tuple[int, ...] = PAPER_FLOWS) -> dict[str, Workload]:
    """The workloads by name; transformers need ``transformers`` (else skipped).

    ``flows``: layers of each flow of the WaveNet-like model.
    """
    out: dict[str, Workload] = {}
    zoo = None
    for name in names:
        model, _, gran = name.partition("@")
        granularity = gran or "layer"
        if model == WAVENET:
            out[name] = wavenet_workload(granularity, flows=flows)
            continue
        if zoo is None:
            zoo = _build_zoo_module()
        if zoo is False:
            log.warning("transformers is not installed: %s skipped", name)
            continue
        out[name] = zoo.import_model(zoo.MODELS[model], granularity)
    return out


def _build_zoo_module():
    """``scripts/build_zoo.py`` as a module, or False without ``transformers``."""
    if importlib.util.find_spec("transformers") is None:
        return False
    spec = importlib.util.spec_from_file_location("build_zoo", ROOT / "scripts" / "build_zoo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_zoo"] = module
    spec.loader.exec_module(module)
    return module


def run_dme(workload: Workload) -> tuple[Workload, dict]:
    """Eliminate, verify, time; return the rewritten workload and the figures."""
    start = time.perf_counter()
    rewritten, report = eliminate_data_movement(workload)
    wall = time.perf_counter() - start
    start = time.perf_counter()
    check = verify(workload, rewritten, seed=0)
    summary = report.summary()
    summary.update(
        dme_wall_s=round(wall, 2),
        verify_wall_s=round(time.perf_counter() - start, 2),
        verify=check,
        kept=report.kept,
        opaque_views=report.opaque_views,
        activation_bytes_before=workload.activation_bytes,
        activation_bytes_after=rewritten.activation_bytes,
    )
    return rewritten, summary


def run_hw(name: str, workload: Workload, time_limit: float, workers: int) -> dict:
    """Native and CP-SAT latency of ``workload`` on one hardware model."""
    start = time.perf_counter()
    try:
        target = hwmodels.make(name).bind(workload)
    except ValueError as exc:  # the workload does not fit the chip
        return {"nodes": workload.num_nodes, "error": str(exc)}
    native = np.asarray(target.native_mapping(), dtype=np.int64)
    native_s = float(target.measure(native[None]).latency_s[0])
    row = {
        "nodes": workload.num_nodes,
        "activation_bytes": workload.activation_bytes,
        "input_bytes": int(workload.input_bytes.sum()),
        "native_latency_s": native_s,
    }
    try:
        opt = target.optimum(time_limit_s=time_limit, workers=workers)
        row.update(
            optimum_latency_s=float(opt.latency_s),
            optimum_gap=float(opt.gap),
            optimum_proven=bool(opt.proven),
            optimum_status=opt.status,
        )
    except RuntimeError as exc:  # the solver found no map in the time limit
        row.update(optimum_latency_s=None, optimum_status=str(exc))
    row["wall_s"] = round(time.perf_counter() - start, 1)
    return row


# ---------------------------------------------------------------------- markdown
def _mib(n: int) -> str:
    return f"{n / 2**20:.2f}"


def _us(s: float | None) -> str:
    return "—" if s is None else f"{s * 1e6:.1f}"


def markdown(results: dict) -> str:
    lines = [
        "## Data-movement elimination",
        "",
        "Zheng et al. (*Optimizing Memory-Access Patterns for Deep Learning Accelerators*, "
        "arXiv:2002.12798) removed 123 of 124 load/store pairs (145 of 146 MB of "
        "intermediate tensors) on Parallel WaveNet by composing affine access functions. "
        "`workloads.eliminate_data_movement` does the same on the IR (docs/dme.md). Pairs "
        "count one per data-movement operator (layout nodes and the views the importer "
        "folds); layout bytes are the layout nodes' output tensors (int8). Every rewritten "
        "load was executed with NumPy against the original operators on random tensors.",
        "",
        "| workload | nodes before → after | layout nodes eliminated | pairs eliminated | "
        "layout MiB eliminated | NumPy check (operands, mismatches) | kept, why |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, d in results["dme"].items():
        kept = "; ".join(f"`{k['node']}`: {k['reason']}" for k in d["kept"]) or "none"
        v = d["verify"]
        lines.append(
            f"| {name} | {d['nodes_before']} → {d['nodes_after']} | "
            f"{d['layout_eliminated']} / {d['layout_nodes']} | "
            f"{d['pairs_eliminated']} / {d['pairs_total']} | "
            f"{_mib(d['bytes_eliminated'])} / {_mib(d['layout_bytes'])} | "
            f"{v['operands']}, {len(v['mismatches'])} | {kept} |"
        )
    hw = results.get("hardware", {})
    if hw:
        lines += [
            "",
            f"What the transform changes for the chips (CP-SAT limit {results['time_limit_s']} s, "
            f"{results['workers']} workers; latency in µs; before → after):",
            "",
            "| workload | model | nodes | activation MiB | native latency | CP-SAT latency (gap) |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for key, pair in hw.items():
            b, a = pair["before"], pair["after"]
            name, model = key.split(" on ")
            if "error" in b or "error" in a:
                why = b.get("error") or a.get("error")
                lines.append(f"| {name} | {model} | {b['nodes']} → {a['nodes']} | {why} | | |")
                continue

            def opt(r: dict) -> str:
                if r.get("optimum_latency_s") is None:
                    return "no map"
                return f"{_us(r['optimum_latency_s'])} ({r['optimum_gap']:.1%})"

            lines.append(
                f"| {name} | {model} | {b['nodes']} → {a['nodes']} | "
                f"{_mib(b['activation_bytes'])} → {_mib(a['activation_bytes'])} | "
                f"{_us(b['native_latency_s'])} → {_us(a['native_latency_s'])} | "
                f"{opt(b)} → {opt(a)} |"
            )
    lines += ["", f"Measured on {results['machine']}, {results['date']}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workloads",
        nargs="*",
        default=[f"{WAVENET}@op", WAVENET] + [f"{m}{g}" for m in TRANSFORMERS for g in ("@op", "")],
    )
    parser.add_argument("--hw-workloads", nargs="*", default=list(DEFAULT_HW))
    parser.add_argument(
        "--wavenet-flows", nargs="*", type=int, default=list(PAPER_FLOWS), help="layers per flow"
    )
    parser.add_argument("--time-limit", type=float, default=20.0, help="CP-SAT seconds per solve")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "dme.json")
    parser.add_argument("--page", type=Path, default=ROOT / "docs" / "results.md")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    names = list(dict.fromkeys(args.workloads + args.hw_workloads))
    built = build_workloads(names, tuple(args.wavenet_flows))
    results = {
        "machine": f"{platform.machine()} {os.cpu_count()}-core machine (shared, noisy)",
        "date": time.strftime("%Y-%m-%d"),
        "time_limit_s": args.time_limit,
        "workers": args.workers,
        "wavenet_flows": list(args.wavenet_flows),
        "dme": {},
        "hardware": {},
    }
    rewritten = {}
    for name, w in built.items():
        rewritten[name], results["dme"][name] = run_dme(w)
        log.info(
            "%s: %s",
            name,
            {k: results["dme"][name][k] for k in ("pairs_eliminated", "pairs_total")},
        )
    for name in args.hw_workloads:
        if name not in built:
            continue
        for model in HW_MODELS:
            pair = {
                "before": run_hw(model, built[name], args.time_limit, args.workers),
                "after": run_hw(model, rewritten[name], args.time_limit, args.workers),
            }
            results["hardware"][f"{name} on {model}"] = pair
            log.info("%s on %s: %s", name, model, pair)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1) + "\n")
    from studies.render import write_section

    write_section("dme", markdown(results), source="python benchmarks/dme.py", page=args.page)
    log.info("wrote %s and the dme section of %s", args.json, args.page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
