"""``jobq history ... --plot``: a history query's rows as a line chart (matplotlib, from the ``bench``
extra; without it the command says so in one line)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jqcore.errors import ConfigError
from jqruntime.stores.history import Rows

__all__ = ["chart"]


def chart(rows: Rows, path: Path, title: str, *, x: str, y: str, group: str | None = None) -> None:
    """A line chart of ``y`` over ``x`` (one line per ``group`` value), saved as PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError(
            "--plot needs matplotlib: pip install 'jobq[bench]'", code="plot_unavailable"
        ) from None
    ix, iy = rows.columns.index(x), rows.columns.index(y)
    ig = rows.columns.index(group) if group else None
    lines: dict[str, tuple[list[Any], list[Any]]] = {}
    for row in rows.rows:
        xs, ys = lines.setdefault(str(row[ig]) if ig is not None else y, ([], []))
        xs.append(row[ix])
        ys.append(row[iy])
    fig, ax = plt.subplots(figsize=(10, 5))
    for name, (xs, ys) in lines.items():
        ax.plot(xs, ys, marker="o", label=name)
    ax.set_title(title)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    if len(lines) > 1 or group:
        ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
