"""``agent=muzero``: the MuZero-style planning agent on the TPU memory-mapping game.

Each generation plays ``parallel_games`` self-play games side by side, move by move:
at every move, the games at a buffer with more than one legal action are searched
together (:func:`~egrl.agents.muzero.batched.batched_search`: one batched pUCT search
from their current states, with Dirichlet noise at the roots; fewer than
:data:`SEARCH_TOGETHER_FROM` one by one through :func:`~egrl.agents.muzero.mcts.search`,
which gives the same visit counts and is faster on so few trees); each game's move is
drawn from its root's visit counts raised to ``1 / temperature``, and the visit
distribution is kept as the policy target. A buffer with a single legal action is
played at once (``search_forced=false``; its target is that action). The roots'
representations are one batched torch call for all games. Each finished game is paid
as one measured layout (:class:`~egrl.agents.tpu_game.GameAgent`) and stored in the
replay buffer (:mod:`~egrl.agents.muzero.replay`); then the networks
(:mod:`~egrl.agents.muzero.networks`) take ``updates_per_move`` Adam steps per move
played (at most ``max_updates_per_game`` per game) on batches of ``unroll_steps``-step
unrolls: policy cross-entropy against the visit counts, squared error of the value
against the ``td_steps``-step return and of the reward. With ``parallel_games=1`` this
is one game at a time, move for move what :meth:`MuZeroAgent.play_game` (the one-game
reference on :func:`~egrl.agents.muzero.mcts.search`) plays.

``dynamics=learned`` plans with the learned dynamics (MuZero); ``dynamics=true`` with the
game itself (snapshot / restore: AlphaZero-style, the paper's ablation with the true
dynamics). The temperature goes linearly from ``init_temperature`` to
``final_temperature`` over ``temperature_decay_steps`` training steps.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from egrl.agents import register_agent
from egrl.agents.muzero.batched import LearnedBatch, TrueBatch, batched_search, represent_batch
from egrl.agents.muzero.encode import Encoder, EncoderSpec, grid_fits
from egrl.agents.muzero.mcts import (
    LearnedModel,
    SearchConfig,
    SearchResult,
    TrueModel,
    represent,
    search,
)
from egrl.agents.muzero.networks import MuZeroNet, NumpyHeads
from egrl.agents.muzero.replay import Batch, Replay, Trajectory
from egrl.agents.options import option_error, parse_options
from egrl.agents.tpu_game import GAME_COLUMNS, GameAgent
from egrl.config import TrainConfig
from egrl.env import Env
from egrl.validation import FLAG, FRACTION, Rule, at_least, field_rules, positive, ruled
from hwmodels.tpu.game import Game

#: planning models of ``agent.dynamics``
DYNAMICS = ("learned", "true")
#: games played side by side with ``parallel_games=auto`` where the replay buffer holds
#: their positions (benchmarks/planner_speed.py)
AUTO_PARALLEL_GAMES = 16
#: per ``dynamics``, the fewest games searched together in one batched search; fewer are
#: searched one by one (:func:`~egrl.agents.muzero.mcts.search` is faster on so few
#: trees and gives the same visit counts)
SEARCH_TOGETHER_FROM = {"learned": 7, "true": 3}


#: the observation's options and their rules (:class:`EncoderSpec`'s own)
ENCODER = field_rules(EncoderSpec)


@dataclass(frozen=True)
class MuZeroOptions:
    """Parameters of ``agent=muzero`` (``configs/agent/muzero.yaml``; docs/planner.md says
    which differ from Wang et al.'s Appendix C and why).

    Attributes:
        dynamics: ``learned`` (MuZero) or ``true`` (plan with the game itself; the
            boolean ``true`` that ``agent.dynamics=true`` parses to is accepted).
        simulations: MCTS simulations per searched move (paper: 400).
        discount: reward discount (paper: 0.9999).
        noise_alpha, noise_fraction: Dirichlet noise at the root (paper: 0.03, 0.25).
        init_temperature, final_temperature: action-selection temperature (paper: 1.0, 0.2).
        temperature_decay_steps: training steps of the linear decay (paper: 400,000).
        batch_size: training batch (paper: 512).
        lr, weight_decay: Adam's (paper: 2e-4, 1e-4).
        replay_size: positions kept (paper: 20,000).
        td_steps: ``n`` of the n-step value targets.
        unroll_steps: dynamics steps unrolled in training.
        updates_per_move, max_updates_per_game: training steps after each game.
        search_forced: also search where only one action is legal.
        parallel_games: self-play games per generation, played side by side with one
            batched search per move (an integer >= 1, or ``auto``: up to
            :data:`AUTO_PARALLEL_GAMES`, as many as ``replay_size`` holds positions of).
        hidden, latent: network widths.
        k, same, grid, window, profile_bins, supply_window: the observation
            (:class:`~egrl.agents.muzero.encode.EncoderSpec`).
    """

    dynamics: str = ruled(Rule(str, choices=DYNAMICS), "learned")
    simulations: int = ruled(at_least(1), 16)
    discount: float = ruled(Rule(float, low=0, high=1, low_open=True), 0.9999)
    noise_alpha: float = ruled(positive(), 0.03)
    noise_fraction: float = ruled(FRACTION, 0.25)
    init_temperature: float = ruled(positive(), 1.0)
    final_temperature: float = ruled(at_least(0, float), 0.2)
    temperature_decay_steps: int = ruled(at_least(1), 2000)
    batch_size: int = ruled(at_least(1), 64)
    lr: float = ruled(positive(), 1e-3)
    weight_decay: float = ruled(at_least(0, float), 1e-4)
    replay_size: int = ruled(at_least(1), 20000)
    td_steps: int = ruled(at_least(1), 10)
    unroll_steps: int = ruled(at_least(1), 5)
    updates_per_move: float = ruled(at_least(0, float), 0.1)
    max_updates_per_game: int = ruled(at_least(0), 500)
    search_forced: bool = ruled(FLAG, False)
    parallel_games: int | str = ruled(Rule(int, low=1, words=("auto",)), "auto")
    hidden: int = ruled(at_least(1), 128)
    latent: int = ruled(at_least(1), 64)
    k: int = ruled(ENCODER["k"], 5)
    same: int = ruled(ENCODER["same"], 5)
    grid: int = ruled(ENCODER["grid"], 32)
    window: int = ruled(ENCODER["window"], 128)
    profile_bins: int = ruled(ENCODER["profile_bins"], 128)
    supply_window: int = ruled(ENCODER["supply_window"], 64)

    #: the checks of fields that go together (:func:`egrl.validation.field_problems`)
    RELATIONS = (grid_fits,)


def select_action(visits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """An action drawn with probability ``visits ** (1 / temperature)`` (argmax at 0)."""
    if temperature <= 0 or visits.sum() == 0:
        return int(np.argmax(visits))
    p = visits.astype(np.float64) ** (1.0 / temperature)
    return int(rng.choice(len(visits), p=p / p.sum()))


def training_loss(net: MuZeroNet, batch: Batch, reward_factor: float) -> dict[str, torch.Tensor]:
    """MuZero's loss over a batch: policy cross-entropy, value and reward squared errors,
    averaged over the ``K + 1`` unroll steps (the latent state's gradient halved at each
    dynamics step). ``reward_factor`` turns reward targets into the dynamics' units.
    Beside the terms, ``entropy``: the predicted policy's mean entropy (nats) at the
    batch's observed positions, no gradient."""
    vectors = torch.from_numpy(batch.vectors)
    state = net.represent(vectors, torch.from_numpy(batch.grids))
    actions = torch.from_numpy(batch.actions)
    values = torch.from_numpy(batch.values)
    rewards = torch.from_numpy(batch.rewards) * reward_factor
    policies = torch.from_numpy(batch.policies)
    mask = torch.from_numpy(batch.policy_mask)
    steps = actions.shape[1] + 1
    total = {"policy": 0.0, "value": 0.0, "reward": 0.0}
    for k in range(steps):
        if k:
            state, reward = net.dynamics(state, actions[:, k - 1])
            state = 0.5 * state + 0.5 * state.detach()
            total["reward"] = total["reward"] + ((reward - rewards[:, k]) ** 2).mean()
        logits, value = net.predict(state)
        logp = torch.log_softmax(logits, dim=1)
        if not k:  # the policy's entropy at the observed positions (a diagnostic)
            entropy = -(logp.exp() * logp).sum(1).mean().detach()
        total["policy"] = total["policy"] + (-(policies[:, k] * logp).sum(1) * mask[:, k]).mean()
        total["value"] = total["value"] + ((value - values[:, k]) ** 2).mean()
    parts = {key: v / steps for key, v in total.items()}
    parts["loss"] = parts["policy"] + parts["value"] + parts["reward"]
    parts["entropy"] = entropy
    return parts


def optimizer_state(opt: torch.optim.Optimizer) -> dict:
    """Adam's state as plain nests (per-parameter states as a list, no int keys)."""
    sd = opt.state_dict()
    n = sum(len(g["params"]) for g in sd["param_groups"])
    return {
        "state": [dict(sd["state"].get(i, {})) for i in range(n)],
        "param_groups": sd["param_groups"],
    }


def load_optimizer_state(opt: torch.optim.Optimizer, state: dict) -> None:
    per = {i: s for i, s in enumerate(state["state"]) if s}
    opt.load_state_dict({"state": per, "param_groups": list(state["param_groups"])})


@register_agent("muzero")
class MuZeroAgent(GameAgent):
    """The MuZero-style planner (see the module docstring)."""

    extra_columns = GAME_COLUMNS + (
        "moves",
        "searched_moves",
        "backups",
        "moves_per_s",
        "train_steps",
        "loss",
        "policy_loss",
        "value_loss",
        "reward_loss",
        "policy_entropy",
        "mean_game_return",
        "temperature",
    )

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        super().__init__(env, cfg, run_dir)
        o = parse_options(MuZeroOptions, cfg)
        if o.dynamics is True:  # `agent.dynamics=true` reaches us as YAML's boolean
            o = replace(o, dynamics="true")
        self.options = o
        spec = EncoderSpec(o.k, o.same, o.grid, o.window, o.profile_bins, o.supply_window)
        self.encoder = Encoder(self.program, spec)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            self.net = MuZeroNet(spec.vector_size, spec.grid, o.hidden, o.latent)
        # the fused step (one pass over every parameter) is a third of the per-parameter
        # loop's time on CPU; its results can differ from the loop's in the last bits
        self.optimizer = torch.optim.Adam(
            self.net.parameters(), lr=o.lr, weight_decay=o.weight_decay, fused=True
        )
        self.search_cfg = SearchConfig(
            simulations=o.simulations,
            discount=o.discount,
            noise_alpha=o.noise_alpha,
            noise_fraction=o.noise_fraction,
        )
        self.replay = Replay(o.replay_size, o.td_steps, o.discount)
        self.parallel_games = self.games_per_generation(o)
        self.train_steps = 0
        self.moves_played = 0

    def games_per_generation(self, o: MuZeroOptions) -> int:
        """``parallel_games`` resolved (``auto``) and checked: more than one game must fit
        in the replay buffer, ``parallel_games x N <= replay_size`` (one game is always
        kept whole)."""
        n = self.program.num_buffers
        g = o.parallel_games
        if g == "auto":
            return max(1, min(AUTO_PARALLEL_GAMES, o.replay_size // n))
        if g > 1 and g * n > o.replay_size:
            raise option_error(
                self.name,
                f"option parallel_games={g}: {g} games of the program's {n} buffers do not "
                f"fit in replay_size={o.replay_size} positions (at most {o.replay_size // n})",
            )
        return g

    # ---------------------------------------------------------------- playing
    def temperature(self) -> float:
        """The action-selection temperature at the current training step."""
        o = self.options
        frac = min(self.train_steps / o.temperature_decay_steps, 1.0)
        return o.init_temperature + frac * (o.final_temperature - o.init_temperature)

    def model(
        self,
        game: Game,
        vector: np.ndarray,
        grid: np.ndarray,
        legal: np.ndarray,
        latent: np.ndarray | None = None,
    ):
        """The planning model of ``dynamics`` at ``game``'s current state (``latent``: its
        latent state if already computed)."""
        heads, o = self.heads, (vector, grid)
        if self.options.dynamics == "true":
            return TrueModel(self.net, heads, self.encoder, game, self.bound, o, latent)
        unit = 1.0 / self.program.num_buffers
        return LearnedModel(self.net, heads, vector, grid, legal, unit, latent)

    def play_game(self, temperature: float) -> tuple[Game, Trajectory, int]:
        """One self-play game: ``(game, trajectory, searched moves)``; the game is left
        unfinished if the :attr:`deadline` passes. The one-game reference of
        :meth:`play_games` (a search of :func:`~egrl.agents.muzero.mcts.search` per move)."""
        self.net.eval()
        self.heads = NumpyHeads(self.net)
        game = Game(self.program)
        traj = Trajectory()
        searched = 0
        while not game.done and not self.past_deadline():
            vector, grid = self.encoder(game)
            legal = game.legal_actions()
            if legal.sum() == 1 and not self.options.search_forced:
                action = int(np.flatnonzero(legal)[0])
                policy = legal.astype(np.float64)
                value = self.heads.predict(represent(self.net, vector, grid))[1]
            else:
                result = search(self.model(game, vector, grid, legal), self.search_cfg, self.rng)
                policy, value = result.policy, result.value
                action = select_action(result.visits, temperature, self.rng)
                searched += 1
            step = game.step(action)
            traj.add(vector, grid, action, step.reward / self.bound, policy, value)
        return game, traj, searched

    def search_games(
        self,
        games: list[Game],
        vectors: np.ndarray,
        grids: np.ndarray,
        latents: np.ndarray,
        legal: np.ndarray,
    ) -> list[SearchResult]:
        """A search of each of ``games`` from its current state (observations
        ``vectors [B, F]``, ``grids [B, grid, grid]``, ``latents [B, latent]``, ``legal
        [B, 3]``): one batched search, or one by one below :data:`SEARCH_TOGETHER_FROM`.
        The Dirichlet noise is drawn game by game in order either way."""
        o, cfg = self.options, self.search_cfg
        if len(games) < SEARCH_TOGETHER_FROM[o.dynamics]:
            return [
                search(self.model(game, vectors[j], grids[j], legal[j], latents[j]), cfg, self.rng)
                for j, game in enumerate(games)
            ]
        if o.dynamics == "true":
            model = TrueBatch(self.net, self.heads, self.encoder, games, self.bound, latents, legal)
        else:
            model = LearnedBatch(self.heads, latents, legal, 1.0 / self.program.num_buffers)
        result = batched_search(model, cfg, self.rng)
        return [result[j] for j in range(len(games))]

    def play_games(self, count: int, temperature: float) -> list[tuple[Game, Trajectory, int]]:
        """``count`` self-play games side by side: ``(game, trajectory, searched moves)``
        each. At every move the games still under way are encoded together
        (:meth:`Encoder.batch`) and represented in one torch call, and the ones with a
        choice are searched together (:meth:`search_games`); the Dirichlet noise and the
        moves are drawn game by game in order. The games are left unfinished if the
        :attr:`deadline` passes."""
        self.net.eval()
        self.heads = NumpyHeads(self.net)
        games = [Game(self.program) for _ in range(count)]
        trajs = [Trajectory() for _ in range(count)]
        searched = [0] * count
        while True:
            live = [i for i, game in enumerate(games) if not game.done]
            if not live or self.past_deadline():
                break
            vectors, grids = self.encoder.batch([games[i] for i in live])
            legal = np.stack([games[i].legal_actions() for i in live])
            latents = represent_batch(self.net, vectors, grids)
            policies = legal.astype(np.float64)
            values = np.zeros(len(live))
            actions = legal.argmax(axis=1)  # the legal action of a forced move
            if self.options.search_forced:
                chosen = np.arange(len(live))
            else:
                chosen = np.flatnonzero(legal.sum(axis=1) > 1)
                forced = np.flatnonzero(legal.sum(axis=1) == 1)
                if len(forced):
                    values[forced] = self.heads.predict_batch(latents[forced])[1]
            if len(chosen):
                results = self.search_games(
                    [games[live[j]] for j in chosen],
                    *(a[chosen] for a in (vectors, grids, latents, legal)),
                )
                for one, j in zip(results, chosen.tolist()):
                    policies[j], values[j] = one.policy, one.value
                    actions[j] = select_action(one.visits, temperature, self.rng)
                    searched[live[j]] += 1
            for j, i in enumerate(live):
                step = games[i].step(int(actions[j]))
                reward = step.reward / self.bound
                trajs[i].add(vectors[j], grids[j], int(actions[j]), reward, policies[j], values[j])
        return list(zip(games, trajs, searched))

    # --------------------------------------------------------------- learning
    def train(self, updates: int) -> dict[str, float]:
        """``updates`` Adam steps on replay batches; the mean of each loss term."""
        self.net.train()
        sums: dict[str, float] = {}
        for _ in range(updates):
            batch = self.replay.sample(self.options.batch_size, self.options.unroll_steps, self.rng)
            parts = training_loss(self.net, batch, float(self.program.num_buffers))
            self.optimizer.zero_grad()
            parts["loss"].backward()
            self.optimizer.step()
            self.train_steps += 1
            for key, v in parts.items():
                sums[key] = sums.get(key, 0.0) + float(v.detach())
        return {k: v / max(updates, 1) for k, v in sums.items()}

    def step(self) -> dict:
        temp = self.temperature()
        count = min(self.parallel_games, max(self.ledger.remaining, 1))  # no game past the budget
        start = time.perf_counter()
        # the search's NumPy matrix products on as many BLAS threads as torch has
        with threadpool_limits(torch.get_num_threads(), user_api="blas"):
            with self.timer("inference"):
                played = self.play_games(count, temp)
        play_s = time.perf_counter() - start
        moves = sum(len(traj) for _, traj, _ in played)
        searched = sum(n for _, _, n in played)
        finished = [(game, traj) for game, traj, _ in played if game.done]
        if finished:  # an unfinished game (the deadline passed) is neither paid nor stored
            returns = np.array([game.ret for game, _ in finished])
            self.pay(np.stack([game.actions for game, _ in finished]), returns, "muzero")
            for _, traj in finished:
                self.replay.add(traj)
                self.moves_played += len(traj)
        if len(finished) < len(played):  # the deadline passed: nothing learnt
            row = self.game_row(returns) if finished else {}
            return {**row, "moves": moves, "searched_moves": searched}
        o = self.options
        updates = min(
            o.max_updates_per_game * len(finished),
            math.ceil(o.updates_per_move * sum(len(traj) for _, traj in finished)),
        )
        with self.timer("learner"):
            losses = self.train(updates)
        return {
            **self.game_row(returns),
            "moves": moves,
            "searched_moves": searched,
            "backups": sum(game.backups for game, _ in finished),
            "moves_per_s": moves / max(play_s, 1e-9),
            "train_steps": self.train_steps,
            "loss": losses.get("loss", float("nan")),
            "policy_loss": losses.get("policy", float("nan")),
            "value_loss": losses.get("value", float("nan")),
            "reward_loss": losses.get("reward", float("nan")),
            "policy_entropy": losses.get("entropy", float("nan")),
            "mean_game_return": float(np.mean(returns)),
            "temperature": temp,
        }

    # ------------------------------------------------------------ checkpoints
    def agent_state(self) -> dict:
        return {
            **self.game_state(),
            "train_steps": self.train_steps,
            "moves_played": self.moves_played,
            "net": {k: v.detach().clone() for k, v in self.net.state_dict().items()},
            "optimizer": optimizer_state(self.optimizer),
            "replay": self.replay.state_dict(),
            "options": asdict(self.options),
        }

    def load_agent_state(self, state: dict) -> None:
        self.load_game_state(state)
        self.train_steps = int(state["train_steps"])
        self.moves_played = int(state["moves_played"])
        self.net.load_state_dict(state["net"])
        load_optimizer_state(self.optimizer, state["optimizer"])
        self.replay.load_state_dict(state["replay"])
