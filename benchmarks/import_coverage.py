"""Operator coverage of :func:`workloads.from_torch` on current ``transformers`` architectures.

Each architecture of :data:`ARCHITECTURES` is built from its config class with a tiny
config (2 layers, hidden size 64 or stages of 16 and 32 channels, a vocabulary of 128,
4 experts for a mixture of experts, random weights; nothing is downloaded), with the
model's default attention implementation, and imported with
``workloads.from_torch`` on a small example input: token ids ``[1, 16]``, pixel values
``[1, 3, 64, 64]``, 4,000 audio samples, or a ``[1, 16, 32]`` log-mel spectrogram. A model
class written ``WhisperModel.encoder`` is that submodule of the model. Prints a markdown
table: architecture, config class, imported or not, nodes, seconds of ``from_torch``, and
for a failure its one-line error (the missing operator and its node); below it, why each
gap of :data:`LEFT` is left.

    python benchmarks/import_coverage.py                       # every architecture
    python benchmarks/import_coverage.py --only llama convnextv2 --out /tmp/coverage.md
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # random weights only: never reach the hub

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from workloads import WorkloadError, from_torch  # noqa: E402

VOCAB = 128
#: a two-layer decoder with grouped-query attention (4 heads, 2 key-value heads of 16)
DECODER = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
}
#: the decoder with a mixture of 4 experts (2 per token) in place of its MLP
MOE = {
    **DECODER,
    "moe_intermediate_size": 32,
    "num_experts": 4,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
}
#: a two-layer BERT-style encoder
ENCODER = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
}
#: a two-layer vision transformer on 64x64 images, 8x8 patches
VIT = {**ENCODER, "image_size": 64, "patch_size": 8}
del VIT["vocab_size"], VIT["max_position_embeddings"], VIT["pad_token_id"]
#: two stages of one block each
STAGES = {"num_stages": 2, "hidden_sizes": [16, 32], "depths": [1, 1]}

#: (name, config class, model class, config kwargs, input kind)
ARCHITECTURES: list[tuple[str, str, str, dict, str]] = [
    # decoders
    ("llama", "LlamaConfig", "LlamaModel", DECODER, "ids"),
    ("mistral", "MistralConfig", "MistralModel", DECODER, "ids"),
    ("qwen2", "Qwen2Config", "Qwen2Model", DECODER, "ids"),
    ("qwen3", "Qwen3Config", "Qwen3Model", DECODER, "ids"),
    ("gemma", "GemmaConfig", "GemmaModel", DECODER, "ids"),
    ("gemma2", "Gemma2Config", "Gemma2Model", DECODER, "ids"),
    ("gemma3-text", "Gemma3TextConfig", "Gemma3TextModel", DECODER, "ids"),
    ("phi", "PhiConfig", "PhiModel", DECODER, "ids"),
    ("phi3", "Phi3Config", "Phi3Model", DECODER, "ids"),
    ("stablelm", "StableLmConfig", "StableLmModel", DECODER, "ids"),
    ("granite", "GraniteConfig", "GraniteModel", DECODER, "ids"),
    ("olmo", "OlmoConfig", "OlmoModel", DECODER, "ids"),
    ("olmo2", "Olmo2Config", "Olmo2Model", DECODER, "ids"),
    ("cohere", "CohereConfig", "CohereModel", DECODER, "ids"),
    ("starcoder2", "Starcoder2Config", "Starcoder2Model", DECODER, "ids"),
    ("smollm3", "SmolLM3Config", "SmolLM3Model", DECODER, "ids"),
    ("glm4", "Glm4Config", "Glm4Model", DECODER, "ids"),
    ("qwen3-moe", "Qwen3MoeConfig", "Qwen3MoeModel", MOE, "ids"),
    ("mixtral", "MixtralConfig", "MixtralModel", MOE, "ids"),
    ("gpt-oss", "GptOssConfig", "GptOssModel", MOE, "ids"),
    (
        "llama4-text",
        "Llama4TextConfig",
        "Llama4TextModel",
        {**MOE, "intermediate_size_mlp": 128, "num_local_experts": 2, "num_experts_per_tok": 1},
        "ids",
    ),
    (
        "qwen3.5-text",
        "Qwen3_5TextConfig",
        "Qwen3_5TextModel",
        {
            **DECODER,
            "layer_types": ["linear_attention", "full_attention"],
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
        },
        "ids",
    ),
    (
        "falcon",
        "FalconConfig",
        "FalconModel",
        {"vocab_size": VOCAB, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4},
        "ids",
    ),
    (
        "gpt-neox",
        "GPTNeoXConfig",
        "GPTNeoXModel",
        {**DECODER, "num_key_value_heads": 4},
        "ids",
    ),
    (
        "gpt-j",
        "GPTJConfig",
        "GPTJModel",
        {"vocab_size": VOCAB, "n_embd": 64, "n_layer": 2, "n_head": 4, "rotary_dim": 8},
        "ids",
    ),
    (
        "opt",
        "OPTConfig",
        "OPTModel",
        {
            "vocab_size": VOCAB,
            "hidden_size": 64,
            "word_embed_proj_dim": 64,
            "ffn_dim": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 64,
        },
        "ids",
    ),
    (
        "bloom",
        "BloomConfig",
        "BloomModel",
        {"vocab_size": VOCAB, "hidden_size": 64, "n_layer": 2, "n_head": 4},
        "ids",
    ),
    (
        "gpt2",
        "GPT2Config",
        "GPT2Model",
        {"vocab_size": VOCAB, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64},
        "ids",
    ),
    # encoders
    ("bert", "BertConfig", "BertModel", ENCODER, "ids"),
    ("roberta", "RobertaConfig", "RobertaModel", ENCODER, "ids"),
    (
        "deberta-v3",
        "DebertaV2Config",
        "DebertaV2Model",
        {
            **ENCODER,
            "relative_attention": True,
            "pos_att_type": ["p2c", "c2p"],
            "position_buckets": 32,
            "norm_rel_ebd": "layer_norm",
            "share_att_key": True,
            "position_biased_input": False,
        },
        "ids",
    ),
    ("electra", "ElectraConfig", "ElectraModel", {**ENCODER, "embedding_size": 32}, "ids"),
    ("albert", "AlbertConfig", "AlbertModel", {**ENCODER, "embedding_size": 32}, "ids"),
    (
        "distilbert",
        "DistilBertConfig",
        "DistilBertModel",
        {"vocab_size": VOCAB, "dim": 64, "hidden_dim": 128, "n_layers": 2, "n_heads": 4},
        "ids",
    ),
    ("modernbert", "ModernBertConfig", "ModernBertModel", ENCODER, "ids"),
    # encoders of encoder-decoders
    (
        "t5-encoder",
        "T5Config",
        "T5EncoderModel",
        {"vocab_size": VOCAB, "d_model": 64, "d_kv": 16, "d_ff": 128, "num_layers": 2},
        "ids",
    ),
    (
        "bart-encoder",
        "BartConfig",
        "BartModel.encoder",
        {
            "vocab_size": VOCAB,
            "d_model": 64,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "encoder_ffn_dim": 128,
            "decoder_ffn_dim": 128,
            "max_position_embeddings": 64,
        },
        "ids",
    ),
    # vision
    ("vit", "ViTConfig", "ViTModel", VIT, "image"),
    ("deit", "DeiTConfig", "DeiTModel", VIT, "image"),
    ("dinov2", "Dinov2Config", "Dinov2Model", VIT, "image"),
    ("dinov3-vit", "DINOv3ViTConfig", "DINOv3ViTModel", VIT, "image"),
    ("siglip-vision", "SiglipVisionConfig", "SiglipVisionModel", VIT, "image"),
    (
        "swin",
        "SwinConfig",
        "SwinModel",
        {
            "image_size": 64,
            "patch_size": 4,
            "embed_dim": 32,
            "depths": [1, 1],
            "num_heads": [2, 4],
            "window_size": 4,
        },
        "image",
    ),
    ("convnext", "ConvNextConfig", "ConvNextModel", STAGES, "image"),
    ("convnextv2", "ConvNextV2Config", "ConvNextV2Model", STAGES, "image"),
    (
        "resnet",
        "ResNetConfig",
        "ResNetModel",
        {**STAGES, "embedding_size": 16, "layer_type": "basic"},
        "image",
    ),
    (
        "regnet",
        "RegNetConfig",
        "RegNetModel",
        {**STAGES, "embedding_size": 16, "groups_width": 8},
        "image",
    ),
    (
        "efficientnet",
        "EfficientNetConfig",
        "EfficientNetModel",
        {"image_size": 64, "width_coefficient": 0.25, "depth_coefficient": 0.25, "hidden_dim": 320},
        "image",
    ),
    (
        "mobilenet-v2",
        "MobileNetV2Config",
        "MobileNetV2Model",
        {"image_size": 64, "depth_multiplier": 0.35},
        "image",
    ),
    (
        "mobilevit",
        "MobileViTConfig",
        "MobileViTModel",
        {
            "image_size": 64,
            "hidden_sizes": [32, 48, 64],
            "neck_hidden_sizes": [8, 8, 16, 16, 24, 32, 64],
            "num_attention_heads": 2,
        },
        "image",
    ),
    (
        "segformer",
        "SegformerConfig",
        "SegformerModel",
        {
            "num_encoder_blocks": 2,
            "depths": [1, 1],
            "sr_ratios": [2, 1],
            "hidden_sizes": [16, 32],
            "patch_sizes": [7, 3],
            "strides": [4, 2],
            "num_attention_heads": [1, 2],
            "mlp_ratios": [2, 2],
        },
        "image",
    ),
    # audio
    (
        "wav2vec2",
        "Wav2Vec2Config",
        "Wav2Vec2Model",
        {
            **ENCODER,
            "conv_dim": (32,) * 7,
            "num_conv_pos_embeddings": 16,
            "num_conv_pos_embedding_groups": 4,
        },
        "audio",
    ),
    (
        "whisper-encoder",
        "WhisperConfig",
        "WhisperModel.encoder",
        {
            "vocab_size": VOCAB,
            "num_mel_bins": 16,
            "d_model": 64,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "encoder_ffn_dim": 128,
            "decoder_ffn_dim": 128,
            "max_source_positions": 16,
            "max_target_positions": 16,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "decoder_start_token_id": 1,
        },
        "mel",
    ),
]


#: architectures known not to import, and why their operators have no rule
LEFT = {
    "llama4-text": "complex rotary embeddings (aten.polar, view_as_complex, view_as_real): "
    "the workload IR has one element size and real-valued costs, while a complex element "
    "is two reals and its multiply six real operations",
}


def example_input(kind: str, config) -> torch.Tensor:
    """A small example input of ``kind``: ``ids``, ``image``, ``audio`` or ``mel``."""
    generator = torch.Generator().manual_seed(0)
    if kind == "ids":
        return torch.randint(0, VOCAB, (1, 16), generator=generator)
    if kind == "image":
        return torch.randn(1, 3, 64, 64, generator=generator)
    if kind == "audio":
        return torch.randn(1, 4000, generator=generator)
    if kind == "mel":
        frames = 2 * config.max_source_positions
        return torch.randn(1, config.num_mel_bins, frames, generator=generator)
    raise ValueError(f"unknown input kind {kind!r}")


def build(config_class: str, model_class: str, config: dict, kind: str):
    """The model (random weights, eval mode) and its example input."""
    import transformers  # optional dependency

    torch.manual_seed(0)
    cfg = getattr(transformers, config_class)(**config)
    cls, _, part = model_class.partition(".")
    model = getattr(transformers, cls)(cfg)
    model = getattr(model, part) if part else model
    return model.eval(), example_input(kind, cfg)


def _one_line(exc: Exception) -> str:
    """The error as one table cell."""
    text = str(exc) if isinstance(exc, WorkloadError) else f"{type(exc).__name__}: {exc}"
    text = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return text.replace("|", "\\|")


def measure(name: str, config_class: str, model_class: str, config: dict, kind: str) -> dict:
    """Build and import one architecture: ``{name, config_class, ok, nodes, seconds, error}``
    (``seconds``: the time of ``from_torch``, to the error for a failure)."""
    row = {"name": name, "config_class": config_class, "ok": False, "nodes": 0, "error": ""}
    start = time.perf_counter()
    try:
        model, x = build(config_class, model_class, config, kind)
        start = time.perf_counter()
        row.update(ok=True, nodes=from_torch(model, x, name=name).num_nodes)
    except Exception as exc:  # report and go on: one architecture must not stop the table
        row.update(ok=False, error=_one_line(exc))
    row["seconds"] = time.perf_counter() - start
    return row


def table(rows: list[dict]) -> str:
    """The markdown table of the rows, with a summary line."""
    lines = [
        "| architecture | config class | imported | nodes | seconds | error |",
        "|---|---|---|---:|---:|---|",
    ]
    for r in rows:
        ok = "yes" if r["ok"] else "no"
        nodes = str(r["nodes"]) if r["ok"] else ""
        lines.append(
            f"| {r['name']} | {r['config_class']} | {ok} | {nodes} | {r['seconds']:.2f} "
            f"| {r['error']} |"
        )
    done = sum(r["ok"] for r in rows)
    lines.append("")
    lines.append(
        f"{done} of {len(rows)} architectures import ({100 * done / max(len(rows), 1):.0f}%)."
    )
    lines += [
        f"- {r['name']}: left: {LEFT[r['name']]}" for r in rows if not r["ok"] and r["name"] in LEFT
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="architectures to import")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    known = [a[0] for a in ARCHITECTURES]
    unknown = sorted(set(args.only or []) - set(known))
    if unknown:
        parser.error(f"unknown architectures {unknown}; known: {known}")
    logging.basicConfig(level=logging.WARNING)
    rows = []
    for arch in ARCHITECTURES:
        if args.only and arch[0] not in args.only:
            continue
        rows.append(measure(*arch))
        r = rows[-1]
        print(
            f"{r['name']:16s} {'ok' if r['ok'] else 'FAILED':6s} {r['seconds']:6.2f}s", flush=True
        )
    text = table(rows)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0 if all(r["ok"] or r["name"] in LEFT for r in rows) else 1  # a new gap fails


if __name__ == "__main__":
    sys.exit(main())
