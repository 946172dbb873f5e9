"""Decoders as users export them: a Hugging Face model with its default config (a
``DynamicCache`` among its outputs), and a decode step whose cached keys and values are
placed by the map like weights."""

from __future__ import annotations

import logging

import pytest
import torch

import workloads
from workloads.errors import WorkloadError

transformers = pytest.importorskip("transformers")

LAYERS, KV_HEADS, HEADS, HIDDEN = 2, 2, 4, 64
HEAD_DIM = HIDDEN // HEADS


def tiny(config_class: str):
    """A two-layer decoder of ``config_class`` with grouped-query attention, random weights."""
    config = getattr(transformers, config_class)(
        vocab_size=96,
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
    )
    model_class = getattr(transformers, config_class.replace("Config", "Model"))
    torch.manual_seed(0)
    return model_class(config).eval()


def cache_of(model, length: int):
    """The ``DynamicCache`` after a prefill of ``length`` tokens."""
    with torch.no_grad():
        return model(torch.randint(0, 90, (1, length)), use_cache=True)[1]


def decode(model, length: int) -> workloads.Workload:
    """One decode step with ``length`` tokens cached."""
    cache = cache_of(model, length)
    step = (torch.randint(0, 90, (1, 1)),)
    return workloads.from_torch(model, step, example_kwargs={"past_key_values": cache})


def test_a_default_config_decoder_imports_and_its_cache_output_is_dropped(caplog):
    with caplog.at_level(logging.INFO, logger="workloads.torch_inputs"):
        w = workloads.from_torch(tiny("LlamaConfig"), torch.randint(0, 90, (1, 16)))
    assert w.num_nodes > 10 and w.meta["input_shapes"] == {"input_ids": [1, 16]}
    assert "cache_elements" not in w.meta and w.cache_bytes == 0
    assert any("DynamicCache" in r.message and "dropped" in r.message for r in caplog.records)


@pytest.mark.parametrize("config_class", ["LlamaConfig", "Qwen2Config", "MistralConfig"])
def test_a_decode_step_places_the_cache_like_weights(config_class):
    model = tiny(config_class)
    w = decode(model, 24)
    cached = 2 * LAYERS * KV_HEADS * 25 * HEAD_DIM  # the new token's keys joined to 24
    assert w.meta["cache_elements"] == 2 * LAYERS * KV_HEADS * 24 * HEAD_DIM
    assert sorted(w.meta["cache_shapes"])[0] == "past_key_values.layers.0.keys"
    assert w.meta["input_shapes"] == {"input_ids": [1, 1]}
    # every cached tensor is owned by a node: the bytes add up with the weights (int8)
    assert w.total_weight_bytes == w.meta["parameters"] + w.meta["cache_elements"]
    assert w.cache_bytes == w.meta["cache_elements"] * w.dtype_bytes
    assert cached > w.meta["cache_elements"]


def test_the_cache_grows_the_bytes_its_readers_own():
    model = tiny("LlamaConfig")
    short, long = decode(model, 16), decode(model, 48)
    assert short.num_nodes == long.num_nodes
    grown = long.weight_bytes - short.weight_bytes
    assert grown.sum() == 2 * LAYERS * KV_HEADS * 32 * HEAD_DIM
    assert (grown > 0).sum() == 2 * LAYERS  # one owner per cached tensor
    assert long.macs.sum() > short.macs.sum()  # attention reads the longer cache


def test_a_cache_that_does_not_fit_the_model_is_refused_in_one_line():
    model, other = tiny("LlamaConfig"), tiny("LlamaConfig")
    other.config.num_hidden_layers = 3
    cache = cache_of(model, 8)
    step = (torch.randint(0, 90, (1, 1)),)
    with pytest.raises(WorkloadError, match="the cache holds 4 key/value tensors") as err:
        workloads.from_torch(other, step, example_kwargs={"past_key_values": cache})
    assert "\n" not in str(err.value) and "3 layers" in str(err.value)
    cache.layers[1].keys = cache.layers[1].keys[:, :1]
    with pytest.raises(WorkloadError, match=r"past_key_values.layers.1.keys has shape \[1, 1, 8"):
        workloads.from_torch(model, step, example_kwargs={"past_key_values": cache})


def test_keyword_inputs_that_do_not_fit_forward_are_refused():
    with pytest.raises(WorkloadError, match="Linear.forward does not take these inputs"):
        workloads.from_torch(torch.nn.Linear(2, 2), torch.zeros(1, 2), example_kwargs={"x": 1})
