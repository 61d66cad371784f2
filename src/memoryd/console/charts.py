"""Line charts drawn as inline SVG on the server: no script, no library, no request.

A chart is a few polylines in a fixed viewBox, a y-axis maximum, the first
and last time, and a legend. Every number and label is escaped before it goes
into the markup. Presentation is by SVG attributes and console.css classes
(never a ``style`` attribute: the CSP allows no inline style).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import Any

from markupsafe import Markup

WIDTH, HEIGHT = 600, 170
LEFT, RIGHT, TOP, BOTTOM = 52, 8, 10, 38
#: Line colours, chosen to stay apart for the common colour blindnesses (Okabe-Ito).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")


@dataclass(frozen=True)
class Chart:
    """One chart's data: a title, a unit, and named series of (epoch seconds, value)."""

    key: str
    title: str
    unit: str
    series: Mapping[str, Sequence[tuple[float, float]]]

    @property
    def point_count(self) -> int:
        return max((len(s) for s in self.series.values()), default=0)


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _nice_max(value: float) -> float:
    """The axis top: 1, 2 or 5 times a power of ten at or above ``value``."""
    if value <= 0:
        return 1.0
    power = 10 ** len(str(int(value))) / 10 if value >= 1 else 1.0
    while power > value:
        power /= 10
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return float(step * power)
    return value


def _label(value: float, unit: str) -> str:
    if unit == "MiB":
        return f"{value:,.0f} MiB"
    if value >= 100 or value == int(value):
        return f"{value:,.0f}{unit}"
    return f"{value:.2g}{unit}"


def charts_from_points(points: Sequence[Mapping[str, Any]]) -> list[Chart]:
    """The overview's charts from metrics.series points: queues, throughput, errors, CPU, RSS, rates."""
    times = [_epoch(p["t"]) for p in points]

    def per_pass(field: str, only_active: bool = True) -> dict[str, list[tuple[float, float]]]:
        names = sorted({n for p in points for n in p.get(field, {})})
        out = {}
        for name in names:
            values = [(t, float(p.get(field, {}).get(name, 0))) for t, p in zip(times, points, strict=True)]
            if not only_active or any(v for _, v in values):
                out[name] = values
        return out

    def single(field: str, scale: float = 1.0) -> list[tuple[float, float]]:
        return [(t, float(p.get(field, 0)) * scale) for t, p in zip(times, points, strict=True)]

    return [
        Chart("queues", "Jobs waiting per pass", "", per_pass("queues")),
        Chart("throughput", "Jobs processed per second", "/s", per_pass("processed_per_s")),
        Chart("errors", "Job errors per second", "/s", per_pass("errors_per_s")),
        Chart("cpu", "Daemon CPU", "%", {"cpu": single("cpu_percent")}),
        Chart("rss", "Daemon resident memory", "MiB", {"rss": single("rss_bytes", 1 / 2**20)}),
        Chart("rates", "Writes and searches per second", "/s",
              {"writes": single("writes_per_s"), "searches": single("searches_per_s")}),
    ]


def render(chart: Chart) -> Markup:
    """The chart as an ``<svg>`` element (a note instead when there is nothing to draw)."""
    drawn = {name: pts for name, pts in chart.series.items() if pts}
    head = (f'<svg class="chart" id="chart-{escape(chart.key)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
            f'role="img" aria-label="{escape(chart.title)}" data-points="{chart.point_count}" '
            f'xmlns="http://www.w3.org/2000/svg">')
    if not drawn:
        return Markup(head + f'<text x="{LEFT}" y="{HEIGHT // 2}" class="chart-empty">'
                      'no points yet (or all zero)</text></svg>')
    all_points = [pt for pts in drawn.values() for pt in pts]
    t0 = min(t for t, _ in all_points)
    t1 = max(t for t, _ in all_points)
    top = _nice_max(max(v for _, v in all_points))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    span = max(t1 - t0, 1e-9)

    def xy(t: float, v: float) -> str:
        x = LEFT + (t - t0) / span * plot_w if t1 > t0 else LEFT + plot_w
        y = TOP + plot_h - min(v, top) / top * plot_h
        return f"{x:.1f},{y:.1f}"

    parts = [head,
             f'<line class="axis" x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - RIGHT}" '
             f'y2="{TOP + plot_h}" />',
             f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" />',
             f'<line class="grid" x1="{LEFT}" y1="{TOP}" x2="{WIDTH - RIGHT}" y2="{TOP}" />',
             f'<text class="tick" x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end">'
             f'{escape(_label(top, chart.unit))}</text>',
             f'<text class="tick" x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end">0</text>',
             f'<text class="tick" x="{LEFT}" y="{TOP + plot_h + 14}">{_clock(t0)}</text>',
             f'<text class="tick" x="{WIDTH - RIGHT}" y="{TOP + plot_h + 14}" text-anchor="end">'
             f'{_clock(t1)} UTC</text>']
    legend_x = LEFT
    for i, (name, pts) in enumerate(drawn.items()):
        colour = PALETTE[i % len(PALETTE)]
        coords = " ".join(xy(t, v) for t, v in pts)
        parts.append(f'<polyline class="series" data-series="{escape(name)}" data-points="{len(pts)}" '
                     f'fill="none" stroke="{colour}" stroke-width="1.6" points="{coords}" />')
        if len(pts) == 1:  # one point is no line: mark it
            x, y = xy(*pts[0]).split(",")
            parts.append(f'<circle cx="{x}" cy="{y}" r="2.5" fill="{colour}" />')
        last = pts[-1][1]
        parts.append(f'<rect x="{legend_x}" y="{HEIGHT - 14}" width="10" height="10" fill="{colour}" />'
                     f'<text class="legend" x="{legend_x + 14}" y="{HEIGHT - 5}">'
                     f'{escape(name)} {escape(_label(last, chart.unit))}</text>')
        legend_x += 22 + 7 * (len(name) + len(_label(last, chart.unit)))
    parts.append("</svg>")
    return Markup("".join(parts))


def _clock(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M") if epoch else ""
