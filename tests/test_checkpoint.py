"""Checkpoint integrity: round trip, detection of every damage, fallback on resume."""

from __future__ import annotations

import json
import logging
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from egrl.agents import make_agent
from egrl.checkpoint import (
    SKELETON_FILE,
    TENSORS_FILE,
    CheckpointError,
    _split,
    list_checkpoints,
    load_latest,
    load_plain,
    load_state,
    prune_checkpoints,
    save_state,
    verify_state,
)
from egrl.config import TrainConfig
from tests.support.agent_configs import agent_config
from tests.support.envs import small_env
from tests.support.metrics import read_metrics


def small_state() -> dict:
    return {
        "step": 1234,
        "lr": 1e-05,
        "inf": float("inf"),
        "name": "gen",
        "pair": (1, None),
        "weights": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "maps": np.array([[0, 1], [2, 3]], dtype=np.int64),
    }


def assert_same(a, b) -> None:
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    else:
        assert a == b


def flip(path: Path, position: int, bit: int = 0) -> None:
    """Flip one bit of ``path``; a negative position counts from the end."""
    data = bytearray(path.read_bytes())
    data[position] ^= 1 << bit
    path.write_bytes(bytes(data))


def truncate(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])


def safetensors_offsets(path: Path) -> tuple[int, int]:
    """(start of the JSON header, start of the tensor data) of a safetensors file."""
    (header_len,) = struct.unpack("<Q", path.read_bytes()[:8])
    return 8, 8 + header_len


# ------------------------------------------------------------------------------- units
def test_round_trip_and_format(tmp_path):
    state = small_state()
    path = save_state(state, tmp_path / "gen_000001")
    assert sorted(p.name for p in path.iterdir()) == [SKELETON_FILE, TENSORS_FILE]
    assert (path / SKELETON_FILE).read_bytes().startswith(b'{"egrl_checkpoint": 2, ')
    verify_state(path)
    assert_same(load_state(path), state)


def test_save_replaces_existing_and_stale_old(tmp_path):
    target = tmp_path / "gen_000002"
    save_state({"v": 1}, target)
    save_state({"v": 0}, tmp_path / "gen_000002.old")  # left by a crash between renames
    save_state({"v": 2}, target)
    assert load_state(target) == {"v": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen_000002"]


@pytest.mark.parametrize("name", [SKELETON_FILE, TENSORS_FILE])
def test_every_truncation_is_detected(tmp_path, name):
    path = save_state(small_state(), tmp_path / "ckpt")
    size = (path / name).stat().st_size
    pristine = (path / name).read_bytes()
    for keep in sorted({0, 1, 7, 8, 9, size // 2, size - 2, size - 1}):
        truncate(path / name, keep)
        with pytest.raises(CheckpointError) as info:
            load_state(path)
        assert info.value.path == path / name
        assert str(path / name) in str(info.value)
        (path / name).write_bytes(pristine)
    assert_same(load_state(path), small_state())


@pytest.mark.parametrize("name", [SKELETON_FILE, TENSORS_FILE])
def test_every_single_bit_flip_is_detected(tmp_path, name):
    path = save_state(small_state(), tmp_path / "ckpt")
    file = path / name
    pristine = file.read_bytes()
    for position in range(len(pristine)):
        for bit in (position % 8, 7 - position % 8):
            flip(file, position, bit)
            with pytest.raises(CheckpointError) as info:
                load_state(path)
            assert info.value.path == file, (position, bit)
            file.write_bytes(pristine)


def test_flips_that_keep_valid_json_are_detected(tmp_path):
    path = save_state(small_state(), tmp_path / "ckpt")
    file = path / SKELETON_FILE
    raw = file.read_bytes()
    cases = {
        "a digit of a number": raw.index(b"1234]") + 3,  # 1234 -> 1235
        "an exponent, same value": raw.index(b"1e-05") + 1,  # 1e-05 -> 1E-05
        "the recorded sha256 of state.json": len(b'{"egrl_checkpoint": 2, "state_json_sha256": "'),
        "the recorded size of state.safetensors": raw.index(b', "skeleton"') - 1,
    }
    bits = {"an exponent, same value": 5}
    for what, position in cases.items():
        flip(file, position, bits.get(what, 0))
        damaged = json.loads(file.read_bytes())  # still valid JSON
        assert damaged != json.loads(raw) or what == "an exponent, same value"
        with pytest.raises(CheckpointError, match="recorded sha256") as info:
            load_state(path)
        assert info.value.path == file, what
        file.write_bytes(raw)


def test_named_safetensors_regions(tmp_path):
    path = save_state(small_state(), tmp_path / "ckpt")
    file = path / TENSORS_FILE
    raw = file.read_bytes()
    header, data = safetensors_offsets(file)
    for position in (0, 3, header, header + 5, data - 1, data, len(raw) - 1):
        flip(file, position)
        with pytest.raises(CheckpointError, match=r"sha256 \w+ differs") as info:
            load_state(path)
        assert str(file) in str(info.value)
        file.write_bytes(raw)
    truncate(file, data + 3)
    with pytest.raises(CheckpointError, match=r"truncated: \d+ bytes, state.json records"):
        load_state(path)


def test_load_plain_reads_state_json_alone(tmp_path):
    path = save_state(small_state(), tmp_path / "ckpt")
    (path / TENSORS_FILE).unlink()
    plain = load_plain(path)
    assert plain["step"] == 1234 and plain["pair"] == (1, None)
    assert plain["weights"] is None and plain["maps"] is None
    flip(path / SKELETON_FILE, (path / SKELETON_FILE).read_bytes().index(b"1234]") + 3)
    with pytest.raises(CheckpointError, match=r"state\.json: content does not match"):
        load_plain(path)
    legacy = write_legacy(small_state(), tmp_path / "legacy")
    assert load_plain(legacy)["step"] == 1234


def test_missing_file(tmp_path):
    path = save_state(small_state(), tmp_path / "ckpt")
    (path / TENSORS_FILE).unlink()
    with pytest.raises(CheckpointError, match=r"state\.safetensors: the file is missing"):
        load_state(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_state(tmp_path / "nowhere")


def write_legacy(state, directory: Path) -> Path:
    """A checkpoint as written before checksums: the bare skeleton as state.json."""
    directory.mkdir(parents=True)
    tensors: dict[str, torch.Tensor] = {}
    skeleton = _split(state, "", tensors)
    save_file(tensors, str(directory / TENSORS_FILE))
    (directory / SKELETON_FILE).write_text(json.dumps(skeleton), encoding="utf-8")
    return directory


def test_legacy_checkpoint_loads_with_a_warning(tmp_path, caplog):
    path = write_legacy(small_state(), tmp_path / "gen_000004")
    with caplog.at_level(logging.WARNING, logger="egrl.checkpoint"):
        assert_same(load_state(path), small_state())
    assert "has no checksum" in caplog.text and "cannot be verified" in caplog.text
    assert str(path) in caplog.text
    truncate(path / TENSORS_FILE, 40)
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        load_state(path)


def test_list_checkpoints_order(tmp_path):
    for name in ("gen_000002", "gen_000004.old", "gen_000004", "gen_000006.tmp", "other"):
        (tmp_path / name).mkdir()
    (tmp_path / "gen_000008").write_text("not a directory")
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "gen_000004",
        "gen_000004.old",
        "gen_000002",
    ]
    assert list_checkpoints(tmp_path / "missing") == []


def test_load_latest_takes_leftover_old_and_ignores_tmp(tmp_path):
    save_state({"v": 2}, tmp_path / "gen_000002")
    save_state({"v": 4}, tmp_path / "gen_000004")
    # A crash between the two renames of a re-save of gen 4: the old copy and the new tmp.
    (tmp_path / "gen_000004").rename(tmp_path / "gen_000004.old")
    (tmp_path / "gen_000004.tmp").mkdir()
    path, state = load_latest(tmp_path)
    assert state == {"v": 4} and path == tmp_path / "gen_000004"
    assert (tmp_path / "gen_000004" / SKELETON_FILE).is_file()
    assert not (tmp_path / "gen_000004.old").exists()


def test_load_latest_falls_back_and_sets_damaged_aside(tmp_path, caplog):
    for v in (2, 4, 6):
        save_state({"v": v}, tmp_path / f"gen_{v:06d}")
    truncate(tmp_path / "gen_000006" / SKELETON_FILE, 10)
    flip(tmp_path / "gen_000004" / TENSORS_FILE, -1)
    with caplog.at_level(logging.WARNING, logger="egrl.checkpoint"):
        path, state = load_latest(tmp_path)
    assert state == {"v": 2} and path.name == "gen_000002"
    assert str(tmp_path / "gen_000006" / SKELETON_FILE) in caplog.text
    assert str(tmp_path / "gen_000004" / TENSORS_FILE) in caplog.text
    assert [p.name for p in list_checkpoints(tmp_path)] == ["gen_000002"]
    assert (tmp_path / "gen_000006.damaged" / SKELETON_FILE).is_file()


def test_load_latest_all_damaged_names_the_directory(tmp_path):
    assert load_latest(tmp_path) is None
    for v in (2, 4):
        save_state({"v": v}, tmp_path / f"gen_{v:06d}")
        truncate(tmp_path / f"gen_{v:06d}" / TENSORS_FILE, 5)
    with pytest.raises(CheckpointError) as info:
        load_latest(tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path}: no intact checkpoint, all 2 are damaged")
    assert "gen_000004/state.safetensors: truncated" in message
    assert [p.name for p in list_checkpoints(tmp_path)] == ["gen_000004", "gen_000002"]


def test_prune_keeps_the_checkpoint_just_written(tmp_path):
    stale = tmp_path / "gen_000010"  # a newer, damaged checkpoint of an abandoned attempt
    save_state({"v": 10}, stale)
    truncate(stale / SKELETON_FILE, 3)
    for v in (2, 4):
        save_state({"v": v}, tmp_path / f"gen_{v:06d}")
    written = save_state({"v": 6}, tmp_path / "gen_000006")
    removed = prune_checkpoints(tmp_path, keep=1, written=written)
    assert {p.name for p in removed} == {"gen_000002", "gen_000004", "gen_000010"}
    assert load_latest(tmp_path) == (written, {"v": 6})


def test_prune_removes_nothing_when_the_new_checkpoint_is_damaged(tmp_path, caplog):
    save_state({"v": 2}, tmp_path / "gen_000002")
    written = save_state({"v": 4}, tmp_path / "gen_000004")
    flip(written / TENSORS_FILE, 0)
    with caplog.at_level(logging.WARNING, logger="egrl.checkpoint"):
        assert prune_checkpoints(tmp_path, keep=1, written=written) == []
    assert "not pruning" in caplog.text
    assert (tmp_path / "gen_000002").is_dir()


# ------------------------------------------------------------------- resuming a real run
BUDGET = 120  # random search, 16 maps per generation: 8 generations, checkpoints at 2, 4, 6, 8


def config(name: str = "random", keep: int = 1000) -> TrainConfig:
    """Random search (16 maps a generation) or GA (12), seed 7, :data:`BUDGET` maps."""
    return agent_config(name, seed=7, budget=BUDGET, keep_checkpoints=keep)


@pytest.fixture(scope="module")
def references(tmp_path_factory) -> dict[str, Path]:
    """One undamaged run per agent, its checkpoints all kept."""
    runs = {}
    for name in ("random", "ga"):
        run_dir = tmp_path_factory.mktemp(f"reference-{name}")
        make_agent(small_env(), config(name), run_dir).run()
        runs[name] = run_dir
    return runs


def killed_run(reference: Path, run_dir: Path, up_to: str) -> Path:
    """``run_dir`` as the reference run left it when killed after writing ``up_to``."""
    for ckpt in sorted((reference / "checkpoints").glob("gen_??????")):
        if ckpt.name <= up_to:
            shutil.copytree(ckpt, run_dir / "checkpoints" / ckpt.name)
    return run_dir / "checkpoints" / up_to


def skeleton_digit(file: Path) -> int:
    """Position of a digit inside a JSON number of the skeleton (not in the header)."""
    raw = file.read_bytes()
    key = b'["iterations", '
    return raw.index(key, raw.index(b'"skeleton"')) + len(key)


DAMAGES = {
    "truncate json": (SKELETON_FILE, lambda f: truncate(f, f.stat().st_size // 2)),
    "truncate json to nothing": (SKELETON_FILE, lambda f: truncate(f, 0)),
    "flip json number": (SKELETON_FILE, lambda f: flip(f, skeleton_digit(f))),
    "flip json last byte": (SKELETON_FILE, lambda f: flip(f, -1)),
    "truncate safetensors": (TENSORS_FILE, lambda f: truncate(f, f.stat().st_size - 1)),
    "flip safetensors header length": (TENSORS_FILE, lambda f: flip(f, 1)),
    "flip safetensors header": (TENSORS_FILE, lambda f: flip(f, 20)),
    "flip safetensors data": (TENSORS_FILE, lambda f: flip(f, safetensors_offsets(f)[1] + 5)),
    "flip safetensors last byte": (TENSORS_FILE, lambda f: flip(f, -1, 7)),
}


def test_json_number_flip_keeps_valid_json(references, tmp_path):
    newest = killed_run(references["random"], tmp_path, "gen_000006")
    file = newest / SKELETON_FILE
    before = json.loads(file.read_bytes())
    flip(file, skeleton_digit(file))
    after = json.loads(file.read_bytes())
    assert after["skeleton"] != before["skeleton"]


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_resume_falls_back_past_a_damaged_checkpoint(references, tmp_path, caplog, damage):
    reference = references["random"]
    name, damage_file = DAMAGES[damage]
    newest = killed_run(reference, tmp_path, "gen_000006")
    damage_file(newest / name)
    env = small_env()
    agent = make_agent(env, config(), tmp_path)
    with caplog.at_level(logging.WARNING):
        assert agent.resume()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(newest / name) in w and "damaged" in w for w in warnings), warnings
    assert agent.generation == 4
    best = agent.run()
    assert env.num_evaluations == BUDGET - 4 * 16
    assert read_metrics(tmp_path) == read_metrics(reference)
    expected = json.loads((reference / "best_mapping.json").read_text())
    assert json.loads((tmp_path / "best_mapping.json").read_text()) == expected
    assert best.speedup == expected["speedup"]
    for ckpt in list_checkpoints(tmp_path / "checkpoints"):
        verify_state(ckpt)


def test_resume_ga_falls_back_and_matches(references, tmp_path, caplog):
    reference = references["ga"]
    ckpts = sorted((reference / "checkpoints").glob("gen_??????"))
    newest = killed_run(reference, tmp_path, ckpts[-2].name)
    flip(newest / TENSORS_FILE, -3)
    agent = make_agent(small_env(), config("ga"), tmp_path)
    with caplog.at_level(logging.WARNING):
        assert agent.resume()
    assert str(newest / TENSORS_FILE) in caplog.text
    agent.run()
    assert read_metrics(tmp_path) == read_metrics(reference)


def test_resume_with_every_checkpoint_damaged_fails(references, tmp_path):
    killed_run(references["random"], tmp_path, "gen_000006")
    ckpt_dir = tmp_path / "checkpoints"
    for ckpt in ckpt_dir.iterdir():
        flip(ckpt / SKELETON_FILE, 100)
    agent = make_agent(small_env(), config(), tmp_path)
    with pytest.raises(CheckpointError, match="no intact checkpoint, all 3 are damaged") as info:
        agent.resume()
    assert str(info.value).startswith(str(ckpt_dir))
    assert "\n" not in str(info.value)
    assert agent.ledger.iterations == 0 and not (tmp_path / "metrics.csv").exists()


def test_resume_of_a_checkpoint_without_checksum(references, tmp_path, caplog):
    reference = references["random"]
    newest = killed_run(reference, tmp_path, "gen_000004")
    state = load_state(newest)
    shutil.rmtree(newest)
    write_legacy(state, newest)
    agent = make_agent(small_env(), config(), tmp_path)
    with caplog.at_level(logging.WARNING):
        assert agent.resume()
    assert "cannot be verified" in caplog.text and agent.generation == 4
    agent.run()
    assert read_metrics(tmp_path) == read_metrics(reference)


def test_resume_check_reads_iterations_of_the_newest_readable_checkpoint(references, tmp_path):
    from egrl.cli.resume import checkpoint_iterations

    newest = killed_run(references["random"], tmp_path, "gen_000006")
    assert checkpoint_iterations(tmp_path) == 6 * 16
    truncate(newest / SKELETON_FILE, 50)
    assert checkpoint_iterations(tmp_path) == 4 * 16


def test_pruning_after_fallback_keeps_an_intact_checkpoint(references, tmp_path):
    newest = killed_run(references["random"], tmp_path, "gen_000006")
    truncate(newest / TENSORS_FILE, 100)
    agent = make_agent(small_env(), config(keep=1), tmp_path)
    assert agent.resume() and agent.generation == 4
    agent._generation()
    agent._generation()
    written = agent.save_checkpoint()
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == [written.name]
    verify_state(written)
