"""busbw against message size, one line per collective (the nccl-tests picture)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from microbench.report.figures import pyplot


def busbw_figure(rows: list[dict], title: str):
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.2))
    by_op: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        if r.get("busbw_gbps") is not None:
            by_op.setdefault(r["op"], []).append((r["bytes"], r["busbw_gbps"]))
    for op, pts in sorted(by_op.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=op)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message bytes (nccl-tests convention)")
    ax.set_ylabel("busbw GB/s")
    ax.set_title("\n".join(textwrap.wrap(title, 100)), fontsize=8)  # the fingerprint is long
    ax.grid(True, which="both", alpha=0.3)
    if by_op:
        ax.legend()
    fig.tight_layout()
    return fig


def plot_busbw(rows: list[dict], title: str, out: Path) -> Path:
    fig = busbw_figure(rows, title)
    fig.savefig(out, dpi=120)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return out
