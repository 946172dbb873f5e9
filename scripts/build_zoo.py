"""Build the built-in workload zoo from real ``transformers`` architectures.

Each model is instantiated from its ``transformers`` config class with random weights
(``torch.manual_seed`` fixed, eval mode, eager attention where the model has a choice, so
attention shows up as matmul / softmax), exported through
:func:`workloads.from_torch` at int8 (1 byte per element) and written as gzipped
compact JSON to ``workloads/zoo/<name>.json.gz``. With ``--granularity op`` the same
export keeps every compute op its own node (no fusion, see :mod:`workloads.fusion`) and
goes to ``workloads/zoo/unfused/<name>.json.gz``, loaded as ``<name>@op``. Needs the
optional extra ``zoo`` (``pip install -e .[zoo]``); loading the zoo afterwards needs
nothing.

Usage::

    python scripts/build_zoo.py                 # build every model
    python scripts/build_zoo.py resnet50 gpt2   # build some
    python scripts/build_zoo.py --check         # re-import and compare with the shipped files
    python scripts/build_zoo.py --granularity op bert-base   # op granularity, zoo/unfused/
    python scripts/build_zoo.py --list          # names, families, sources
    python scripts/build_zoo.py llama3.2-1b-decode --cached 32768 --out /tmp/w
        # a decode step at another cache length: /tmp/w/llama3.2-1b-decode-32768.json.gz
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from workloads import Workload, from_torch  # noqa: E402
from workloads.fusion import GRANULARITIES  # noqa: E402
from workloads.zoo import DEFAULT_GRANULARITY, GRANULARITY_DIRS, SUFFIX, zoo_name  # noqa: E402

log = logging.getLogger("build_zoo")

SEED = 0
IMAGE = {"pixel_values": ("float", (1, 3, 224, 224))}
AUDIO = {"input_values": ("float", (1, 16000))}


def token_ids(seq: int = 128) -> dict:
    """One sequence of ``seq`` token ids (batch 1)."""
    return {"input_ids": ("ids", (1, seq))}


@dataclass(frozen=True)
class ZooModel:
    """One zoo entry: which ``transformers`` classes build it and what it is fed."""

    name: str
    family: str
    model_class: str
    config_class: str
    config: dict
    inputs: dict  # input name -> ("float" | "ids", shape)
    model_kwargs: dict = field(default_factory=dict)
    #: a decode step: this many tokens in the cache (``past_key_values``), else 0
    cached: int = 0
    #: build on the meta device: shapes only, no weights in memory (large language models)
    meta: bool = False

    def build(self) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], dict]:
        """The model (random weights, eval mode), its example inputs and keyword inputs."""
        import transformers

        torch.manual_seed(SEED)
        device = torch.device("meta" if self.meta else "cpu")
        config = getattr(transformers, self.config_class)(**self.config)
        with device:
            model = getattr(transformers, self.model_class)(config, **self.model_kwargs).eval()
        generator = torch.Generator().manual_seed(SEED)
        vocab = getattr(config, "vocab_size", 2)
        args = tuple(
            (
                torch.randint(0, vocab, shape, generator=generator)
                if kind == "ids"
                else torch.randn(shape, generator=generator)
            ).to(device)
            for kind, shape in self.inputs.values()
        )
        kwargs = {"past_key_values": self._cache(config, device)} if self.cached else {}
        return model, args, kwargs

    def _cache(self, config, device: torch.device):
        """A ``DynamicCache`` of ``cached`` tokens per layer (zeros: only shapes matter)."""
        from transformers import DynamicCache

        heads = config.num_key_value_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // (
            config.num_attention_heads
        )
        shape = (1, heads, self.cached, head_dim)
        layers = [
            (torch.zeros(shape, device=device), torch.zeros(shape, device=device))
            for _ in range(config.num_hidden_layers)
        ]
        return DynamicCache(ddp_cache_data=layers)


def _resnet(name: str, depths: list[int], basic: bool) -> ZooModel:
    config = {"depths": depths, "num_labels": 1000}
    if basic:
        config.update(layer_type="basic", hidden_sizes=[64, 128, 256, 512])
    return ZooModel(name, "resnet", "ResNetForImageClassification", "ResNetConfig", config, IMAGE)


#: Llama 3.2 1B (meta-llama/Llama-3.2-1B's config.json, written out: nothing is downloaded)
LLAMA32_1B = {
    "vocab_size": 128256,
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "tie_word_embeddings": True,
    "attn_implementation": "eager",
}
#: Qwen2.5 0.5B (Qwen/Qwen2.5-0.5B's config.json, written out)
QWEN25_05B = {
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "attn_implementation": "eager",
}
#: the LLM entries' shapes: a prefill of 512 tokens, a decode step with 4,096 cached
PREFILL, CACHED = 512, 4096


def _decoder(name: str, family: str, config_class: str, config: dict) -> list[ZooModel]:
    """A decoder's prefill (``name``) and decode step (``name-decode``), built on the meta
    device (the weights are never materialised)."""
    model_class = config_class.replace("Config", "Model")
    return [
        ZooModel(name, family, model_class, config_class, config, token_ids(PREFILL), meta=True),
        ZooModel(
            f"{name}-decode",
            family,
            model_class,
            config_class,
            config,
            token_ids(1),
            cached=CACHED,
            meta=True,
        ),
    ]


def _bert(name: str, **config) -> ZooModel:
    config = {"attn_implementation": "eager", **config}
    return ZooModel(name, "bert", "BertModel", "BertConfig", config, token_ids())


MODELS: dict[str, ZooModel] = {
    m.name: m
    for m in (
        _resnet("resnet18", [2, 2, 2, 2], basic=True),
        _resnet("resnet34", [3, 4, 6, 3], basic=True),
        _resnet("resnet50", [3, 4, 6, 3], basic=False),
        _resnet("resnet101", [3, 4, 23, 3], basic=False),
        _resnet("resnet152", [3, 8, 36, 3], basic=False),
        ZooModel(
            "mobilenet-v2",
            "mobilenet",
            "MobileNetV2ForImageClassification",
            "MobileNetV2Config",
            {"num_labels": 1000},
            IMAGE,
        ),
        ZooModel(
            "efficientnet-b0",
            "efficientnet",
            "EfficientNetForImageClassification",
            "EfficientNetConfig",
            {
                "width_coefficient": 1.0,
                "depth_coefficient": 1.0,
                "image_size": 224,
                "hidden_dim": 1280,
                "dropout_rate": 0.2,
                "num_labels": 1000,
            },
            IMAGE,
        ),
        ZooModel(
            "convnext-tiny",
            "convnext",
            "ConvNextForImageClassification",
            "ConvNextConfig",
            {"num_labels": 1000},
            IMAGE,
        ),
        ZooModel(
            "vit-b16",
            "vit",
            "ViTForImageClassification",
            "ViTConfig",
            {"num_labels": 1000, "attn_implementation": "eager"},
            IMAGE,
        ),
        ZooModel(
            "swin-tiny",
            "swin",
            "SwinForImageClassification",
            "SwinConfig",
            {"num_labels": 1000, "attn_implementation": "eager"},
            IMAGE,
        ),
        _bert("bert-base"),
        _bert(
            "bert-large",
            hidden_size=1024,
            num_hidden_layers=24,
            num_attention_heads=16,
            intermediate_size=4096,
        ),
        ZooModel(
            "distilbert",
            "distilbert",
            "DistilBertModel",
            "DistilBertConfig",
            {"attn_implementation": "eager"},
            token_ids(),
        ),
        ZooModel(
            "gpt2",
            "gpt2",
            "GPT2Model",
            "GPT2Config",
            {"attn_implementation": "eager", "use_cache": False},
            token_ids(),
        ),
        ZooModel(
            "t5-small-encoder",
            "t5",
            "T5EncoderModel",
            "T5Config",
            {"attn_implementation": "eager", "use_cache": False},
            token_ids(),
        ),
        ZooModel(
            "wav2vec2-base",
            "wav2vec2",
            "Wav2Vec2Model",
            "Wav2Vec2Config",
            {"attn_implementation": "eager"},
            AUDIO,
        ),
        *_decoder("llama3.2-1b", "llama", "LlamaConfig", LLAMA32_1B),
        *_decoder("qwen2.5-0.5b", "qwen2", "Qwen2Config", QWEN25_05B),
    )
}


def import_model(spec: ZooModel, granularity: str = DEFAULT_GRANULARITY) -> Workload:
    """Build ``spec``'s model and import it at ``granularity``; provenance goes into ``meta``.

    The workload is named as :func:`workloads.load` takes it (``bert-base@op``).
    """
    import transformers

    model, args, kwargs = spec.build()
    name = zoo_name(spec.name, granularity)
    workload = from_torch(model, args, name=name, granularity=granularity, example_kwargs=kwargs)
    workload.meta.update(
        family=spec.family,
        source_class=f"transformers.{spec.model_class}",
        config_class=f"transformers.{spec.config_class}",
        config=spec.config,
        seed=SEED,
        **({"cached_tokens": spec.cached} if spec.cached else {}),
        versions={"torch": torch.__version__, "transformers": transformers.__version__},
    )
    return workload


def _comparable(workload: Workload) -> dict:
    """The workload as plain JSON data, library versions left out."""
    data = json.loads(json.dumps(workload.to_dict()))
    data["meta"].pop("versions", None)
    return data


def check(spec: ZooModel, out_dir: Path, granularity: str = DEFAULT_GRANULARITY) -> list[str]:
    """Differences between a fresh import of ``spec`` and its shipped file (empty if none)."""
    path = out_dir / f"{spec.name}{SUFFIX}"
    if not path.exists():
        return [f"{spec.name}: {path} is missing"]
    fresh = _comparable(import_model(spec, granularity))
    shipped = _comparable(Workload.load(path))
    problems = [
        f"{spec.name}: {key} differs"
        for key in fresh
        if key != "nodes" and fresh.get(key) != shipped.get(key)
    ]
    now, then = fresh["nodes"], shipped["nodes"]
    if len(now) != len(then):
        problems.append(f"{spec.name}: {len(now)} nodes now, {len(then)} shipped")
    else:
        problems += [
            f"{spec.name}: node {a['name']!r} differs in {sorted(k for k in a if a[k] != b.get(k))}"
            for a, b in zip(now, then)
            if a != b
        ][:5]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="models to build (default: all)")
    parser.add_argument("--check", action="store_true", help="compare with shipped files")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument(
        "--granularity",
        choices=GRANULARITIES,
        default=DEFAULT_GRANULARITY,
        help="layer: fused layers (zoo/); op: one node per compute op (zoo/unfused/)",
    )
    parser.add_argument("--out", type=Path, help="zoo directory (default: the granularity's)")
    parser.add_argument(
        "--cached", type=int, help="decode steps at this cache length, named <name>-<cached>"
    )
    args = parser.parse_args(argv)
    args.out = args.out or GRANULARITY_DIRS[args.granularity]
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    unknown = sorted(set(args.names) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; known: {sorted(MODELS)}")
    specs = [MODELS[n] for n in args.names] if args.names else list(MODELS.values())
    if args.cached is not None:
        prefills = [s.name for s in specs if not s.cached]
        if prefills or args.cached < 1 or args.check:
            parser.error(
                f"--cached needs decode steps and a length >= 1 (not {prefills or args.cached}), "
                "and no --check"
            )
        specs = [
            dataclasses.replace(s, name=f"{s.name}-{args.cached}", cached=args.cached)
            for s in specs
        ]
    if args.list:
        for s in specs:
            log.info("%-18s %-12s transformers.%s", s.name, s.family, s.model_class)
        return 0
    if args.check:
        problems = [p for s in specs for p in check(s, args.out, args.granularity)]
        for p in problems:
            log.error(p)
        log.info("%d models checked, %d problems", len(specs), len(problems))
        return 1 if problems else 0
    failed = []
    args.out.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        try:
            workload = import_model(spec, args.granularity)
        except Exception as exc:  # report and go on: one model must not stop the zoo
            log.error("%s: export failed: %s", spec.name, exc)
            failed.append(spec.name)
            continue
        path = args.out / f"{spec.name}{SUFFIX}"
        workload.save(path)
        log.info(
            "%-18s %4d nodes -> %s (%d bytes)",
            spec.name,
            workload.num_nodes,
            path,
            path.stat().st_size,
        )
    if failed:
        log.error("failed: %s", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
