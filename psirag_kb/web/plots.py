"""Small line charts drawn on the server as SVG: the daemon's last hour, one chart a measure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from markupsafe import Markup, escape

LINE_COLOURS = ("#1f5fa8", "#d2691e", "#2e8b57", "#8a4fbf", "#b8860b", "#c0392b")
WIDTH, HEIGHT = 320.0, 96.0
LEFT, TOP, BOTTOM = 4.0, 18.0, 14.0
WINDOW_S = 3600.0

Point = tuple[float, float | None]


def figure(value: float) -> str:
    """A value as the chart prints it (three significant figures at most)."""
    if value >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.2g}" if value < 1 else f"{value:.3g}"


def chart(title: str, lines: dict[str, Sequence[Point]], now: float, unit: str = "",
          width: float = WIDTH, height: float = HEIGHT) -> Markup:
    """A chart of the last hour: one polyline per named series (a None value breaks its
    line), the y axis from 0 to the largest value, the last value and the peak said in words
    for a screen reader, and a legend when there are several series."""
    start = now - WINDOW_S
    shown = {name: [(t, v) for t, v in points if t >= start] for name, points in lines.items()}
    values = [v for points in shown.values() for _, v in points if v is not None]
    peak = max(values, default=0.0)
    top = peak if peak > 0 else 1.0
    plot_h = height - TOP - BOTTOM
    plot_w = width - 2 * LEFT
    suffix = f" {unit}" if unit else ""
    lasts = {name: _last(points) for name, points in shown.items()}
    said = [f"{name}: now {figure(last)}{suffix}" for name, last in lasts.items()
            if last is not None]
    about = f"{title}, last hour. Peak {figure(peak)}{suffix}. " + ("; ".join(said) or
                                                                     "No data yet.")
    parts = [f'<svg class="chart" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
             f'height="{height:.0f}" role="img" aria-label="{escape(about)}">',
             f"<title>{escape(about)}</title>",
             f'<text x="{LEFT}" y="12" class="chart-title">{escape(title)}</text>',
             f'<text x="{width - LEFT}" y="12" text-anchor="end" class="chart-peak">'
             f"peak {escape(figure(peak))}{escape(suffix)}</text>",
             f'<line x1="{LEFT}" y1="{TOP + plot_h:.1f}" x2="{width - LEFT}" '
             f'y2="{TOP + plot_h:.1f}" class="chart-axis"/>',
             f'<text x="{LEFT}" y="{height - 2:.0f}" class="chart-tick">-60 min</text>',
             f'<text x="{width - LEFT}" y="{height - 2:.0f}" text-anchor="end" '
             f'class="chart-tick">now</text>']
    for index, points in enumerate(shown.values()):
        colour = LINE_COLOURS[index % len(LINE_COLOURS)]
        for run in _runs(points):
            coords = " ".join(
                f"{LEFT + plot_w * (t - start) / WINDOW_S:.1f},"
                f"{TOP + plot_h - plot_h * v / top:.1f}" for t, v in run)
            if len(run) == 1:
                x, y = coords.split(",")
                parts.append(f'<circle cx="{x}" cy="{y}" r="1.5" fill="{colour}"/>')
            else:
                parts.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" '
                             f'stroke-width="1.5"/>')
    parts.append("</svg>")
    return Markup("".join(parts))


def legend(names: Sequence[str]) -> list[tuple[str, str]]:
    """(colour, name) of each series of a chart, in the chart's order."""
    return [(LINE_COLOURS[i % len(LINE_COLOURS)], name) for i, name in enumerate(names)]


def _last(points: Sequence[Point]) -> float | None:
    """The last value of a series that is not None."""
    return next((v for _, v in reversed(points) if v is not None), None)


def _runs(points: Sequence[Point]) -> list[list[tuple[float, float]]]:
    """The stretches of a series without a None."""
    runs: list[list[tuple[float, float]]] = [[]]
    for t, v in points:
        if v is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((t, v))
    return [run for run in runs if run]


def duration(seconds: Any) -> str:
    """Seconds as a person reads them: "45 s", "12 min", "2 h 5 min" ("?" when unknown)."""
    if seconds is None:
        return "?"
    seconds = max(0, int(seconds))
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
