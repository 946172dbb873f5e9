"""A stored policy: the policy snapshot file, its reader and writer, and its one error type.

A snapshot is one ``.safetensors`` file. It holds the state dict of each actor it stores,
every key prefixed with the actor's kind (``learner.``: a learner's actor, ``champion.``:
the best GNN member of a population), and string metadata::

    iterations   hardware evaluations spent when it was taken
    generation   generations completed when it was taken (-1: not recorded)
    workload     what it was trained on (a name, or names joined by ``+``)
    policy       JSON of the Graph U-Net sizes {"hidden", "out", "depth", "heads"}
    in_dim       node feature width F of the decision graphs it reads
    num_choices  JSON list of the choices of each decision head

:func:`write_snapshot` writes one; :func:`read_snapshot` reads its metadata (no weights);
:func:`read_weights` and :func:`load_actor` load its actors. :class:`StoredPolicy` is a
trained policy's weights with the decision graphs they read, from a snapshot or from
actor weights alone (sizes read off the weights). Whatever cannot be read, or does not
fit, is a :class:`PolicyError` whose message names the file and the problem.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from policies.graph_unet import GraphUNetActor

#: the actors a snapshot may hold, in the order they are listed
POLICY_KINDS = ("learner", "champion")
#: the Graph U-Net sizes a snapshot records (``policy`` metadata)
POLICY_SIZE_KEYS = ("hidden", "out", "depth", "heads")
#: metadata every snapshot has
_REQUIRED_METADATA = ("iterations", "policy", "in_dim", "num_choices")


class PolicyError(ValueError):
    """A stored policy that cannot be read, or that does not fit where it is used.

    The message names the file and the problem.

    Attributes:
        path: the snapshot file, checkpoint or directory concerned.
    """

    def __init__(self, message: str, path: str | Path) -> None:
        super().__init__(message)
        self.path = Path(path)


@dataclass(frozen=True)
class Snapshot:
    """Metadata of one policy snapshot file (the weights stay on disk until loaded).

    Attributes:
        path: the ``.safetensors`` file.
        iterations: hardware evaluations spent when it was taken.
        generation: generations completed when it was taken.
        workload: what it was trained on (a name, or names joined by ``+``).
        policy: Graph U-Net sizes ``{"hidden", "out", "depth", "heads"}``.
        in_dim: node feature width ``F`` of the decision graph it was trained on.
        num_choices: choices of each decision head.
        kinds: which policies it holds (``"learner"``, ``"champion"``).
    """

    path: Path
    iterations: int
    generation: int
    workload: str
    policy: dict
    in_dim: int
    num_choices: tuple[int, ...]
    kinds: tuple[str, ...]


def write_snapshot(
    path: str | Path,
    actors: Mapping[str, torch.nn.Module | Mapping[str, Tensor]],
    *,
    iterations: int,
    sizes: Mapping[str, int],
    in_dim: int,
    num_choices: Sequence[int],
    generation: int = -1,
    workload: str = "",
) -> Path:
    """Write actors (modules or their state dicts, by kind) and their metadata as one snapshot.

    Args:
        actors: ``{"learner": ..., "champion": ...}``, either or both.
        iterations: hardware evaluations spent so far.
        sizes: the Graph U-Net sizes (``hidden``, ``out``, ``depth``, ``heads``), recorded
            as given.
        in_dim: node feature width of the decision graph.
        num_choices: choices of each decision head.
        generation: generations completed so far.
        workload: what the actors were trained on.

    Returns:
        ``path``, its parent directory made if needed.
    """
    from safetensors.torch import save_file

    unknown = set(actors) - set(POLICY_KINDS)
    if unknown:
        raise ValueError(f"snapshot policies must be among {POLICY_KINDS}, got {sorted(unknown)}")
    tensors = {
        f"{kind}.{k}": v.detach().cpu().contiguous()
        for kind, actor in actors.items()
        for k, v in (actor.state_dict() if isinstance(actor, torch.nn.Module) else actor).items()
    }
    metadata = {
        "iterations": str(int(iterations)),
        "generation": str(int(generation)),
        "workload": str(workload),
        "policy": json.dumps(dict(sizes)),
        "in_dim": str(int(in_dim)),
        "num_choices": json.dumps([int(c) for c in num_choices]),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata)
    return path


def read_snapshot(path: str | Path) -> Snapshot:
    """Read a snapshot's metadata and the policies it holds (no weights are loaded).

    Raises:
        PolicyError: not a readable safetensors file, or its metadata is missing or malformed.
    """
    from safetensors import safe_open

    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            keys = list(f.keys())
    except Exception as exc:  # safetensors raises several types for a bad header
        raise PolicyError(f"cannot read policy snapshot {path}: {exc}", path) from exc
    missing = [k for k in _REQUIRED_METADATA if k not in meta]
    if missing:
        raise PolicyError(f"policy snapshot {path} lacks metadata {missing}", path)
    try:
        policy = json.loads(meta["policy"])
        sizes = {k: int(policy[k]) for k in POLICY_SIZE_KEYS}
        num_choices = tuple(int(c) for c in json.loads(meta["num_choices"]))
        iterations, in_dim = int(meta["iterations"]), int(meta["in_dim"])
    except (KeyError, TypeError, ValueError) as exc:
        raise PolicyError(f"policy snapshot {path} has malformed metadata: {exc}", path) from exc
    kinds = tuple(k for k in POLICY_KINDS if any(key.startswith(k + ".") for key in keys))
    return Snapshot(
        path=path,
        iterations=iterations,
        generation=int(meta.get("generation", -1)),
        workload=meta.get("workload", ""),
        policy=sizes,
        in_dim=in_dim,
        num_choices=num_choices,
        kinds=kinds,
    )


def read_weights(snapshot: Snapshot) -> dict[str, dict[str, Tensor]]:
    """The state dict of every actor ``snapshot`` holds, by kind (prefixes removed)."""
    from safetensors.torch import load_file

    tensors = load_file(str(snapshot.path))
    return {
        kind: {k[len(kind) + 1 :]: v for k, v in tensors.items() if k.startswith(kind + ".")}
        for kind in snapshot.kinds
    }


def load_actor(snapshot: Snapshot, kind: str = "learner") -> GraphUNetActor:
    """Rebuild the ``kind`` actor of ``snapshot`` with its sizes and load its weights (strict).

    Raises:
        PolicyError: the snapshot does not hold ``kind``, or its weights do not match the
            sizes its metadata records.
    """
    if kind not in snapshot.kinds:
        raise PolicyError(
            f"policy snapshot {snapshot.path} holds no {kind!r} policy (it holds {snapshot.kinds})",
            snapshot.path,
        )
    from policies.graph_unet import GraphUNetActor  # start-up time

    state = read_weights(snapshot)[kind]
    actor = GraphUNetActor(snapshot.in_dim, list(snapshot.num_choices), **snapshot.policy)
    try:
        actor.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise PolicyError(
            f"the {kind!r} weights of {snapshot.path} do not fit a GraphUNetActor with the "
            f"recorded sizes {snapshot.policy}, in_dim={snapshot.in_dim}, "
            f"num_choices={list(snapshot.num_choices)}: {exc}",
            snapshot.path,
        ) from exc
    return actor.eval()


@dataclass(frozen=True)
class StoredPolicy:
    """A trained policy's weights and the decision graphs they read.

    Attributes:
        source: the snapshot file or checkpoint directory it was read from.
        in_dim: node feature width ``F`` of the decision graph it was trained on.
        num_choices: choices of each decision head.
        sizes: Graph U-Net sizes ``{"hidden", "out", "depth", "heads"}``.
        weights: actor state dicts by kind (``"learner"``, ``"champion"``; at least one).
    """

    source: Path
    in_dim: int
    num_choices: tuple[int, ...]
    sizes: dict
    weights: dict[str, dict[str, Tensor]]

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot) -> StoredPolicy:
        """The actors of ``snapshot``, with the layout its metadata records.

        Raises:
            PolicyError: the snapshot holds no actor.
        """
        weights = read_weights(snapshot)
        if not weights:
            raise PolicyError(f"policy snapshot {snapshot.path} holds no policy", snapshot.path)
        return cls(snapshot.path, snapshot.in_dim, snapshot.num_choices, snapshot.policy, weights)

    @classmethod
    def from_weights(
        cls, source: str | Path, weights: dict[str, dict[str, Tensor]]
    ) -> StoredPolicy:
        """Actors without metadata (a checkpoint's), their layout read off the first one.

        ``embed.weight`` is ``[hidden, F]``, ``project.weight`` ``[out, hidden]``, there is
        one ``pools.i`` per level of ``depth``, ``up.0.att`` is ``[1, heads, hidden // heads]``
        and ``heads.h.weight`` is ``[choices of head h, out]``.

        Raises:
            PolicyError: no actor, or weights that are not a Graph U-Net actor's.
        """
        source = Path(source)
        if not weights:
            raise PolicyError(f"{source} holds no policy", source)
        state = next(iter(weights.values()))
        try:
            depth = len({k.split(".")[1] for k in state if k.startswith("pools.")})
            heads = sum(1 for k in state if k.startswith("heads.") and k.endswith("weight"))
            choices = tuple(int(state[f"heads.{h}.weight"].shape[0]) for h in range(heads))
            sizes = {
                "hidden": int(state["embed.weight"].shape[0]),
                "out": int(state["project.weight"].shape[0]),
                "depth": depth,
                "heads": int(state["up.0.att"].shape[1]),
            }
            in_dim = int(state["embed.weight"].shape[1])
        except (KeyError, IndexError) as exc:
            raise PolicyError(
                f"the weights in {source} are not a Graph U-Net actor's (missing {exc})", source
            ) from exc
        return cls(source, in_dim, choices, sizes, dict(weights))

    def actor_state(self, prefer: str) -> dict[str, Tensor]:
        """The ``prefer`` kind's weights, or the other kind's when it lacks them."""
        if prefer in self.weights:
            return self.weights[prefer]
        return next(iter(self.weights.values()))


__all__ = [
    "POLICY_KINDS",
    "POLICY_SIZE_KEYS",
    "PolicyError",
    "Snapshot",
    "StoredPolicy",
    "load_actor",
    "read_snapshot",
    "read_weights",
    "write_snapshot",
]
