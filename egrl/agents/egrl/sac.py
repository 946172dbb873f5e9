"""Discrete soft actor-critic for whole-graph maps (EGRL Algorithm 2 lines 25-30, Appendix D).

The learner's state is the workload's decision graph ``s`` (PyG ``Data``), its action is a
whole map ``a`` (one choice per decision unit and head, ``[N, H]``), and in EGRL every
episode is that single step (Table 2). The actor scores every choice of every unit
(logits ``[N, H, C]``, ``-inf`` beyond a head's choices); the twin-Q critic reads the
graph together with an action given as a dense ``[N, H, C]`` tensor: a one-hot map, a
noisy one-hot map, or the actor's probabilities.

One :meth:`SACDiscrete.update` on a minibatch of ``B`` transitions ``(a_i, r_i, d_i)``:

1. Bellman target (the next state ``s'`` is the decision graph again)::

       r~_i = (r_i - mu) / sigma  (reward_norm="buffer": the buffer's mean and std)  or  r_i
       a'   = pi'(. | s')                                  probabilities [N, H, C]
       H'   = sum (entropy_reduction="sum") or mean over units and heads of -sum_c pi' log pi'
       y_i  = k * (r~_i + shift) + gamma * (1 - d_i) * (min_j Q'_j(s', a') + alpha * H')

   With one-step episodes every ``d_i = 1`` and ``y_i = k * (r~_i + shift)``: ``gamma``
   plays no part; the general form is kept so that stored ``done = False`` transitions
   bootstrap.
2. Critic: ``L_Q = mean_i (Q_1(s, a~_i) - y_i)^2 + mean_i (Q_2(s, a~_i) - y_i)^2`` with the
   noisy one-hot behaviour action ``a~ = clamp(onehot(a) + clip(eps, -c, c), 0, 1)``,
   ``eps ~ N(0, sigma^2)`` on the real choices only (Appendix D).
3. Actor ("sampled policy gradient"): the actor's probabilities ``p = pi(. | s)`` go
   through the critic as the action: ``L_pi = -min_j Q_j(s, p) - alpha * H(p)``, ``H``
   summed or averaged over the ``N x H`` decisions as in step 1. Summed, ``alpha`` is the
   temperature of every single decision, whose choices the critic values on the scale of
   one decision; averaged (EGRL), one decision's temperature is ``alpha / (N H)``.
4. Temperature (``alpha="auto"``): ``L_alpha = log(alpha) * (Hbar(p) - Hbar_target)``
   with ``Hbar`` the mean entropy of one decision and ``Hbar_target =
   target_entropy_ratio * mean_h log C_h`` (a target per decision unit and head).
5. Soft target updates ``theta' <- tau theta + (1 - tau) theta'`` for the critic and, as
   Algorithm 2 line 30 writes, for the actor whose copy ``pi'`` picks ``a'`` in step 1.

Every random draw (the Bellman noise) comes from the learner's own ``torch.Generator``,
seeded at construction; modules built by :meth:`SACDiscrete.build` are initialised under
:func:`policies.seeded_init` with a seed, so the global random state is never consumed.
docs/learner.md gives the equations, the defaults and where each comes from.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import policies
from egrl.validation import FLAG, FRACTION, Rule, at_least, check_fields, positive, ruled
from policies.base import seeded_init
from policies.categorical import choice_mask

ACTOR_ACTIONS = ("probs", "argmax_probs")
ENTROPY_REDUCTIONS = ("sum", "mean")
REWARD_NORMS = ("buffer", "none")

log = logging.getLogger(__name__)


@dataclass
class SACConfig:
    """Hyperparameters of :class:`SACDiscrete`.

    The defaults are EGRL's (Table 2 and Appendix D) except the four that keep the policy
    from collapsing (docs/learner.md, "Why the learner collapsed"): ``alpha="auto"``,
    ``entropy_reduction="sum"``, ``reward_norm="buffer"`` and ``reward_scale=1``; EGRL's
    values are ``alpha=0.05``, ``"mean"``, ``"none"`` and ``5`` (``configs/learner/sac-paper.yaml``).

    Every field carries its rule (:func:`egrl.validation.ruled`): a value out of range
    raises :class:`~egrl.validation.ConfigError` (a ``ValueError``) naming the field, the
    value and what is allowed; EGRL's config reads the same rules for its ``learner``
    section (:class:`egrl.agents.egrl.config.EGRLConfig`).

    Attributes:
        gamma: discount (Table 2: 0.99); unused when every episode is one step.
        lr_actor: actor Adam learning rate (Table 2: 1e-3).
        lr_critic: critic Adam learning rate (Table 2: 1e-3).
        alpha: entropy coefficient: a number (fixed; Table 2: 0.05) or ``"auto"`` (learned
            towards ``target_entropy_ratio``, starting from ``alpha_init``).
        alpha_init: the learned temperature's first value, > 0 (``log(alpha)`` is learned).
        target_entropy_ratio: target entropy of one decision as a fraction of the
            uniform decision's (``mean_h log C_h``).
        lr_alpha: Adam learning rate of ``log(alpha)`` when learned.
        entropy_reduction: ``"sum"`` or ``"mean"`` of the decisions' entropies in the
            actor loss and the Bellman target (EGRL: ``"mean"``).
        reward_norm: ``"buffer"``: standardise rewards with the mean and std of the
            rewards held in the replay buffer before scaling; ``"none"``: raw rewards.
        tau: soft target update rate (Table 2: 1e-3), in ``(0, 1]``: Appendix B's
            "Double-Q network synchronization rate", the coefficient of Algorithm 2 line
            30's ``theta' <- tau theta + (1 - tau) theta'`` (SAC's soft update, Haarnoja
            et al. 2018). ``tau = 1`` copies the online networks; ``tau = 0`` would
            freeze the targets at their first weights, no update at all, so it is refused.
        reward_scale: multiplier ``k`` of rewards in the Bellman target (Table 2: 5).
        reward_shift: added to rewards before scaling (0 in the paper).
        batch_size: transitions per update (Table 2: 24).
        action_noise_std: ``sigma`` of the Bellman one-hot smoothing noise.
        action_noise_clip: ``c``: the noise is clipped to ``[-c, c]``.
        clamp_noisy_action: also clamp the noisy one-hot to ``[0, 1]``.
        noise_std: std of the Gaussian noise on the action probabilities of noisy rollouts.
        actor_action: what the critic reads in the actor loss: ``"probs"`` (the
            probabilities) or ``"argmax_probs"`` (the probability of the most likely choice
            in its slot, zeros elsewhere).
        target_actor: keep a soft-updated actor copy for ``a'`` (Algorithm 2 line 30);
            ``False`` takes ``a'`` from the online actor.
        grad_clip_norm: clip each network's gradient to this norm (``None``: no clipping).
        shared_critic_encoder: the twin critic's two Q heads read one graph encoder
            (``True``, half the critic's work) or each its own (``False``: EGRL's two
            independent towers). Only :meth:`SACDiscrete.build` reads it.
        critic_hidden: the critic's encoder width (``None``: the actor's, ``policy.hidden``:
            Table 2's 128). Only :meth:`SACDiscrete.build` reads it.
        critic_depth: the critic's attention layers per encoder (``None``: the actor's,
            ``policy.depth``: Table 2's 4). Only :meth:`SACDiscrete.build` reads it.
    """

    gamma: float = ruled(FRACTION, 0.99)
    lr_actor: float = ruled(positive(), 1e-3)
    lr_critic: float = ruled(positive(), 1e-3)
    alpha: float | str = ruled(Rule(float, low=0, words=("auto",)), "auto")
    alpha_init: float = ruled(positive(), 0.05)
    target_entropy_ratio: float = ruled(FRACTION, 0.5)
    lr_alpha: float = ruled(positive(), 1e-2)
    entropy_reduction: str = ruled(Rule(str, choices=ENTROPY_REDUCTIONS), "sum")
    reward_norm: str = ruled(Rule(str, choices=REWARD_NORMS), "buffer")
    tau: float = ruled(Rule(float, low=0, high=1, low_open=True), 1e-3)
    reward_scale: float = ruled(positive(), 1.0)
    reward_shift: float = ruled(Rule(float), 0.0)
    batch_size: int = ruled(at_least(1), 24)
    action_noise_std: float = ruled(at_least(0, float), 0.2)
    action_noise_clip: float = ruled(at_least(0, float), 0.5)
    clamp_noisy_action: bool = ruled(FLAG, True)
    noise_std: float = ruled(at_least(0, float), 0.3)
    actor_action: str = ruled(Rule(str, choices=ACTOR_ACTIONS), "probs")
    target_actor: bool = ruled(FLAG, True)
    grad_clip_norm: float | None = ruled(Rule(float, low=0, low_open=True, optional=True), 5.0)
    shared_critic_encoder: bool = ruled(FLAG, True)
    critic_hidden: int | None = ruled(Rule(int, low=1, optional=True), None)
    critic_depth: int | None = ruled(Rule(int, low=1, optional=True), None)

    def __post_init__(self) -> None:
        """Check every field against its rule (:func:`egrl.validation.check_fields`)."""
        check_fields(self)

    @property
    def autotune_alpha(self) -> bool:
        """Whether the temperature is learned (``alpha="auto"``)."""
        return self.alpha == "auto"

    @classmethod
    def from_dict(cls, values: dict) -> SACConfig:
        """Build from a mapping, ignoring keys that are not fields (e.g. a Hydra group)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


# ------------------------------------------------------------------ math helpers
def masked_log_probs(logits: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Probabilities and log-probabilities of ``logits [..., H, C]`` over real choices.

    Missing choices (``~mask``, ``[H, C]``) get probability 0 and log-probability 0 (not
    ``-inf``), so that ``p * log p`` and its gradient stay finite.
    """
    logits = logits.masked_fill(~mask, float("-inf"))
    log_p = F.log_softmax(logits, dim=-1)
    return log_p.exp().masked_fill(~mask, 0.0), log_p.masked_fill(~mask, 0.0)


def decision_entropy(probs: Tensor, log_probs: Tensor) -> Tensor:
    """Entropy ``-sum_c p log p`` of every decision, averaged over units and heads: scalar.

    ``probs``/``log_probs`` ``[N, H, C]`` as :func:`masked_log_probs` returns them.
    """
    return -(probs * log_probs).sum(dim=-1).mean()


def normalise_rewards(rewards: Tensor, mean: float, std: float, eps: float = 1e-6) -> Tensor:
    """``(r - mean) / max(std, eps)``: rewards ``[B]`` in units of the buffer's spread."""
    return (rewards - mean) / max(float(std), eps)


def uniform_entropy(num_choices: Sequence[int]) -> float:
    """Entropy of the uniform policy under :func:`decision_entropy`: mean of ``log C_h``."""
    return float(np.mean(np.log(np.asarray(num_choices, dtype=np.float64))))


def noisy_one_hot(
    actions: Tensor,
    mask: Tensor,
    std: float,
    clip: float,
    generator: torch.Generator,
    clamp: bool = True,
) -> Tensor:
    """Appendix D's smoothed behaviour action: ``onehot(a) + clip(eps, -c, c)``.

    Args:
        actions: long ``[B, N, H]``.
        mask: bool ``[H, C]`` of real choices; missing choices stay exactly 0.
        std: ``sigma`` of ``eps ~ N(0, sigma^2)``.
        clip: ``c``.
        generator: source of ``eps``.
        clamp: clamp the result to ``[0, 1]``.

    Returns:
        float32 ``[B, N, H, C]``.
    """
    one_hot = F.one_hot(actions, num_classes=mask.shape[-1]).to(torch.float32)
    eps = torch.randn(one_hot.shape, generator=generator, device=one_hot.device)
    noisy = one_hot + (std * eps).clamp(-clip, clip)
    if clamp:
        noisy = noisy.clamp(0.0, 1.0)
    return noisy * mask


def policy_action(probs: Tensor, mode: str) -> Tensor:
    """The differentiable action the actor loss feeds to the critic, ``[N, H, C]``.

    ``"probs"``: the probabilities themselves. ``"argmax_probs"``: each decision's largest
    probability in its slot and zeros elsewhere (the gradient reaches only that entry).
    """
    if mode == "probs":
        return probs
    if mode == "argmax_probs":
        top = F.one_hot(probs.argmax(dim=-1), num_classes=probs.shape[-1]).to(probs.dtype)
        return probs * top
    raise ValueError(f"unknown actor_action {mode!r}; expected one of {ACTOR_ACTIONS}")


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``theta' <- tau * theta + (1 - tau) * theta'`` for parameters; buffers are copied.

    One multi-tensor ``lerp`` over all parameters (``torch._foreach_lerp_``), the same
    arithmetic as one ``lerp_`` per parameter.
    """
    targets, sources = list(target.parameters()), list(source.parameters())
    if len(targets) != len(sources):
        raise ValueError(f"soft_update: {len(targets)} target vs {len(sources)} source parameters")
    if targets:
        torch._foreach_lerp_(targets, sources, tau)
    for t, s in zip(target.buffers(), source.buffers(), strict=True):
        t.copy_(s)


def adam(params, lr: float, device: torch.device) -> torch.optim.Adam:
    """Adam with the fused (single-kernel) update where the device has one (CPU, CUDA).

    The fused step computes Adam's update in one pass over every parameter; its results
    can differ from the per-parameter loop in the last bits.
    """
    return torch.optim.Adam(params, lr=lr, fused=device.type in ("cpu", "cuda"))


@contextmanager
def frozen(module: nn.Module) -> Iterator[None]:
    """Stop gradients into ``module``'s parameters (they still flow through it)."""
    flags = [p.requires_grad for p in module.parameters()]
    module.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in zip(module.parameters(), flags, strict=True):
            p.requires_grad_(flag)


def _clip(module: nn.Module, max_norm: float | None) -> float:
    """Clip ``module``'s gradient norm (when ``max_norm`` is set); return the norm before."""
    norm = nn.utils.clip_grad_norm_(module.parameters(), math.inf if max_norm is None else max_norm)
    return float(norm)


def _on_device(graph, device: torch.device):
    """``graph`` on ``device`` without moving the caller's object (PyG ``to`` is in place)."""
    return graph if graph.x.device == device else graph.clone().to(device)


# ---------------------------------------------------------------------- learner
#: learner config key -> critic layout key of the critic's sizes (:meth:`SACDiscrete.build`)
_CRITIC_SIZES = {"critic_hidden": "hidden", "critic_depth": "depth"}


def describe_layout(layout: dict) -> str:
    """``"a shared encoder of width 32 and depth 2"``: a critic layout in words."""
    kind = "a shared encoder" if layout["shared"] else "two encoders"
    return f"{kind} of width {layout['hidden']} and depth {layout['depth']}"


class SACDiscrete:
    """EGRL's policy-gradient learner: a graph actor, a twin-Q critic and their targets.

    Args:
        actor: module with ``forward(x, edge_index, batch=None) -> logits [N, H, C]`` that
            acts as a :class:`policies.Policy` (``act`` and ``act_with_probs``).
        critic: module with ``forward(x, edge_index, actions, batch=None) -> (q1, q2)``,
            ``actions`` float ``[S, N, H, C]`` giving ``q`` of shape ``[S]``.
        num_choices: choices of each head (``len(env.heads[h])``).
        config: hyperparameters.
        device: where the networks live ("cpu" or "cuda").
        seed: seed of the learner's generator (the Bellman smoothing noise).
    """

    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        num_choices: Sequence[int],
        config: SACConfig | None = None,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ):
        self.config = config or SACConfig()
        self.device = torch.device(device)
        self.num_choices = [int(c) for c in num_choices]
        self.mask = choice_mask(self.num_choices, self.device)
        self.actor = actor.to(self.device)
        self.critic = critic.to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_target = (
            copy.deepcopy(self.actor).requires_grad_(False) if self.config.target_actor else None
        )
        self.actor_optim = adam(self.actor.parameters(), self.config.lr_actor, self.device)
        self.critic_optim = adam(self.critic.parameters(), self.config.lr_critic, self.device)
        alpha = self.config.alpha_init if self.config.autotune_alpha else self.config.alpha
        self.log_alpha = torch.tensor(
            math.log(alpha) if alpha > 0 else -math.inf,
            device=self.device,
            requires_grad=self.config.autotune_alpha,
        )
        self.alpha_optim = (
            adam([self.log_alpha], self.config.lr_alpha, self.device)
            if self.config.autotune_alpha
            else None
        )
        self.target_entropy = self.config.target_entropy_ratio * uniform_entropy(self.num_choices)
        self.generator = torch.Generator(device=self.device).manual_seed(int(seed))
        self.num_updates = 0

    @classmethod
    def build(
        cls,
        in_dim: int,
        num_choices: Sequence[int],
        seed: int,
        config: SACConfig | None = None,
        device: str | torch.device = "cpu",
        hidden: int = 128,
        out: int = 128,
        depth: int = 4,
        heads: int = 4,
    ) -> SACDiscrete:
        """A learner with a Graph U-Net actor and twin-Q critic initialised from ``seed``.

        ``hidden``, ``out``, ``depth`` and ``heads`` are the actor's sizes (``policy.*``);
        the critic has ``heads`` too, and ``config.critic_hidden`` / ``config.critic_depth``
        where set, else the actor's ``hidden`` / ``depth``. The modules are created under
        :func:`policies.seeded_init` with ``seed``, the actor first: the same seed gives the
        same weights (the actor's whatever the critic's sizes) and the caller's random
        state is left untouched.
        """
        cfg = config or SACConfig()
        critic_hidden = hidden if cfg.critic_hidden is None else int(cfg.critic_hidden)
        critic_depth = depth if cfg.critic_depth is None else int(cfg.critic_depth)
        if critic_hidden % heads:
            raise ValueError(
                f"critic_hidden ({critic_hidden}) must be a multiple of the attention heads "
                f"(policy.heads={heads})"
            )

        def networks() -> tuple[policies.GraphUNetActor, policies.TwinQCritic]:
            actor = policies.GraphUNetActor(
                in_dim, list(num_choices), hidden=hidden, out=out, depth=depth, heads=heads
            )
            critic = policies.TwinQCritic(
                in_dim,
                list(num_choices),
                hidden=critic_hidden,
                depth=critic_depth,
                heads=heads,
                shared_encoder=cfg.shared_critic_encoder,
            )
            return actor, critic

        actor, critic = seeded_init(seed, networks)
        return cls(actor, critic, num_choices, config, device, seed=seed)

    @property
    def alpha(self) -> float:
        return self.log_alpha.detach().exp().item()

    # ------------------------------------------------------------------ acting
    @torch.no_grad()
    def act(self, graph, num_samples: int, generator: torch.Generator, noisy: bool) -> Tensor:
        """Maps from the actor, long ``[num_samples, N, H]`` on the CPU.

        ``noisy=True``: the actor's noisy rollout, the most likely choice after Gaussian
        noise of std ``config.noise_std`` on the action probabilities
        (:func:`policies.categorical.sample_maps`); ``noisy=False``: the clean (greedy) map.
        The noise is drawn from ``generator``.
        """
        data = _on_device(graph, self.device)
        return self.actor.act(data, num_samples, generator, True, self._noise(noisy)).cpu()

    @torch.no_grad()
    def act_with_probs(
        self, graph, num_samples: int, generator: torch.Generator, noisy: bool
    ) -> tuple[Tensor, Tensor]:
        """:meth:`act`'s maps (same draws) and the actor's probabilities ``[N, H, C]``, on the CPU."""
        data = _on_device(graph, self.device)
        maps, probs = self.actor.act_with_probs(
            data, num_samples, generator, True, self._noise(noisy)
        )
        return maps.cpu(), probs.cpu()

    def _noise(self, noisy: bool) -> float:
        return self.config.noise_std if noisy else 0.0

    # ---------------------------------------------------------------- learning
    def _entropy_term(self, probs: Tensor, log_probs: Tensor) -> tuple[Tensor, Tensor]:
        """The entropy the losses weigh with ``alpha`` (summed or averaged over the ``N x H``
        decisions, ``config.entropy_reduction``) and the mean entropy of one decision."""
        per_decision = decision_entropy(probs, log_probs)
        if self.config.entropy_reduction == "sum":
            return per_decision * probs[..., 0].numel(), per_decision
        return per_decision, per_decision

    def update(
        self, graph, batch: dict, reward_stats: tuple[float, float] | None = None
    ) -> dict[str, float]:
        """One gradient step of critic, actor (and alpha) plus the soft target updates.

        Args:
            graph: the decision graph (PyG ``Data``: ``x [N, F]``, ``edge_index [2, E]``);
                it is both ``s`` and ``s'`` of every transition.
            batch: ``actions`` int ``[B, N, H]``, ``rewards`` float ``[B]``, ``done`` bool
                ``[B]`` (as :meth:`egrl.replay.ReplayBuffer.sample` returns them).
            reward_stats: ``(mean, std)`` of the rewards in the buffer the batch came from
                (:meth:`egrl.replay.ReplayBuffer.reward_stats`); required with
                ``reward_norm="buffer"``.

        Returns:
            Scalars: ``critic_loss``, ``actor_loss``, ``entropy`` (mean of one decision),
            ``q_mean`` (behaviour actions), ``q_pi`` (actor's action), ``target_mean``,
            ``alpha``, grad norms.
        """
        cfg = self.config
        x = graph.x.to(self.device)
        edge_index = graph.edge_index.to(self.device)
        actions = torch.as_tensor(np.asarray(batch["actions"]), device=self.device).long()
        rewards = torch.as_tensor(np.asarray(batch["rewards"]), device=self.device).float()
        done = torch.as_tensor(np.asarray(batch["done"]), device=self.device).float()
        alpha = self.log_alpha.detach().exp()

        if cfg.reward_norm == "buffer":
            if reward_stats is None:
                raise ValueError("reward_norm='buffer' needs the buffer's reward_stats")
            rewards = normalise_rewards(rewards, *reward_stats)

        # 1. Bellman target y = k (r + shift) + gamma (1 - d) (min_j Q'_j(s', a') + alpha H')
        with torch.no_grad():
            target = cfg.reward_scale * (rewards + cfg.reward_shift)
            if bool((done < 1).any()):
                next_actor = self.actor_target if self.actor_target is not None else self.actor
                next_probs, next_log_probs = masked_log_probs(next_actor(x, edge_index), self.mask)
                next_entropy, _ = self._entropy_term(next_probs, next_log_probs)
                q1_next, q2_next = self.critic_target(x, edge_index, next_probs[None])
                soft_value = torch.min(q1_next, q2_next) + alpha * next_entropy  # [1]
                target = target + cfg.gamma * (1.0 - done) * soft_value

        # 2. Critic: both heads regress y at the noisy one-hot behaviour action.
        behaviour = noisy_one_hot(
            actions,
            self.mask,
            cfg.action_noise_std,
            cfg.action_noise_clip,
            self.generator,
            clamp=cfg.clamp_noisy_action,
        )
        q1, q2 = self.critic(x, edge_index, behaviour)  # [B] each
        critic_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)
        self.critic_optim.zero_grad(set_to_none=True)
        critic_loss.backward()
        critic_grad = _clip(self.critic, cfg.grad_clip_norm)
        self.critic_optim.step()

        # 3. Actor: the critic reads the actor's probabilities; maximise min_j Q_j + alpha H.
        probs, log_probs = masked_log_probs(self.actor(x, edge_index), self.mask)
        entropy_term, entropy = self._entropy_term(probs, log_probs)
        with frozen(self.critic):
            q1_pi, q2_pi = self.critic(x, edge_index, policy_action(probs, cfg.actor_action)[None])
        q_pi = torch.min(q1_pi, q2_pi).mean()
        actor_loss = -q_pi - alpha * entropy_term
        self.actor_optim.zero_grad(set_to_none=True)
        actor_loss.backward()
        actor_grad = _clip(self.actor, cfg.grad_clip_norm)
        self.actor_optim.step()

        # 4. Learned temperature: raise alpha when the mean decision's entropy is below
        #    its target (the loss's gradient in log(alpha) is then negative), lower it above.
        if self.alpha_optim is not None:
            alpha_loss = self.log_alpha * (entropy.detach() - self.target_entropy)
            self.alpha_optim.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_optim.step()

        # 5. Soft target updates (Algorithm 2 line 30).
        soft_update(self.critic_target, self.critic, cfg.tau)
        if self.actor_target is not None:
            soft_update(self.actor_target, self.actor, cfg.tau)
        self.num_updates += 1

        return {
            "critic_loss": critic_loss.item(),
            "actor_loss": actor_loss.item(),
            "entropy": entropy.item(),
            "q_mean": 0.5 * (q1.mean() + q2.mean()).item(),
            "q_pi": q_pi.item(),
            "target_mean": float(target.mean()),
            "alpha": float(alpha),
            "critic_grad_norm": critic_grad,
            "actor_grad_norm": actor_grad,
        }

    def train_steps(
        self, replay: Sequence[tuple], num_steps: int, rng: np.random.Generator
    ) -> dict[str, float]:
        """``num_steps`` updates on minibatches of ``config.batch_size``.

        Args:
            replay: ``(graph, buffer)`` pairs: a decision graph and the replay buffer of
                the maps made on it. Each update draws one pair uniformly with ``rng``
                (no draw when there is one pair), then its minibatch.
            num_steps: updates to make.
            rng: source of the pair and minibatch draws.

        With ``reward_norm="buffer"`` each minibatch's rewards are standardised with the
        mean and std of the rewards its buffer holds at that moment.

        Returns the mean of each statistic of :meth:`update` (empty when ``num_steps`` is 0).
        """
        stats: dict[str, list[float]] = {}
        for _ in range(int(num_steps)):
            pick = int(rng.integers(len(replay))) if len(replay) > 1 else 0
            graph, buffer = replay[pick]
            batch = buffer.sample(self.config.batch_size, rng)
            stats_of_rewards = (
                buffer.reward_stats() if self.config.reward_norm == "buffer" else None
            )
            for key, value in self.update(graph, batch, stats_of_rewards).items():
                stats.setdefault(key, []).append(value)
        return {key: float(np.mean(values)) for key, values in stats.items()}

    def sync_actor_target(self) -> None:
        """Copy the actor's weights into its target (after they were set from outside)."""
        if self.actor_target is not None:
            self.actor_target.load_state_dict(self.actor.state_dict())

    # ------------------------------------------------------------- checkpoints
    def _match_critic(self, critic_state: dict) -> None:
        """Rebuild the twin critic (target, optimizer) with a checkpoint's encoder layout.

        A checkpoint written before ``shared_critic_encoder`` existed holds two towers;
        restoring it into a learner built with a shared encoder gives the learner the
        checkpoint's two towers (and sets ``config.shared_critic_encoder`` to match), so
        a resumed run goes on with the critic it had. Likewise a checkpoint whose critic
        has another width or depth (``critic_hidden``, ``critic_depth``) than this
        learner's: the learner takes the checkpoint's, and its config says so.
        """
        if not isinstance(self.critic, policies.TwinQCritic):
            return
        saved, mine = policies.TwinQCritic.layout_of(critic_state), self.critic.layout
        if saved == mine:
            return
        log.warning(
            "learner checkpoint holds a critic with %s (this learner: %s); rebuilding the "
            "critic to match",
            describe_layout(saved),
            describe_layout(mine),
        )
        critic = self.critic
        self.critic = seeded_init(0, lambda: critic.with_layout(**saved))  # weights: loaded next
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.critic_optim = adam(self.critic.parameters(), self.config.lr_critic, self.device)
        sizes = {
            key: saved[size] for key, size in _CRITIC_SIZES.items() if saved[size] != mine[size]
        }
        self.config = replace(self.config, shared_critic_encoder=saved["shared"], **sizes)

    def state_dict(self) -> dict:
        """Networks, targets, optimizers, temperature, generator state and counters.

        Leaves are tensors and plain data (for :func:`egrl.checkpoint.save_state`).
        """
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_target": None if self.actor_target is None else self.actor_target.state_dict(),
            "actor_optim": self.actor_optim.state_dict(),
            "critic_optim": self.critic_optim.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "alpha_optim": None if self.alpha_optim is None else self.alpha_optim.state_dict(),
            "generator": self.generator.get_state(),
            "num_updates": self.num_updates,
            "num_choices": list(self.num_choices),
            "config": asdict(self.config),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a :meth:`state_dict` of a learner with the same networks and heads."""
        if list(state["num_choices"]) != self.num_choices:
            raise ValueError(
                f"learner checkpoint has num_choices {list(state['num_choices'])}, "
                f"this learner has {self.num_choices}"
            )
        if (state["actor_target"] is None) != (self.actor_target is None):
            raise ValueError("learner checkpoint and this learner disagree on target_actor")
        self._match_critic(state["critic"])
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        if self.actor_target is not None:
            self.actor_target.load_state_dict(state["actor_target"])
        self.actor_optim.load_state_dict(state["actor_optim"])
        self.critic_optim.load_state_dict(state["critic_optim"])
        with torch.no_grad():
            self.log_alpha.copy_(torch.as_tensor(state["log_alpha"]))
        if self.alpha_optim is not None and state["alpha_optim"] is not None:
            self.alpha_optim.load_state_dict(state["alpha_optim"])
        self.generator.set_state(torch.as_tensor(state["generator"]).to(torch.uint8).cpu())
        self.num_updates = int(state["num_updates"])
