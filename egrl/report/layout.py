"""How the report's figures scale with the number of choices and of units.

A head with a few choices (NNP-I's DRAM / LLC / SRAM) keeps the paper's layout: every
cell of a transition matrix carries its fraction and count, and the levels are coloured
from slow (dark) to fast (light). A head with many choices (36 chips of ``mcm``) gets the
scaled layout: the matrix shows only the choices either map uses, without cell text and
with thinned ticks, and choices get distinct hues so that neighbours (chip 3, chip 4)
never share a colour. Maps of thousands of units are paged into rows.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import ListedColormap, hsv_to_rgb

#: a transition matrix of up to this many choices writes fraction and count in each cell
CELL_TEXT_MAX = 8
#: most tick labels on an axis; more choices get every k-th label
MAX_TICKS = 12
#: up to this many choices are ordered levels (viridis); more get distinct hues
ORDERED_MAX = 6
#: units per row of the map strip chart; longer maps are paged into rows
UNITS_PER_ROW = 1000
#: most rows per head; beyond ``MAX_ROWS * UNITS_PER_ROW`` units a row holds more
MAX_ROWS = 8
#: inches of legend per entry (font size 7 to 8)
LEGEND_ENTRY_IN = 0.17


@dataclass(frozen=True)
class MatrixLayout:
    """How one head's transition matrix is drawn.

    Attributes:
        shown: int ``[K]``: the choices drawn (rows and columns), ascending.
        hidden: choices left out (used by neither map).
        cell_text: write fraction and count in each cell.
        tick_step: label every ``tick_step``-th shown choice.
    """

    shown: np.ndarray
    hidden: int
    cell_text: bool
    tick_step: int

    @property
    def scaled(self) -> bool:
        """True for the layout of many choices (no cell text)."""
        return not self.cell_text

    @property
    def side_in(self) -> float:
        """Width of the matrix panel, inches."""
        return float(np.clip(0.2 * len(self.shown) + 2.2, 4.2, 10.0))

    def ticks(self, names: list[str]) -> tuple[list[int], list[str]]:
        """Positions and labels of the thinned ticks."""
        pos = list(range(0, len(self.shown), self.tick_step))
        return pos, [names[int(self.shown[p])] for p in pos]


def matrix_layout(counts: np.ndarray) -> MatrixLayout:
    """The layout of a head's transition matrix from its counts int ``[C, C]``."""
    c = counts.shape[0]
    if c <= CELL_TEXT_MAX:
        return MatrixLayout(np.arange(c), 0, True, 1)
    used = (counts.sum(axis=0) + counts.sum(axis=1)) > 0
    shown = np.flatnonzero(used) if used.any() else np.arange(c)
    return MatrixLayout(shown, c - len(shown), False, tick_step(len(shown)))


def tick_step(n: int, max_ticks: int = MAX_TICKS) -> int:
    """Label every k-th of ``n`` positions so that at most ``max_ticks`` are labelled."""
    return max(1, math.ceil(n / max_ticks))


def choice_colours(n: int) -> ListedColormap:
    """``n`` colours: ordered levels (viridis, slowest choice 0 dark) up to
    :data:`ORDERED_MAX` choices; beyond, hues a golden angle apart with alternating
    saturation and brightness, so that choices ``i`` and ``i + 1`` always differ."""
    n = max(n, 1)
    if n <= ORDERED_MAX:
        return ListedColormap(colormaps["viridis"](np.linspace(0.05, 0.95, n)))
    i = np.arange(n)
    hsv = np.stack(
        [(i * 0.6180339887) % 1.0, np.where(i % 2, 0.55, 0.85), np.where(i // 2 % 2, 0.7, 0.95)],
        axis=1,
    )
    return ListedColormap(hsv_to_rgb(hsv))


@dataclass(frozen=True)
class StripLayout:
    """How the map strip chart pages ``N`` units.

    Attributes:
        pages: ``(start, stop)`` unit ranges, one row of panels each.
        width_in: figure width, inches.
    """

    pages: list[tuple[int, int]]
    width_in: float

    @property
    def paged(self) -> bool:
        return len(self.pages) > 1


def strip_layout(num_units: int) -> StripLayout:
    """Rows of at most :data:`UNITS_PER_ROW` units (at most :data:`MAX_ROWS` rows)."""
    n = max(num_units, 1)
    per_row = max(UNITS_PER_ROW, math.ceil(n / MAX_ROWS))
    pages = [(s, min(s + per_row, n)) for s in range(0, n, per_row)]
    width = min(22.0, max(8.0, 0.075 * min(n, per_row) + 2.5))
    return StripLayout(pages, width)


def legend_columns(entries: int, height_in: float) -> int:
    """Columns a legend of ``entries`` needs to fit ``height_in`` inches."""
    per_column = max(3, int(height_in / LEGEND_ENTRY_IN))
    return max(1, math.ceil(entries / per_column))


def fit_title(text: str, width_in: float, fontsize: float) -> str:
    """``text`` wrapped to lines that fit ``width_in`` inches at ``fontsize`` points."""
    chars = max(20, int(width_in * 72 / (0.65 * fontsize)))
    return "\n".join(textwrap.wrap(text, chars)) or text
