"""The memory-mapping game (MMapGame) of Wang et al., arXiv:2305.07440, Appendix A.

The player visits the program's buffers in order and decides, for each, ``Drop``
(stay in HBM), ``Copy`` (copy it into CMEM) or ``NoCopy`` (keep it in CMEM by extending
an earlier allocation of its tensor). Each decision allocates CMEM over a logical time
interval at an offset:

* **Copy, operand** at time ``t``: ``I = [s, t]``, ``s`` the latest step such that the
  copy ``[s, t)`` finds enough supply (Equation 5) and shares at most one step with any
  other copy (Equation 6); the copy cannot start before the tensor exists.
* **Copy, output**: ``I = [t, e]``, ``e`` the earliest step such that the copy-out
  ``(t, e]`` meets Equations 5 and 6.
* **NoCopy, operand**: ``I = (s, t]``, ``s`` the latest step held by an earlier
  allocation of the same tensor; the buffer sits at that allocation's offset (the
  allocation is extended). If the earlier allocation already reaches ``t``, the buffer
  uses it as it is (empty own interval). Illegal if the tensor has no earlier allocation.
* **NoCopy, output**: ``I = live_range`` (kept in CMEM for the tensor's whole life).
* **Offsets**: the lowest offset whose ``size`` bytes are free over all of ``I``
  (Copy, output NoCopy); the offset of an alias group's first CMEM buffer for the rest
  of the group (Equation 4). An alias group is all in CMEM or all in HBM.
* **Rewards**: Copy and NoCopy earn the buffer's benefit, ``L_t(B') - L_t(B' + {b})``
  with ``B'`` the buffers of its instruction already in CMEM; Drop earns 0.
* **Supply**: a Copy uses up the supply of the steps its copy spans (latest-first for
  a prefetch, earliest-first for a copy-out).

A state with no legal action is lost (the return drops to 0), unless ``drop_backup``:
then the game goes back to the last safe state (no alias group half-placed in CMEM),
marks the offending alias group as dropped, and goes on (section 4.3.2's Drop-backup).

Every interpretation of the paper made here is listed in ``docs/tpu.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hwmodels.tpu.program import Program

if TYPE_CHECKING:
    from hwmodels.tpu.layout import Layout

#: action indices and names (the choices of the target's one head, in this order)
DROP, COPY, NOCOPY = 0, 1, 2
ACTIONS: tuple[str, ...] = ("Drop", "Copy", "NoCopy")

# rows of Game._buf (per buffer)
_ACT, _OFF, _START, _END, _CSTART, _CEND = range(6)
# rows of Game._rec (per placed allocation)
_RS, _RE, _RLO, _RHI, _RG = range(5)
# rows of Game._grp (per alias group) and group states
_GSTATE, _GOFF, _GPLACED = range(3)
_OPEN, _HBM, _CMEM = -1, 0, 1


class IllegalActionError(ValueError):
    """An action that is not legal in the current state."""


@dataclass(frozen=True)
class Placement:
    """What an action does to the current buffer.

    Attributes:
        legal: the action is legal.
        start, end: allocation interval, inclusive (``end < start``: no new CMEM time).
        offset: CMEM offset (-1: HBM, or illegal).
        copy_start, copy_end: steps of the copy, inclusive (-1: no copy).
    """

    legal: bool
    start: int = -1
    end: int = -2
    offset: int = -1
    copy_start: int = -1
    copy_end: int = -1


_ILLEGAL = Placement(False)
_DROPPED = Placement(True)


@dataclass(frozen=True)
class StepResult:
    """The outcome of :meth:`Game.step`.

    Attributes:
        reward: the step's reward (with a Drop-backup: the change of the return, which
            is the negative of what was undone).
        done: the game is over (complete or lost).
        backed_up: the step ran into a state without legal actions and the game went
            back to its last safe state (``position`` moved back).
        lost: the game is lost (no legal action and no Drop-backup).
    """

    reward: float
    done: bool
    backed_up: bool = False
    lost: bool = False


@dataclass(frozen=True)
class PlayResult:
    """The outcome of :meth:`Game.play`.

    Attributes:
        actions: int64 ``[N]``: the action each buffer got in the end.
        replaced: bool ``[N]``: the proposed action was not the one taken.
        ret: the game's return (sum of rewards of the final trajectory).
        backups: Drop-backups taken.
        lost: the game was lost (only without ``drop_backup``).
    """

    actions: np.ndarray
    replaced: np.ndarray
    ret: float
    backups: int
    lost: bool


class Game:
    """One play of the memory-mapping game on a program.

    Shapes: ``N`` buffers, ``T`` instructions, ``G`` alias groups, ``K`` tensors.

    Args:
        program: the program (immutable; shared by clones).
        drop_backup: on reaching a state with no legal action, go back to the last safe
            state and drop the offending alias group instead of losing.
    """

    def __init__(self, program: Program, drop_backup: bool = True) -> None:
        p = program
        self.program = p
        self.drop_backup = bool(drop_backup)
        n = p.num_buffers
        self._cap = p.params.cmem_bytes
        # immutable per-buffer data as Python lists (fast scalar access)
        self._size = p.size.tolist()
        self._time = p.time.tolist()
        self._out = p.is_output.tolist()
        self._tensor = p.tensor.tolist()
        self._alias = p.alias.tolist()
        self._ready = p.ready.tolist()
        self._live_end = p.live_end.tolist()
        self._demand = p.demand_ps.tolist()
        self._ptr = p.instr_ptr.tolist()
        self._cum0 = np.concatenate([[0], np.cumsum(p.supply_ps)]).tolist()
        self._ibytes = p.instr_bytes.tolist()
        self._compute = p.compute_s.tolist()
        self._hbm_bw = p.params.hbm_gbps * 1e9
        self._cmem_bw = p.params.cmem_gbps * 1e9
        # alias groups of more than one buffer get state (singletons need none)
        multi = p.group_size > 1
        gidx = np.full(p.num_groups, -1, dtype=np.int64)
        gidx[multi] = np.arange(int(multi.sum()))
        self._gidx = gidx[p.alias].tolist()  # per buffer: its multi-buffer group, -1
        self._gsize = p.group_size[p.alias].tolist()  # per buffer: its group's size
        self._n = n
        # mutable state: per-buffer rows hold meaningful values before ``position`` only,
        # records before ``_m`` only; snapshots copy those prefixes
        self._buf = [np.empty(n, dtype=np.int32) for _ in range(6)]
        self._rew = np.empty(n, dtype=np.float64)
        self._rec = [np.empty(n, dtype=np.int32) for _ in range(5)]
        self._rbuf = np.empty(n, dtype=np.int32)  # buffer of each record
        self._m = 0
        self._supply = p.supply_ps.tolist()
        self._pair = [0] * p.num_instructions
        g = int(multi.sum())
        self._grp = [[_OPEN] * g, [-1] * g, [0] * g]  # state, offset, placed
        self._ten = [[-1] * p.num_tensors, [-1] * p.num_tensors]  # latest end, its offset
        self.position = 0
        self.ret = 0.0
        self._open = 0  # alias groups with members in CMEM and members still to place
        self.backups = 0
        self.moves = 0  # steps taken, the undone ones of Drop-backups included
        self.lost = False
        self._cand: dict[int, Placement] = {}
        self._backup: tuple | None = None
        self._maybe_save_backup()

    # ------------------------------------------------------------------ state
    @property
    def num_buffers(self) -> int:
        return self._n

    @property
    def done(self) -> bool:
        """The game is complete or lost."""
        return self.lost or self.position >= self._n

    def _row(self, row: int, fill: int) -> np.ndarray:
        """int64 ``[N]``: a per-buffer row, ``fill`` past the current position."""
        out = np.full(self._n, fill, dtype=np.int64)
        out[: self.position] = self._buf[row][: self.position]
        return out

    @property
    def actions(self) -> np.ndarray:
        """int64 ``[N]``: actions taken so far (-1: not decided yet)."""
        return self._row(_ACT, -1)

    @property
    def rewards(self) -> np.ndarray:
        """float64 ``[N]``: reward each decided buffer earned (0 for the rest)."""
        out = np.zeros(self._n)
        out[: self.position] = self._rew[: self.position]
        return out

    def snapshot(self) -> tuple:
        """The mutable state (restore it with :meth:`restore`): copies of the decided
        prefix, O(position) for the per-buffer part."""
        pos, m = self.position, self._m
        return (
            pos,
            self.ret,
            self._open,
            m,
            (self.backups, self.moves),
            self.lost,
            [r[:pos].copy() for r in self._buf],
            self._rew[:pos].copy(),
            [r[:m].copy() for r in self._rec],
            self._rbuf[:m].copy(),
            self._supply.copy(),
            self._pair.copy(),
            [r.copy() for r in self._grp],
            [r.copy() for r in self._ten],
            self._backup,
        )

    def restore(self, snap: tuple) -> None:
        """Go back to a :meth:`snapshot` of this game (or of a clone of it)."""
        (pos, self.ret, self._open, m, counts, self.lost, buf, rew, rec, rbuf) = snap[:10]
        self.backups, self.moves = counts
        supply, pair, grp, ten, self._backup = snap[10:]
        self.position, self._m = pos, m
        for mine, saved in zip(self._buf, buf):
            mine[:pos] = saved
        self._rew[:pos] = rew
        for mine, saved in zip(self._rec, rec):
            mine[:m] = saved
        self._rbuf[:m] = rbuf
        self._supply, self._pair = supply.copy(), pair.copy()
        self._grp = [r.copy() for r in grp]
        self._ten = [r.copy() for r in ten]
        self._cand = {}

    def clone(self) -> Game:
        """An independent copy of this game in its current state."""
        other = object.__new__(Game)
        other.__dict__.update(self.__dict__)
        pos, m = self.position, self._m
        other._buf = [_prefix_copy(r, pos) for r in self._buf]
        other._rew = _prefix_copy(self._rew, pos)
        other._rec = [_prefix_copy(r, m) for r in self._rec]
        other._rbuf = _prefix_copy(self._rbuf, m)
        other._supply, other._pair = self._supply.copy(), self._pair.copy()
        other._grp = [r.copy() for r in self._grp]
        other._ten = [r.copy() for r in self._ten]
        other._cand = dict(self._cand)
        return other

    # ------------------------------------------------------------- queries
    def legal_actions(self) -> np.ndarray:
        """bool ``[3]``: which of Drop, Copy, NoCopy are legal now (all False when done)."""
        if self.done:
            return np.zeros(3, dtype=bool)
        return np.array([self.placement(a).legal for a in range(3)])

    def is_legal(self, action: int) -> bool:
        """Whether ``action`` is legal now."""
        return not self.done and self.placement(action).legal

    def placement(self, action: int) -> Placement:
        """What ``action`` would do to the current buffer (its interval, offset, copy)."""
        cand = self._cand.get(action)
        if cand is None:
            cand = self._cand[action] = self._place(self.position, int(action))
        return cand

    def benefit(self) -> float:
        """The current buffer's benefit now (seconds): what Copy or NoCopy would earn."""
        return self._benefit(self.position)

    # -------------------------------------------------------------- moves
    def step(self, action: int) -> StepResult:
        """Apply ``action`` to the current buffer.

        Raises:
            IllegalActionError: the game is over or the action is not legal (nothing
                changes).
        """
        if self.done:
            raise IllegalActionError("the game is over")
        if action not in (DROP, COPY, NOCOPY):
            raise IllegalActionError(
                f"unknown action {action!r}; expected 0 (Drop), 1 (Copy) or 2 (NoCopy)"
            )
        pl = self.placement(action)
        if not pl.legal:
            b = self.position
            raise IllegalActionError(
                f"{ACTIONS[action]} is not legal for buffer {self.program.describe(b)} "
                f"(legal: {[ACTIONS[a] for a in range(3) if self.placement(a).legal]})"
            )
        before = self.ret
        self.moves += 1
        self._apply(self.position, action, pl)
        if self.done:
            return StepResult(self.ret - before, True)
        if not self._feasible():
            if self.drop_backup and self._backup is not None:
                self._back_up()
                return StepResult(self.ret - before, False, backed_up=True)
            self.lost = True
            self.ret = 0.0  # the paper's large negative reward: the return drops to 0
            return StepResult(-before, True, lost=True)
        self._maybe_save_backup()
        return StepResult(self.ret - before, False)

    def play(self, actions, repair: bool = True) -> PlayResult:
        """Play the rest of the game with one proposed action per buffer.

        Args:
            actions: int ``[N]``: an action for every buffer (those already decided are
                ignored).
            repair: replace an illegal proposal by Drop where Drop is legal, else by the
                legal one of Copy / NoCopy (Copy first); states without any legal action
                are handled by Drop-backup (or lose the game without it). ``False``:
                raise on the first illegal proposal.

        Raises:
            IllegalActionError: ``repair=False`` and a proposal is illegal.
        """
        proposed = np.asarray(actions, dtype=np.int64)
        if proposed.shape != (self.num_buffers,):
            raise ValueError(
                f"play needs one action per buffer, shape [{self.num_buffers}], got {list(proposed.shape)}"
            )
        bad = np.flatnonzero((proposed < 0) | (proposed > 2))
        if bad.size:
            raise ValueError(
                f"action {proposed[bad[0]]} of buffer {self.program.describe(int(bad[0]))} is not 0, 1 or 2"
            )
        plan = proposed.tolist()
        while not self.done:
            a = plan[self.position]
            if not self.placement(a).legal:
                if not repair:
                    self.step(a)  # raises
                a = next(x for x in (DROP, COPY, NOCOPY) if self.placement(x).legal)
            self.step(a)
        taken = self.actions
        return PlayResult(taken, taken != proposed, self.ret, self.backups, self.lost)

    # ---------------------------------------------------------- internals
    def _benefit(self, b: int) -> float:
        t = self._time[b]
        lo = self._ptr[t]
        offs = self._buf[_OFF][lo:b].tolist()
        cm = sum(s for s, o in zip(self._size[lo:b], offs) if o >= 0)
        hb = self._ibytes[t] - cm
        size = self._size[b]
        c = self._compute[t]
        now = max(c, hb / self._hbm_bw + cm / self._cmem_bw)
        after = max(c, (hb - size) / self._hbm_bw + (cm + size) / self._cmem_bw)
        return now - after

    def _group(self, b: int) -> tuple[int, int]:
        """``(multi-buffer group index or -1, its state)`` of buffer ``b``."""
        gi = self._gidx[b]
        return gi, (self._grp[_GSTATE][gi] if gi >= 0 else _OPEN)

    def _place(self, b: int, action: int) -> Placement:
        """The placement of ``action`` for buffer ``b`` in the current state."""
        gi, state = self._group(b)
        if action == DROP:
            return _DROPPED if state != _CMEM else _ILLEGAL
        if state == _HBM:
            return _ILLEGAL
        forced = self._grp[_GOFF][gi] if state == _CMEM else -1
        t, size = self._time[b], self._size[b]
        cs = ce = -1
        if action == COPY:
            if self._out[b]:
                ce = self._copy_out(t, self._demand[b])
                if ce < 0:
                    return _ILLEGAL
                cs, start, end = t + 1, t, ce
            else:
                cs = self._copy_in(t, self._ready[b], self._demand[b])
                if cs < 0:
                    return _ILLEGAL
                ce, start, end = t - 1, cs, t
        elif self._out[b]:
            start, end = t, self._live_end[b]
        else:
            k = self._tensor[b]
            held = self._ten[0][k]
            if held < 0:
                return _ILLEGAL
            off = self._ten[1][k]
            if forced >= 0 and off != forced:
                return _ILLEGAL
            if held >= t:  # the earlier allocation already covers t
                return Placement(True, t, t - 1, off)
            start, end = held + 1, t
            forced = off
        group = self._alias[b]
        if forced >= 0:
            if not self._free(start, end, forced, size, group):
                return _ILLEGAL
            return Placement(True, start, end, forced, cs, ce)
        off = self._lowest(start, end, size)
        if off < 0:
            return _ILLEGAL
        return Placement(True, start, end, off, cs, ce)

    def _copy_in(self, t: int, ready: int, demand: int) -> int:
        """Latest copy start ``s`` with ``[s, t)`` meeting Equations 5 and 6; -1 if none."""
        if ready >= t or self._cum0[t] - self._cum0[ready] < demand:
            return -1
        supply, pair = self._supply, self._pair
        acc = 0
        for s in range(t - 1, ready - 1, -1):
            if s <= t - 2 and pair[s]:
                return -1
            acc += supply[s]
            if acc >= demand:
                return s
        return -1

    def _copy_out(self, t: int, demand: int) -> int:
        """Earliest copy end ``e`` with ``(t, e]`` meeting Equations 5 and 6; -1 if none."""
        last = len(self._supply)
        if t + 1 >= last or self._cum0[last] - self._cum0[t + 1] < demand:
            return -1
        supply, pair = self._supply, self._pair
        acc = 0
        for e in range(t + 1, last):
            if e >= t + 2 and pair[e - 1]:
                return -1
            acc += supply[e]
            if acc >= demand:
                return e
        return -1

    def _overlapping(self, start: int, end: int) -> np.ndarray:
        """Indices of the records whose interval meets ``[start, end]``."""
        m = self._m
        return np.flatnonzero((self._rec[_RS][:m] <= end) & (self._rec[_RE][:m] >= start))

    def _free(self, start: int, end: int, off: int, size: int, group: int) -> bool:
        """Bytes ``[off, off + size)`` are free over ``[start, end]`` (the alias group's
        own allocations aside)."""
        if off + size > self._cap:
            return False
        idx = self._overlapping(start, end)
        if idx.size == 0:
            return True
        rec = self._rec
        hit = (rec[_RLO][idx] < off + size) & (rec[_RHI][idx] > off) & (rec[_RG][idx] != group)
        return not hit.any()

    def _lowest(self, start: int, end: int, size: int) -> int:
        """Lowest offset with ``size`` free bytes over ``[start, end]``; -1 if none."""
        if size > self._cap:
            return -1
        idx = self._overlapping(start, end)
        if idx.size == 0:
            return 0
        lo = self._rec[_RLO][idx]
        order = np.argsort(lo, kind="stable")
        lo = lo[order]
        reach = np.maximum.accumulate(self._rec[_RHI][idx][order])
        gap_start = np.concatenate(([0], reach))
        gap_end = np.concatenate((lo, [self._cap]))
        fits = np.flatnonzero(gap_end - gap_start >= size)
        return int(gap_start[fits[0]]) if fits.size else -1

    def _apply(self, b: int, action: int, pl: Placement) -> None:
        gi, state = self._group(b)
        buf = self._buf
        buf[_ACT][b] = action
        reward = 0.0
        if action == DROP:
            buf[_OFF][b], buf[_START][b], buf[_END][b] = -1, -1, -2
            buf[_CSTART][b] = buf[_CEND][b] = -1
            if state == _OPEN and gi >= 0:
                self._grp[_GSTATE][gi] = _HBM
        else:
            reward = self._benefit(b)
            off, size = pl.offset, self._size[b]
            buf[_OFF][b], buf[_START][b], buf[_END][b] = off, pl.start, pl.end
            buf[_CSTART][b], buf[_CEND][b] = pl.copy_start, pl.copy_end
            if pl.end >= pl.start:
                m = self._m
                rec = self._rec
                rec[_RS][m], rec[_RE][m], rec[_RLO][m] = pl.start, pl.end, off
                rec[_RHI][m], rec[_RG][m] = off + size, self._alias[b]
                self._rbuf[m] = b
                self._m = m + 1
            if action == COPY:
                self._consume(pl.copy_start, pl.copy_end, self._demand[b], self._out[b])
            k = self._tensor[b]
            if pl.end > self._ten[0][k]:
                self._ten[0][k], self._ten[1][k] = pl.end, off
            if state == _OPEN and gi >= 0:
                self._grp[_GSTATE][gi], self._grp[_GOFF][gi] = _CMEM, off
                self._open += 1
        if gi >= 0:
            placed = self._grp[_GPLACED][gi] + 1
            self._grp[_GPLACED][gi] = placed
            if placed == self._gsize[b] and self._grp[_GSTATE][gi] == _CMEM:
                self._open -= 1
        self._rew[b] = reward
        self.ret += reward
        self.position = b + 1
        self._cand = {}

    def _consume(self, cs: int, ce: int, demand: int, out: bool) -> None:
        """Use ``demand`` of supply over copy steps ``[cs, ce]`` and mark them busy."""
        supply, pair = self._supply, self._pair
        if out:  # copy-out: earliest first, the remainder from the last step
            full = range(cs, ce)
            part = ce
        else:  # prefetch: latest first, the remainder from the first step
            full = range(cs + 1, ce + 1)
            part = cs
        rest = demand
        for x in full:
            rest -= supply[x]
            supply[x] = 0
        supply[part] -= rest
        for x in range(cs, ce):
            pair[x] += 1

    def _feasible(self) -> bool:
        """The current buffer has a legal action."""
        if self._group(self.position)[1] != _CMEM:
            return True
        return self.placement(COPY).legal or self.placement(NOCOPY).legal

    def _maybe_save_backup(self) -> None:
        """Save a backup at a safe state about to open a multi-buffer alias group."""
        if self.done or self._open:
            return
        gi, state = self._group(self.position)
        if gi >= 0 and state == _OPEN:
            self._backup = None  # a backup never holds an older one
            self._backup = self.snapshot()

    def _back_up(self) -> None:
        """Drop-backup: return to the last safe state and drop the offending group."""
        gi = self._gidx[self.position]
        backups, moves = self.backups + 1, self.moves
        self.restore(self._backup)
        self.backups, self.moves = backups, moves
        self._grp[_GSTATE][gi] = _HBM
        self._backup = None
        self._backup = self.snapshot()  # safe: no group is half-placed in CMEM

    # ------------------------------------------------------------ results
    def layout(self) -> Layout:
        """The layout decided so far (undecided buffers are in HBM)."""
        from hwmodels.tpu.layout import Layout

        used = self.program.supply_ps - np.asarray(self._supply, dtype=np.int64)
        return Layout(
            program=self.program,
            action=self._row(_ACT, -1),
            offset=self._row(_OFF, -1),
            start=self._row(_START, -1),
            end=self._row(_END, -2),
            copy_start=self._row(_CSTART, -1),
            copy_end=self._row(_CEND, -1),
            copy_ps=used,
            ret=self.ret,
        )

    def supply(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """int64 ``[T]``: copy supply left at each step, ps (``W_t``); steps
        ``start:stop`` only if given (a window without copying the whole profile)."""
        return np.asarray(self._supply[start:stop], dtype=np.int64)

    def records(self) -> dict[str, np.ndarray]:
        """The CMEM allocations so far: ``start``, ``end`` (inclusive), ``offset``,
        ``size`` and ``buffer``, int64 ``[R]`` each."""
        m = self._m
        rec = [r[:m].astype(np.int64) for r in self._rec]
        return {
            "start": rec[_RS],
            "end": rec[_RE],
            "offset": rec[_RLO],
            "size": rec[_RHI] - rec[_RLO],
            "buffer": self._rbuf[:m].astype(np.int64),
        }


def _prefix_copy(row: np.ndarray, n: int) -> np.ndarray:
    """A new array like ``row`` whose first ``n`` entries are ``row``'s (the rest unset)."""
    out = np.empty_like(row)
    out[:n] = row[:n]
    return out
