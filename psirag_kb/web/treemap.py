"""A squarified treemap: rectangles whose areas are in proportion to sizes, as square as the
rows allow (Bruls, Huizing and van Wijk's method; a pure function, no drawing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class Box(NamedTuple):
    """A rectangle: its top-left corner, width and height."""

    x: float
    y: float
    w: float
    h: float

    def inset(self, left: float, top: float, right: float, bottom: float) -> Box:
        """The rectangle less these margins (never below zero size)."""
        return Box(self.x + left, self.y + top, max(0.0, self.w - left - right),
                   max(0.0, self.h - top - bottom))


def squarify(sizes: Sequence[float], box: Box) -> list[Box]:
    """One rectangle per size, in the sizes' order, tiling `box` with areas in proportion to
    the sizes (a size of zero or less gets an empty rectangle at the box's corner).

    The largest sizes are laid first, in rows along the shorter side of what is left; a size
    joins the current row while that makes the row's worst aspect ratio no worse.
    """
    out = [Box(box.x, box.y, 0.0, 0.0)] * len(sizes)
    order = sorted((i for i, s in enumerate(sizes) if s > 0), key=lambda i: -sizes[i])
    total = sum(sizes[i] for i in order)
    if not order or box.w <= 0 or box.h <= 0:
        return out
    scale = box.w * box.h / total
    areas = {i: sizes[i] * scale for i in order}
    x, y, w, h = box
    start = 0
    while start < len(order):
        side = min(w, h)
        end = start + 1
        row_sum = areas[order[start]]
        while end < len(order):
            wider = row_sum + areas[order[end]]
            if _worst(wider, areas[order[start]], areas[order[end]], side) > \
                    _worst(row_sum, areas[order[start]], areas[order[end - 1]], side):
                break
            row_sum = wider
            end += 1
        last = end == len(order)
        thick = row_sum / side if side > 0 else 0.0
        offset = 0.0
        for i in order[start:end]:
            length = areas[i] / thick if thick > 0 else 0.0
            if w >= h:  # a column at the left, filled top to bottom
                out[i] = Box(x, y + offset, w if last else thick, length)
            else:  # a row at the top, filled left to right
                out[i] = Box(x + offset, y, length, h if last else thick)
            offset += length
        if w >= h:
            x, w = x + thick, max(0.0, w - thick)
        else:
            y, h = y + thick, max(0.0, h - thick)
        start = end
    return out


def _worst(row_sum: float, largest: float, smallest: float, side: float) -> float:
    """The worst aspect ratio of a row of this total area along a side of this length."""
    if row_sum <= 0 or smallest <= 0 or side <= 0:
        return float("inf")
    square = side * side
    return max(square * largest / (row_sum * row_sum), row_sum * row_sum / (square * smallest))
