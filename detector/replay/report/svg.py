"""Chart primitives for the HTML replay report: hand-written SVG and a tiny PNG encoder.

Everything here returns strings (SVG fragments, ``data:`` URIs) so the report stays one
self-contained file with no network resources and no plotting dependency.

- ``pool_max`` downsamples a (ticks x k) series onto time bins by max-pooling, so a one-tick
  spike survives any zoom level (a mean would hide exactly what an operator looks for).
- ``time_ticks`` picks round UTC ticks (minutes to weeks) for an axis.
- ``heat_rgb`` maps scores in [0, 1] to a white-yellow-red scale (NaN: grey, "no data");
  ``png_data_uri`` encodes an RGB array as an inline PNG, which keeps a 63 x 1000 heat map at a
  few kB where SVG rectangles would take megabytes.
- ``Axes`` maps data to pixels and draws grids; ``path_d`` draws a line with gaps at NaN.
"""

from __future__ import annotations

import base64
import struct
import time
import zlib
from dataclasses import dataclass
from html import escape

import numpy as np

from ...model import FloatArray

# White -> yellow -> orange -> red -> dark red (after ColorBrewer YlOrRd): a quiet node is
# white, so the eye goes straight to the hot spots.
HEAT_STOPS = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
HEAT_COLORS = np.array(
    [[255, 255, 255], [255, 237, 160], [254, 178, 76], [240, 59, 32], [128, 0, 38]],
    dtype=np.float64,
)
NO_DATA_RGB = (200, 204, 212)
_TICK_STEPS = (60, 300, 600, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)


def pool_max(
    times: FloatArray, values: FloatArray, lo: float, hi: float, bins: int
) -> tuple[FloatArray, FloatArray, np.ndarray]:
    """(bin centres, per-bin max of ``values`` rows, bins holding any tick) over ``bins`` equal
    bins of [lo, hi].

    ``values`` is (ticks x k) aligned with sorted ``times``; NaN is ignored and a bin with no
    finite value is NaN. Ticks outside [lo, hi] are dropped. The third array tells a bin
    without ticks (more bins than ticks: interpolate over it) from a tick without data (a gap).
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    bins = max(int(bins), 1)
    edges = np.linspace(lo, hi, bins + 1)
    centers = (edges[:-1] + edges[1:]) / 2
    out = np.full((bins, values.shape[1]), np.nan)
    filled = np.zeros(bins, dtype=bool)
    inside = (times >= lo) & (times <= hi)
    t, v = times[inside], values[inside]
    if t.size == 0:
        return centers, out, filled
    which = np.minimum(np.searchsorted(edges, t, side="right") - 1, bins - 1)
    # Rows are time-sorted, so each bin is a contiguous run: reduce the runs in one call.
    firsts = np.flatnonzero(np.r_[True, which[1:] != which[:-1]])
    with np.errstate(invalid="ignore"):
        out[which[firsts]] = np.fmax.reduceat(v, firsts, axis=0)
    filled[which] = True
    return centers, out, filled


def time_ticks(lo: float, hi: float, max_ticks: int = 10) -> list[tuple[float, str]]:
    """Round UTC tick positions within [lo, hi] with labels ("01-02" at midnight, else HH:MM)."""
    span = max(hi - lo, 1.0)
    step = next((s for s in _TICK_STEPS if span / s <= max_ticks), _TICK_STEPS[-1])
    first = np.ceil(lo / step) * step
    ticks: list[tuple[float, str]] = []
    for t in np.arange(first, hi + 1e-9, step).tolist():
        tm = time.gmtime(t)
        label = time.strftime("%m-%d" if tm.tm_hour == tm.tm_min == 0 else "%H:%M", tm)
        ticks.append((t, label))
    return ticks


def utc(t: float, fmt: str = "%Y-%m-%d %H:%M") -> str:
    return time.strftime(fmt, time.gmtime(t))


def heat_rgb(scores: FloatArray) -> np.ndarray:
    """RGB uint8 array (shape + (3,)) for scores in [0, 1]; NaN maps to NO_DATA_RGB."""
    s = np.clip(np.nan_to_num(scores, nan=0.0), 0.0, 1.0)
    rgb = np.stack([np.interp(s, HEAT_STOPS, HEAT_COLORS[:, c]) for c in range(3)], axis=-1)
    rgb[np.isnan(scores)] = NO_DATA_RGB
    return np.round(rgb).astype(np.uint8)


def encode_png(rgb: np.ndarray) -> bytes:
    """A truecolor PNG of an (height x width x 3) uint8 array."""
    height, width, _ = rgb.shape
    raw = np.concatenate(
        [np.zeros((height, 1), dtype=np.uint8), rgb.reshape(height, width * 3)], axis=1
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw.tobytes(), 9))
        + chunk(b"IEND", b"")
    )


def png_data_uri(rgb: np.ndarray) -> str:
    return "data:image/png;base64," + base64.b64encode(encode_png(rgb)).decode("ascii")


def path_d(xs: FloatArray, ys: FloatArray) -> str:
    """SVG path data through the points, starting a new segment after every NaN gap."""
    parts: list[str] = []
    pen_down = False
    for x, y in zip(xs.tolist(), ys.tolist(), strict=True):
        if y != y:  # NaN: lift the pen
            pen_down = False
            continue
        parts.append(f"{'L' if pen_down else 'M'}{x:.1f} {y:.1f}")
        pen_down = True
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class Axes:
    """A plot area at (left, top) of size (width, height) showing [t_lo, t_hi] x [v_lo, v_hi]."""

    left: float
    top: float
    width: float
    height: float
    t_lo: float
    t_hi: float
    v_lo: float = 0.0
    v_hi: float = 1.0

    def x(self, t: FloatArray | float) -> FloatArray:
        span = max(self.t_hi - self.t_lo, 1e-9)
        return self.left + (np.asarray(t, dtype=np.float64) - self.t_lo) / span * self.width

    def y(self, v: FloatArray | float) -> FloatArray:
        span = max(self.v_hi - self.v_lo, 1e-9)
        frac = (np.asarray(v, dtype=np.float64) - self.v_lo) / span
        return self.top + (1.0 - frac) * self.height

    def xf(self, t: float) -> float:
        return float(np.clip(self.x(t), self.left, self.left + self.width))

    def frame(self, y_ticks: tuple[float, ...] = (0.0, 0.5, 1.0), max_t: int = 10) -> str:
        """Border, horizontal grid with value labels, and the UTC time axis."""
        out = [
            f'<rect x="{self.left}" y="{self.top}" width="{self.width}" height="{self.height}" '
            'class="plot"/>'
        ]
        for v in y_ticks:
            y = float(self.y(v))
            right = self.left + self.width
            out.append(
                f'<line x1="{self.left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
            )
            out.append(
                f'<text x="{self.left - 4}" y="{y + 3:.1f}" class="ylab">{round(v, 2):g}</text>'
            )
        bottom = self.top + self.height
        for t, label in time_ticks(self.t_lo, self.t_hi, max_t):
            x = float(self.x(t))
            out.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{self.top}" y2="{bottom}" class="grid"/>'
            )
            out.append(f'<text x="{x:.1f}" y="{bottom + 12}" class="xlab">{label}</text>')
        return "".join(out)


def svg(width: float, height: float, body: str, *, cls: str, label: str) -> str:
    """An inline <svg> element (no xmlns needed inside HTML5) with an accessible label."""
    return (
        f'<svg class="{cls}" width="{width:g}" height="{height:g}" '
        f'viewBox="0 0 {width:g} {height:g}" role="img" aria-label="{escape(label)}">'
        f"{body}</svg>"
    )
