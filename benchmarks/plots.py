"""The benchmark page's plots, as SVG written by hand (no plotting library, nothing fetched).

    python benchmarks/plots.py        # benchmarks/results/figures.json -> docs/images/bench-*.svg
"""

from __future__ import annotations

import json
import math
import sys
from html import escape
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "benchmarks" / "results" / "figures.json"
IMAGES = ROOT / "docs" / "images"
COLOURS = ["#3f6fb5", "#2a9d8f", "#e9a03b", "#8d6cab", "#c45a5a"]
WIDTH, LABEL_W, BAR_H, GAP = 760, 250, 18, 14


def _length(value: float, top: float, log: bool, span: float) -> float:
    """A bar's length in pixels on a linear or a log scale."""
    if log:
        return span * math.log10(max(value, 1.0)) / math.log10(top)
    return span * value / top


def _number(value: float, unit: str) -> str:
    """A value as the benchmark printed it, with its unit."""
    text = f"{value:,.4g}" if value < 100 else f"{value:,.0f}"
    return f"{text} {unit}" if unit not in ("recall@5",) else text


def chart(figure: dict) -> str:
    """One grouped horizontal bar chart."""
    values = [value for group in figure["groups"] for _name, value in group["bars"]]
    log = bool(figure.get("log"))
    top = figure.get("max") or max(values) * (3 if log else 1.15)
    span = WIDTH - LABEL_W - 90
    series = list(dict.fromkeys(name for g in figure["groups"] for name, _v in g["bars"]))
    colour = {name: COLOURS[i % len(COLOURS)] for i, name in enumerate(series)}
    rows, y = [], 40
    for group in figure["groups"]:
        rows.append(f'<text x="10" y="{y + 12}" class="group">{escape(group["label"])}</text>')
        y += 20
        for name, value in group["bars"]:
            length = max(1.0, _length(value, top, log, span))
            rows.append(
                f'<text x="{LABEL_W - 8}" y="{y + 13}" text-anchor="end">{escape(name)}</text>'
                f'<rect x="{LABEL_W}" y="{y}" width="{length:.1f}" height="{BAR_H}" '
                f'fill="{colour[name]}"/>'
                f'<text x="{LABEL_W + length + 6:.1f}" y="{y + 13}">'
                f'{escape(_number(value, figure["unit"]))}</text>')
            y += BAR_H + 4
        y += GAP
    scale = " (log scale)" if log else ""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{y + 10}" '
            f'viewBox="0 0 {WIDTH} {y + 10}" role="img" aria-label="{escape(figure["title"])}">'
            '<style>text{font:13px sans-serif;fill:#333}.title{font-weight:bold;font-size:15px}'
            '.group{font-weight:bold}</style>'
            f'<rect width="100%" height="100%" fill="#fff"/>'
            f'<text x="10" y="22" class="title">{escape(figure["title"] + scale)}</text>'
            + "".join(rows) + "</svg>\n")


def main() -> int:
    """Write one SVG per figure."""
    figures = json.loads(FIGURES.read_text())
    IMAGES.mkdir(parents=True, exist_ok=True)
    for name, figure in figures.items():
        if name.startswith("_"):
            continue
        path = IMAGES / f"bench-{name}.svg"
        path.write_text(chart(figure))
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
