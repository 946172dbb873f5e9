"""Helpers shared by the test modules, defined once here: test modules import from this
module (and use the fixtures of ``conftest.py``), never from one another.

- paths and units: :data:`ROOT`, :data:`KIB`; one torch thread (:func:`one_torch_thread`);
- run directories: :func:`read_metrics`, :func:`deterministic_rows`, :func:`untimed`;
- the small NNP-I problem most agent tests run on (:func:`small_env`, :func:`noisy_env`)
  and its configs (:func:`small_config` for EGRL, :func:`agent_config` for the
  baselines, :func:`smac_config`), a short EGRL run with snapshots
  (:func:`train_small_egrl`), a policy's greedy map (:func:`greedy`);
- ``egrl-train`` run as a user would (:func:`egrl_train`), in this process
  (:func:`egrl_train_in_process`), its one-line refusals (:func:`assert_refused`),
  :data:`TINY` overrides and Hydra's composition (:func:`compose`);
- screening runs (:func:`run_config`, :func:`assert_resumes_identically`,
  :func:`earlier_run`);
- chips and workloads: the external example chip (:data:`CHIP`, :func:`tiny_workload`),
  the toy chip (:data:`TOY`), one small instance of every hardware model
  (:data:`MODELS` on :func:`contract_workload`);
- the TPU memory-mapping game's programs (:func:`params`, :func:`filler`,
  :func:`random_program`, :func:`tiny_program`) and MuZero's small runs
  (:func:`small_tpu_env`, :func:`muzero_config`, :func:`net_for`);
- the importers' small models: :class:`TinyCNN`, :class:`TinyBlock` (torch), the ONNX
  builders and :func:`onnx_cnn`, and a workload's :func:`totals`.
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import math
import os
import random
import subprocess
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper
from torch import nn

import hwmodels
from egrl import make_env
from egrl.agents import config_class, make_agent, train_config
from egrl.agents.base import SCREEN_TIMING_COLUMN, TIMING_COLUMNS
from egrl.agents.egrl.agent import EGRLAgent
from egrl.agents.egrl.config import EGRLConfig, LearnerConfig, PolicyConfig, PopulationConfig
from egrl.agents.muzero import Encoder, EncoderSpec, MuZeroNet
from egrl.config import AgentConfig, TrainConfig
from egrl.env import Env
from egrl.ledger import CHECK_PHASE
from egrl.rundir import RunDir
from hwmodels.external import ExternalModel
from hwmodels.mcm import MCM
from hwmodels.nnpi import NNPI
from hwmodels.tpu import TPU, Op, Program, TPUParams
from tests.nnpi_workloads import random_dag, residual
from workloads.ir import Node, TensorInfo, Workload

# ---------------------------------------------------------------- paths and units
ROOT = Path(__file__).resolve().parents[1]
KIB = 1024


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """One intra-op torch thread inside the block (reproducible sums, no pool overhead);
    the fixture ``one_thread`` of ``conftest.py`` for a whole test."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------- run directories
#: the wall-clock columns of metrics.csv (a screening run's ``t_screening`` and a
#: model-based run's ``t_check`` included)
TIMINGS = (*TIMING_COLUMNS, SCREEN_TIMING_COLUMN, f"t_{CHECK_PHASE}")


def read_metrics(run_dir: Path, drop: Sequence[str] = TIMINGS) -> list[dict]:
    """metrics.csv rows without the columns ``drop``: by default the wall-clock ones, so
    that two runs that should be identical compare equal (``drop=()``: every column)."""
    with open(Path(run_dir) / "metrics.csv", newline="", encoding="utf-8") as f:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]


def untimed(run_dir: Path) -> list[dict]:
    """metrics.csv rows without the wall-clock columns and MuZero's ``moves_per_s``."""
    return read_metrics(run_dir, drop=(*TIMINGS, "moves_per_s"))


def deterministic_rows(agent) -> str:
    """An agent's metrics rows less their timings, as JSON (NaN compares equal to NaN
    there)."""
    import json

    rows = [{k: v for k, v in r.items() if k not in TIMINGS} for r in agent.rows]
    return json.dumps(rows, sort_keys=True)


# ------------------------------------------------------- the small NNP-I problem
def small_env(**params) -> Env:
    """A 13-node residual network whose weights do not all fit in SRAM + LLC (``params``:
    more keyword arguments of :func:`egrl.make_env`)."""
    w = residual(4, act_bytes=96 * KIB, weight_bytes=700 * KIB, macs=2_000_000)
    return make_env("nnpi", w, sram_mib=1.0, llc_mib=2.0, **params)


def noisy_env(cv: float = 0.05, seed: int = 0) -> Env:
    """The agents' 13-node NNP-I problem, each reading times lognormal noise of mean 1
    (repaired maps scored: every map earns a speedup)."""
    env = small_env(reward="repaired")
    rng = np.random.default_rng(seed)
    sigma = np.sqrt(np.log(1 + cv**2))
    measure = env.target.measure

    def noisy(maps, probs=None):
        m = measure(maps)
        m.latency_s = m.latency_s * rng.lognormal(-(sigma**2) / 2, sigma, size=len(maps))
        return m

    env.target.measure = noisy
    env.target.deterministic = False
    return env


#: the policies' sizes of the small runs
TINY_POLICY = {"hidden": 16, "out": 16, "depth": 2, "heads": 2}


def small_config(seed: int = 0, budget: int = 160, **agent) -> TrainConfig:
    """EGRL with tiny policies, a population of 8 and Table 2's gradient rate."""
    return TrainConfig(
        seed=seed,
        budget=budget,
        progress=False,
        checkpoint_every=2,
        agent=EGRLConfig(
            **agent,
            policy=PolicyConfig(**TINY_POLICY),
            population=PopulationConfig(size=8, boltzmann_fraction=0.25),
            learner=LearnerConfig(batch_size=8, burn_in=16, gradient_ratio=1.0),  # Table 2 rate
        ),
    )


#: small options so that a ~100-iteration run has several generations and a trimmed last one
OPTIONS = {
    "random": {"batch": 16},
    "greedy-dp": {},
    "sa": {"chains": 4, "steps": 2},
    "ga": {"population": 12},
    "nevergrad": {"batch": 8},
    "optuna": {"batch": 8},
    "optimum": {"time_limit_s": 30.0, "workers": 1},
}


def agent_config(
    name: str, seed: int = 0, budget: int = 101, keep_checkpoints: int = 1000, **options
) -> TrainConfig:
    """A baseline agent's run: :data:`OPTIONS` of ``name`` (if any) updated by
    ``options``, a checkpoint every 2 generations."""
    return TrainConfig(
        seed=seed,
        budget=budget,
        progress=False,
        checkpoint_every=2,
        keep_checkpoints=keep_checkpoints,
        agent=config_class(name)(name=name, options={**OPTIONS.get(name, {}), **options}),
    )


#: paid maps of a :func:`smac_config` run
SMAC_BUDGET = 40


def smac_config(seed: int = 5, budget: int = SMAC_BUDGET, **options) -> TrainConfig:
    """SMAC3 on the small problem: batches of 8, 4 initial maps."""
    return agent_config("smac", seed, budget, **{"batch": 8, "n_initial": 4, **options})


def train_small_egrl(run_dir: Path, seed: int, budget: int) -> EGRLAgent:
    """A short EGRL run on :func:`small_env` (one torch thread), with policy snapshots
    every generation and checkpoints."""
    with one_torch_thread():
        trainer = EGRLAgent(
            small_env(), replace(small_config(seed=seed, budget=budget), snapshot_every=1), run_dir
        )
        trainer.run()
    return trainer


def greedy(actor, graph) -> np.ndarray:
    """The actor's most likely choice of every head, int64 ``[N, H]``."""
    with torch.no_grad():
        return actor.log_distribution(graph).argmax(dim=-1).cpu().numpy()


# ----------------------------------------------------------------- egrl-train
#: a small EGRL run on resnet50 from the command line
TINY = [
    "workload=resnet50",
    "budget=40",
    "population.size=6",
    "policy.hidden=16",
    "policy.out=16",
    "policy.depth=2",
    "policy.heads=2",
    "learner.batch_size=8",
    "learner.burn_in=8",
    "checkpoint_every=2",
    "progress=false",
]
#: ``egrl-train`` as ``python -m``
EGRL_TRAIN = [sys.executable, "-m", "egrl.cli.train"]


def egrl_train(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    command: Sequence[str] = EGRL_TRAIN,
) -> subprocess.CompletedProcess:
    """``egrl-train ARGS`` in a new interpreter in ``cwd``, its output captured.

    Args:
        env: variables set for it on top of this process's environment.
        command: the interpreter's command line before ``args``.
    """
    environ = None if env is None else {**os.environ, **env}
    return subprocess.run(
        [*command, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ,
        check=False,
    )


@contextlib.contextmanager
def process_state_kept() -> Iterator[None]:
    """Restores what running ``egrl-train`` changes in this process: the arguments, the
    working directory, Hydra's global state, the logging set-up (Hydra configures its own
    on the root logger), the environment, Python's and torch's random generators and
    torch's threads."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    argv, cwd, environ = sys.argv, os.getcwd(), dict(os.environ)
    loggers = [logging.root] + [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    logging_state = [(lg, lg.level, lg.handlers[:], lg.propagate, lg.disabled) for lg in loggers]
    hydra_cfg = HydraConfig.instance().cfg
    rng = (random.getstate(), torch.get_rng_state())
    threads = torch.get_num_threads()
    # Hydra's logging.config closes every handler made so far (pytest's among them):
    # they are hidden from it and given back afterwards
    handler_refs, named_handlers = logging._handlerList[:], dict(logging._handlers)
    del logging._handlerList[:]
    GlobalHydra.instance().clear()
    try:
        yield
    finally:
        logging._handlerList[:0] = handler_refs
        logging._handlers.update(named_handlers)
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = hydra_cfg
        for lg, level, handlers, propagate, disabled in logging_state:
            lg.setLevel(level)
            lg.handlers[:] = handlers
            lg.propagate, lg.disabled = propagate, disabled
        if dict(os.environ) != environ:
            os.environ.clear()
            os.environ.update(environ)
        random.setstate(rng[0])
        torch.set_rng_state(rng[1])
        torch.set_num_threads(threads)
        os.chdir(cwd)
        sys.argv = argv


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def egrl_train_in_process(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """:func:`egrl_train` without a new interpreter, for refusals of bad input.

    Runs the console entry point (``egrl.cli.train:main``) with ``sys.argv`` and the
    working directory set, stdout and stderr captured, warnings shown on stderr as a fresh
    interpreter would, and ``SystemExit``'s code as the exit status (an exception is a
    traceback on stderr and status 1). A refusal reads as from the command line
    (``test_a_refusal_reads_the_same_in_process_as_from_the_command_line`` in
    ``tests/test_cli.py``); what happens once a run starts (logging to its directory, a
    launcher's processes) is for :func:`egrl_train`.
    """
    from egrl.cli.train import main

    stdout, stderr = io.StringIO(), io.StringIO()
    command = ["egrl-train", *args]
    with process_state_kept(), warnings.catch_warnings():
        warnings.resetwarnings()  # a new interpreter's filters (``python -W`` unset)
        for category in (
            DeprecationWarning,
            PendingDeprecationWarning,
            ImportWarning,
            ResourceWarning,
        ):
            warnings.simplefilter("ignore", category)
        warnings.showwarning = _show_warning
        sys.argv = command[:]
        os.chdir(cwd)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                main()
                returncode = 0
            except SystemExit as exc:
                if exc.code is None or isinstance(exc.code, int):
                    returncode = exc.code or 0
                else:
                    print(exc.code, file=sys.stderr)
                    returncode = 1
            except Exception:
                traceback.print_exc()
                returncode = 1
    return subprocess.CompletedProcess(command, returncode, stdout.getvalue(), stderr.getvalue())


def assert_refused(out: subprocess.CompletedProcess, line: str) -> None:
    """Exit status 2, exactly ``egrl-train: LINE`` on stderr, no traceback."""
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == [f"egrl-train: {line}"]
    assert "Traceback" not in out.stdout + out.stderr


def compose(*overrides: str, hydra: bool = False):
    """``configs/train.yaml`` composed with ``overrides`` as Hydra composes a run's config
    (``hydra``: with Hydra's own section)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module("configs", version_base=None):
        return hydra_compose("train", overrides=list(overrides), return_hydra_config=hydra)


# ------------------------------------------------------------------- screening
def run_config(agent: dict, budget: int, screen: dict, seed: int = 0, **keys):
    """A small screening run: tiny policies, a population of 6, a checkpoint a generation."""
    return train_config(
        {
            "seed": seed,
            "budget": budget,
            "progress": False,
            "checkpoint_every": 1,
            "keep_checkpoints": 100,
            "agent": agent,
            "policy": TINY_POLICY,
            "population": {"size": 6, "boltzmann_fraction": 0.34},
            "learner": {"batch_size": 8, "burn_in": 8, "gradient_ratio": 1.0},
            "screen": screen,
            **keys,
        }
    )


def assert_resumes_identically(reference: Path, resumed: Path, cfg, after: int) -> None:
    """A run on resnet18 resumed from the middle checkpoint of ``reference`` (past
    ``after`` paid maps, before the budget) writes the same ``metrics.csv``."""
    import shutil

    ckpts = sorted((reference / "checkpoints").glob("gen_??????"))
    middle = ckpts[len(ckpts) // 2]
    shutil.copytree(middle, resumed / "checkpoints" / middle.name)
    again = make_agent(make_env("nnpi", "resnet18"), cfg, resumed)
    assert again.resume() and after < again.ledger.iterations < cfg.budget
    again.run()
    assert read_metrics(resumed) == read_metrics(reference)


def earlier_run(path: Path, workload: str, hwmodel: str = "nnpi", budget: int = 60) -> Path:
    """A short random-search run written as egrl-train writes one (config, checkpoint)."""
    cfg = {"seed": 0, "budget": budget, "progress": False, "agent": {"name": "random"}}
    agent = make_agent(make_env(hwmodel, workload), train_config(cfg), run_dir=path)
    agent.run()
    agent.save_checkpoint()
    full = {**cfg, "hwmodel": {"name": hwmodel, "params": {}}, "workload": {"name": workload}}
    RunDir(path).write_config(full)
    return path


# ------------------------------------------------------------ chips and workloads
#: the external model's example chip (``examples/external_chip.py``)
CHIP = str(ROOT / "examples" / "external_chip.py")
PY = sys.executable
#: small capacities so that :func:`tiny_workload` overflows them
CHIP_ARGS = ["--sram-kib", "1", "--llc-kib", "8"]
#: the toy chip of ``docs/hwmodels.md``, loaded from its file
TOY = str(ROOT / "examples" / "toy_chip.py")


def tiny_workload() -> Workload:
    """Four nodes: conv -> conv -> add (reads both) -> linear; weights 216 / 576 / 0 / 5120 B."""
    a = (1, 8, 8, 8)
    nodes = [
        Node("c1", "conv", ["x"], [(1, 3, 8, 8)], a, weight_bytes=216, macs=13824),
        Node("c2", "conv", ["c1"], [a], a, weight_bytes=576, macs=36864),
        Node("add", "eltwise", ["c1", "c2"], [a, a], a, vector_ops=512),
        Node("fc", "linear", ["add"], [a], (1, 10), weight_bytes=5120, macs=5120),
    ]
    return Workload("tiny", nodes, [TensorInfo("x", (1, 3, 8, 8), 192)])


def external_chip() -> ExternalModel:
    """The example chip, with capacities :func:`tiny_workload` overflows."""
    return ExternalModel([PY, CHIP, *CHIP_ARGS])


#: one small, capacity-bound instance of every model (a new registered model must add one)
MODELS: dict[str, Callable[[], hwmodels.HardwareModel]] = {
    "nnpi": lambda: NNPI(llc_mib=8000 / 2**20, sram_mib=3000 / 2**20),
    "external": external_chip,
    "toy": lambda: hwmodels.make("toy", module=TOY, capacity_kib=[4, 1024]),
    "mcm": lambda: MCM(num_chips=3, sram_mib=20000 / 2**20),
    "mcm-sample": lambda: MCM(num_chips=3, sram_mib=20000 / 2**20, mode="sample"),
    "banked": lambda: hwmodels.make("banked", num_banks=4, bank_kib=1),
    "tpu-cmem": lambda: hwmodels.make("tpu-cmem", cmem_mib=8 / 1024),
}


def contract_workload() -> Workload:
    """The small workload every model of :data:`MODELS` is bound to."""
    return random_dag(8, np.random.default_rng(11), max_bytes=4096)


# ------------------------------------------------------------- the TPU game
KB = 1000
#: 1 byte/ns copies and HBM, 10 bytes/ns CMEM: a 1000-byte copy takes 1 us
SLOW_TPU = dict(copy_gbps=1.0, hbm_gbps=1.0, cmem_gbps=10.0, peak_tflops=1.0)


def params(cmem_bytes: int = 10 * KB, **kw) -> TPUParams:
    return TPUParams(cmem_mib=cmem_bytes / 2**20, **(SLOW_TPU | kw))


def filler(n: int, compute_s: float = 0.6e-6) -> list[Op]:
    """``n`` instructions without buffers: ``compute_s`` of copy supply each."""
    return [Op((), (), compute_s) for _ in range(n)]


def random_program(rng: np.random.Generator, num_ops: int = 12) -> Program:
    """Random reads of earlier tensors and weights, random sizes, a few alias groups."""
    ops, sizes, groups = [], {}, []
    for t in range(num_ops):
        reads = [f"t{int(rng.integers(t))}" for _ in range(int(rng.integers(0, 3)))] if t else []
        if rng.random() < 0.5:
            reads.append(f"w{int(rng.integers(4))}")
        ops.append(Op(tuple(dict.fromkeys(reads)), (f"t{t}",), float(rng.uniform(0.2e-6, 2e-6))))
    for op in ops:
        for name in (*op.reads, *op.writes):
            sizes.setdefault(name, int(rng.integers(200, 3 * KB)))
    for t in range(2, num_ops, 4):  # the output of t aliases an operand read 1-3 steps later
        later = [u for u in range(t + 1, min(t + 4, num_ops)) if ops[u].reads]
        if later:
            groups.append([(t, f"t{t}"), (later[0], ops[later[0]].reads[0])])
    groups = [g for g in groups if len({b for b in g}) == 2 and not _shared(g, groups)]
    return Program.from_ops(ops, sizes, params(5 * KB), alias_groups=groups, name="random")


def _shared(group, groups) -> bool:
    """The group shares a buffer with an earlier group."""
    earlier = groups[: groups.index(group)]
    return any(set(group) & set(g) for g in earlier)


def tiny_program() -> Program:
    ops = [
        Op((), ("a",), 0.8e-6),
        Op(("w",), ("b",), 0.2e-6),
        Op(("a", "b"), ("c",), 0.2e-6),
        Op(("w", "c"), ("d",), 0.2e-6),
    ]
    sizes = {"a": 1500, "w": 800, "b": 600, "c": 700, "d": 300}
    return Program.from_ops(ops, sizes, params(2 * KB), alias_groups=[[(1, "b"), (2, "b")]])


# ------------------------------------------------------------------- MuZero
#: MuZero's small encoder and networks
MUZERO_SMALL = dict(grid=8, window=16, profile_bins=16, supply_window=8, hidden=16, latent=8)


def net_for(program: Program, zero_value: bool = False, seed: int = 0) -> tuple[MuZeroNet, Encoder]:
    spec = EncoderSpec(grid=8, window=16, profile_bins=16, supply_window=8)
    torch.manual_seed(seed)
    net = MuZeroNet(spec.vector_size, spec.grid, hidden=16, latent=8)
    if zero_value:  # leaf values 0: the search's values are the rewards it has seen
        torch.nn.init.zeros_(net.value[-1].weight)
        torch.nn.init.zeros_(net.value[-1].bias)
    return net, Encoder(program, spec)


def muzero_config(name: str, seed: int = 0, budget: int = 4, **options) -> TrainConfig:
    """A game-playing agent's run (``muzero``, ``es``, ``random-legal``), a checkpoint a
    generation."""
    return TrainConfig(
        seed=seed,
        budget=budget,
        progress=False,
        checkpoint_every=1,
        agent=AgentConfig(name=name, options=options),
    )


def small_tpu_env(seed: int = 2) -> Env:
    """The TPU game on an 8-node random network with 8 KiB of CMEM."""
    return make_env(
        TPU(cmem_mib=8 / 1024), random_dag(8, np.random.default_rng(seed), max_bytes=4096)
    )


# ------------------------------------------------------- importers' small models
class TinyCNN(nn.Module):
    """stem conv-bn-relu, max pool, conv-bn-relu, grouped conv + residual, avg pool, fc."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.c1 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.stem(x)))
        y = F.max_pool2d(x, 2)
        z = F.relu(self.bn1(self.c1(y)))
        z = F.relu(self.c2(z) + y)
        return self.fc(self.pool(z).flatten(1))


class TinyBlock(nn.Module):
    """Embedding, one pre-norm transformer layer (tanh-GELU MLP), tied output head."""

    def __init__(self, vocab: int = 50, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        return x.view(b, s, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids)
        x = self.ln1(h)
        b, s, d = x.shape
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        mask = torch.triu(torch.ones(s, s), 1).bool()
        scores = (q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5
        attn = scores.masked_fill(mask, -1e9).softmax(-1)
        h = h + self.o((attn @ v).transpose(1, 2).reshape(b, s, d))
        m = self.fc1(self.ln2(h))
        m = 0.5 * m * (1.0 + torch.tanh(math.sqrt(2 / math.pi) * (m + 0.044715 * m**3)))
        h = h + self.fc2(m)
        return self.head(h)


FLOAT = TensorProto.FLOAT


def onnx_init(name: str, shape, dtype=np.float32, value=None) -> onnx.TensorProto:
    """An initializer named ``name``: zeros of ``shape`` unless ``value`` is given."""
    arr = np.zeros(shape, dtype=dtype) if value is None else np.asarray(value, dtype=dtype)
    return numpy_helper.from_array(arr, name)


def onnx_model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def onnx_vi(name: str, shape, dtype=FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def onnx_cnn() -> onnx.ModelProto:
    """conv-bn-relu, conv-bn, residual add, relu, global pool, reshape, gemm (1x3x16x16)."""
    n = helper.make_node
    bn = ("scale", "bias", "mean", "var")
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c1", *(f"bn1_{p}" for p in bn)], ["n1"], name="bn1"),
        n("Relu", ["n1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "w2"], ["c2"], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c2", *(f"bn2_{p}" for p in bn)], ["n2"], name="bn2"),
        n("Add", ["n2", "r1"], ["s"], name="residual"),
        n("Relu", ["s"], ["r2"], name="relu2"),
        n("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        n("Reshape", ["gap", "flat_shape"], ["flat"], name="flatten"),
        n("Gemm", ["flat", "fc_w", "fc_b"], ["y"], name="fc", transB=1),
    ]
    inits = [onnx_init("w1", (8, 3, 3, 3)), onnx_init("b1", (8,)), onnx_init("w2", (8, 8, 3, 3))]
    inits += [onnx_init(f"bn{i}_{p}", (8,)) for i in (1, 2) for p in bn]
    inits += [onnx_init("flat_shape", (2,), np.int64, [1, -1]), onnx_init("fc_w", (10, 8))]
    inits += [onnx_init("fc_b", (10,))]
    return onnx_model(nodes, [onnx_vi("x", [1, 3, 16, 16])], [onnx_vi("y", [1, 10])], inits)


#: parameters of :func:`onnx_cnn` (batch norms: scale and shift)
CNN_PARAMS = 8 * 3 * 9 + 8 + 8 * 8 * 9 + 2 * 2 * 8 + 10 * 8 + 10


def totals(w: Workload) -> tuple[int, int, int]:
    """Sums of MACs, weight bytes and vector ops: the same at every granularity."""
    return int(w.macs.sum()), int(w.total_weight_bytes), int(w.vector_ops.sum())
