"""Small PNGs for ``benchmarks/results``: plots saved with a palette of at most 32 colours.

Line plots use a handful of colours, so a palette loses nothing visible and makes the
file two to four times smaller than matplotlib's RGBA output (``benchmarks/results``
keeps every plot under 1 MB in all).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

__all__ = ["save_png", "shrink_png"]


def shrink_png(data: bytes, path: Path) -> None:
    """Write the PNG *data* to *path* with a palette of at most 32 colours."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        image.convert("RGB").quantize(colors=32).save(path, optimize=True)


def save_png(fig: Any, path: Path, dpi: int = 100) -> None:
    """Save a matplotlib figure as a small PNG."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    shrink_png(buf.getvalue(), Path(path))
