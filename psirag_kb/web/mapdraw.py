"""The topic map drawn as SVG on the server: a node's children as areas sized by passages, their
children inside them, each area a link one layer down, every document text escaped."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlencode

from markupsafe import Markup, escape

from psirag_kb.web.render import file_name, title
from psirag_kb.web.treemap import Box, squarify

WIDTH, HEIGHT = 720.0, 460.0
HEADER = 18.0
"""The strip at the top of an area with areas inside it, where its label goes."""
PAD = 3.0
CHAR = 6.6
"""About how wide one character of a 12 px label is."""
FOLDER_COLOURS = ("#cfe3f6", "#f8dcc0", "#d3edcf", "#f3cfe0", "#e2d8f3", "#f6efbd",
                  "#cdeeea", "#eed3cd", "#dcdcdc", "#e9f2c8")
AGES = ((3600.0, "the last hour", "#b3261e"), (86400.0, "the last day", "#e0683a"),
        (7 * 86400.0, "the last week", "#f2a65a"), (30 * 86400.0, "the last month", "#f7d08a"),
        (365 * 86400.0, "the last year", "#dfe7c9"), (float("inf"), "longer ago", "#cdd9e5"))
UNKNOWN = ("not known", "#e6e6e6")
COLOURINGS = ("folder", "changed")


def folder_of(path: str, folders: Sequence[str]) -> str:
    """The top-level folder a file lies in: the first folder below the watched folder holding
    it (the watched folder for a file directly in it; "" for a corpus record)."""
    for folder in sorted(folders, key=len, reverse=True):
        base = folder.rstrip("/") + "/"
        if path.startswith(base):
            rest = path[len(base):].split("/", 1)
            return base + rest[0] if len(rest) > 1 else folder
    return path.rsplit("/", 1)[0] if "/" in path else ""


def age_of(changed: float, now: float) -> tuple[str, str]:
    """(how long ago, colour) of a modification time (UNKNOWN for none)."""
    if changed <= 0:
        return UNKNOWN
    for seconds, name, colour in AGES:
        if now - changed < seconds:
            return name, colour
    return AGES[-1][1], AGES[-1][2]


class Drawing:
    """One map's SVG: the areas of a node's children and grandchildren, coloured by folder or
    by age, with the areas on a passage's path marked."""

    def __init__(self, top: dict[str, Any], colouring: str = "folder",
                 folders: Sequence[str] = (), on_path: Iterable[int] = (),
                 now: float | None = None, keep: dict[str, str] | None = None,
                 passage: int | None = None) -> None:
        self.top = top
        self.colouring = colouring if colouring in COLOURINGS else "folder"
        self.folders = list(folders)
        self.on_path = set(on_path)
        self.passage = passage
        """The passage shown on the map (its own area is marked where passages are drawn)."""
        self.now = time.time() if now is None else now
        self.keep = keep or {}
        """Query parameters every link keeps (the colouring, the passage shown)."""
        keys = sorted({folder_of(a.get("path") or "", self.folders) for a in self.areas()})
        self.palette = {k: FOLDER_COLOURS[i % len(FOLDER_COLOURS)] for i, k in enumerate(keys)}

    def areas(self) -> list[dict[str, Any]]:
        """Every area drawn: the children, then each one's children."""
        kids = self.top.get("children") or []
        return [*kids, *(g for c in kids for g in c.get("children") or [])]

    def colour(self, area: dict[str, Any]) -> str:
        """An area's fill."""
        if self.colouring == "changed":
            return age_of(float(area.get("changed") or 0.0), self.now)[1]
        return self.palette.get(folder_of(area.get("path") or "", self.folders), "#e6e6e6")

    def legend(self) -> list[tuple[str, str]]:
        """(colour, what it means) for the colours used."""
        if self.colouring == "changed":
            used = {age_of(float(a.get("changed") or 0.0), self.now) for a in self.areas()}
            return [(colour, name) for _, name, colour in AGES if (name, colour) in used] + (
                [(UNKNOWN[1], UNKNOWN[0])] if UNKNOWN in used else [])
        return [(colour, "/".join(folder.rstrip("/").split("/")[-2:]) or "(no folder)")
                for folder, colour in self.palette.items()]

    def href(self, area: dict[str, Any]) -> str:
        """Where a click on an area goes: one layer down, or a passage's own view."""
        if area.get("kind") == "leaf":
            return f"/source/{int(area['id'])}"
        return self.link(int(area["id"]))

    def link(self, node_id: int | None, **changed: str) -> str:
        """The map of a node (the top for None), keeping the colouring and the passage shown
        unless `changed` says otherwise."""
        keep = {k: v for k, v in (self.keep | changed).items() if v}
        query = urlencode(({"node": node_id} if node_id else {}) | keep)
        return "/map" + ("?" + query if query else "")

    def svg(self, width: float = WIDTH, height: float = HEIGHT) -> Markup:
        """The whole map as an inline <svg> element."""
        kids = self.top.get("children") or []
        parts = [f'<svg class="topic-map" viewBox="0 0 {width:.0f} {height:.0f}" '
                 f'width="{width:.0f}" height="{height:.0f}" role="group" '
                 f'aria-label="{escape(title(self.top))}: topic map">']
        boxes = squarify([float(c.get("leaves") or 0) for c in kids], Box(0, 0, width, height))
        for child, box in zip(kids, boxes, strict=True):
            grand = child.get("children") or []
            inner = box.inset(PAD, HEADER, PAD, PAD)
            nested = bool(grand) and inner.w >= 8 and inner.h >= 8
            parts.append(self.area(child, box, 12.0, header=nested))
            if nested:
                inner_boxes = squarify([float(g.get("leaves") or 0) for g in grand], inner)
                parts.extend(self.area(g, b, 11.0) for g, b in zip(grand, inner_boxes,
                                                                     strict=True))
        parts.append("</svg>")
        return Markup("".join(parts))

    def area(self, area: dict[str, Any], box: Box, font: float, header: bool = False) -> str:
        """One area: a link around its rectangle and label, with its title and description."""
        if box.w < 1 or box.h < 1:
            return ""
        name = label_of(area)
        count = int(area.get("leaves") or 0)
        marked = int(area["id"]) == self.passage if area.get("kind") == "leaf" else \
            int(area["id"]) in self.on_path
        about = f"{short(name, 160)} — {count} passage{'s' if count != 1 else ''}"
        text = fitted(name, box.w - 2 * PAD, font)
        parts = [f'<a href="{escape(self.href(area))}" class="area{" on-path" if marked else ""}"'
                 f' data-node="{escape(area_id(area))}" aria-label="{escape(about)}">',
                 f"<title>{escape(about)}</title>",
                 f"<desc>{escape(short(area.get('abstract') or ''))}</desc>",
                 f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.w:.1f}" '
                 f'height="{box.h:.1f}" fill="{self.colour(area)}"/>']
        if text and box.h >= font + 4:
            parts.append(f'<text x="{box.x + PAD:.1f}" y="{box.y + font + 1:.1f}" '
                         f'font-size="{font:.0f}">{escape(text)}</text>')
            if not header and box.h >= 2 * font + 8:
                more = fitted(f"{count} passages", box.w - 2 * PAD, font - 1)
                parts.append(f'<text x="{box.x + PAD:.1f}" y="{box.y + 2 * font + 3:.1f}" '
                             f'font-size="{font - 1:.0f}" class="count">{escape(more)}</text>')
        parts.append("</a>")
        return "".join(parts)


def label_of(area: dict[str, Any]) -> str:
    """What an area is called: a topic's label, or a passage's file name."""
    if area.get("kind") == "leaf":
        return file_name(area.get("source") or "") or f"passage {area.get('id')}"
    return " ".join(title(area).split())


def area_id(area: dict[str, Any]) -> str:
    """An area's id on the page ("p123" for a passage, the node's number for a topic)."""
    return f"p{int(area['id'])}" if area.get("kind") == "leaf" else str(int(area["id"]))


def fitted(text: str, width: float, font: float) -> str:
    """`text` cut to what fits in `width` at this font size ("…" where cut; "" when not even
    three characters fit)."""
    room = int(width / (CHAR * font / 12.0))
    if room < 3:
        return ""
    return text if len(text) <= room else text[: room - 1].rstrip() + "…"


def short(text: str, most: int = 300) -> str:
    """An abstract on one line, at most `most` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= most else flat[: most - 1].rstrip() + "…"
