"""What every picture shares: a new figure on the headless Agg canvas, the output format chosen by the file's
suffix, a save that respects the file named (`files.write_output`), PNG bytes for embedding, and a labelled heatmap.

Figures are `matplotlib.figure.Figure` objects with an Agg canvas attached, never pyplot: no display is
needed, no global figure state is kept, and a caller's own pyplot backend is left alone. The pixel size of a
saved figure is exactly its size in inches times `DPI` (no tight bounding box), so callers and tests can
predict it; the layout engine ("constrained") makes room for labels inside that size.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tformer.errors import UserError

if TYPE_CHECKING:  # matplotlib is imported lazily, when a figure is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage

DPI = 100
FORMATS = {".png": "png", ".svg": "svg"}


def new_figure(width: float, height: float) -> Figure:
    """A (width x height inch) figure on an Agg canvas, with the constrained layout engine."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def output_format(path: str | os.PathLike) -> str:
    """"png" or "svg" from the suffix of `path`; "png" for standard output ("-"), a FIFO, a device or a pipe
    that has no suffix (`files.is_stream`); a UserError naming the path for anything else."""
    from tformer.files import is_stream

    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS and is_stream(path):
        return "png"
    if suffix not in FORMATS:
        raise UserError(f"output file {path} has suffix {suffix or '(none)'!r}; use .png or .svg")
    return FORMATS[suffix]


def write_file(path: str | os.PathLike, data: bytes) -> Path:
    """`tformer.files.write_output` (- to stdout; a regular file atomically; a symbolic link's target, a FIFO
    or a pipe in place), with an OSError (a read-only directory, a full disk) turned into a one-line UserError
    naming the path."""
    from tformer.files import write_output

    try:
        return write_output(path, data)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None


def save_figure(fig: Figure, path: str | os.PathLike, *, dpi: int = DPI) -> Path:
    """Write `fig` to `path`, PNG or SVG by its suffix (`write_file`); returns the path."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=output_format(path), dpi=dpi)
    return write_file(path, buffer.getvalue())


def png_bytes(fig: Figure, *, dpi: int = DPI) -> bytes:
    """The figure as PNG bytes (for a data: URI)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def label_size(n: int, inches: float) -> float:
    """A tick-label font size (points) that fits n labels along `inches` of axis, between 4 and 9."""
    return max(4.0, min(9.0, 0.8 * 72 * inches / max(n, 1)))


def heatmap(ax: Axes, matrix: Sequence[Sequence[float]], *, rows: Sequence[str] | None = None,
            cols: Sequence[str] | None = None, inches: float = 3.0, vmin: float | None = None,
            vmax: float | None = None, cmap: str = "viridis") -> AxesImage:
    """Draw `matrix` (R, C) on `ax` (row 0 at the top); `rows` / `cols` None keep numeric ticks, a list gives
    one tick label per row / column (an empty list: none), sized to fit an axis about `inches` long.
    Returns the image, for a colorbar."""
    image = ax.imshow(matrix, aspect="auto", interpolation="nearest", cmap=cmap, vmin=vmin, vmax=vmax)
    for labels, set_ticks, set_labels, rotation in ((rows, ax.set_yticks, ax.set_yticklabels, 0),
                                                    (cols, ax.set_xticks, ax.set_xticklabels, 90)):
        if labels is not None:
            set_ticks(range(len(labels)))
            set_labels(labels, fontsize=label_size(len(labels), inches), rotation=rotation)
            ax.tick_params(length=0, pad=1)
    return image
