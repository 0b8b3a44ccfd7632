"""A whole job's report (the document of microbench/comm/job.py): the rank x step heat map as a
figure, and the self-contained HTML page with it and the tables. Returns figures and text; the command writes."""

from __future__ import annotations

import textwrap

import numpy as np

from microbench.report import html as H
from microbench.report.cells import or_dash


def _panel(fig, ax, values, matrix: dict, label: str) -> None:
    vals = np.array([[np.nan if v is None else v for v in row] for row in values], dtype=float)
    if vals.size == 0:
        vals = np.full((max(len(matrix["ranks"]), 1), max(len(matrix["steps"]), 1)), np.nan)
    im = ax.imshow(vals, aspect="auto", interpolation="nearest", cmap="viridis")
    fig.colorbar(im, ax=ax, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("rank")
    ax.set_xticks(range(vals.shape[1]))
    ax.set_xticklabels([str(s).replace("ProfilerStep", "") for s in matrix["steps"]], rotation=90, fontsize=7)
    ranks = matrix["ranks"]
    every = max(1, len(ranks) // 32)
    ax.set_yticks(range(0, len(ranks), every))
    ax.set_yticklabels([str(r) for r in ranks[::every]], fontsize=7)


def heatmap_figure(matrix: dict, title: str = ""):
    """Ranks down, steps across: step wall time (ms) and the step's computation time (ms), side by side; a
    missing step is blank."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_ranks, n_steps = len(matrix["ranks"]), len(matrix["steps"])
    fig, axes = plt.subplots(1, 2, figsize=(min(5 + 1.2 * n_steps, 16), min(3 + 0.03 * n_ranks, 12)))
    _panel(fig, axes[0], matrix["values_ms"], matrix, "step wall time (ms)")
    _panel(fig, axes[1], matrix.get("computation_ms") or matrix["values_ms"], matrix, "computation (ms)")
    fig.suptitle("\n".join(textwrap.wrap(title or "per rank and step", 110)), fontsize=8)
    fig.tight_layout()
    return fig


def _f(v, spec=".4g") -> str:
    return or_dash(v, spec)


def _tables(doc: dict) -> str:
    out = ["<h2>Per rank (GPU time over the whole trace; steps: the heat map)</h2>"]
    cols = [
        ("rank", "right"),
        ("file", "left"),
        ("median step ms", "right"),
        ("busy ms", "right"),
        ("idle ms", "right"),
        ("exposed comm ms", "right"),
        ("straggler (times)", "right"),
    ]
    rows = [
        (
            [
                str(r["rank"]),
                r["file"],
                _f(r["median_step_us"] and r["median_step_us"] / 1e3),
                _f(r["gpu_time"].get("busy_us", 0) / 1e3),
                _f(r["gpu_time"].get("idle_us", 0) / 1e3),
                _f(r["exposed_comm_ms"]),
                str(r["times"]),
            ],
            None,
        )
        for r in doc["ranks"]
    ]
    out.append(H.table(cols, rows))
    cols = [
        ("op", "left"),
        ("group", "right"),
        ("time ms", "right"),
        ("busbw GB/s", "right"),
        ("skew us", "right"),
        ("straggler", "right"),
    ]
    rows = [
        (
            [
                c["name"],
                "?" if c["group_size"] is None else str(c["group_size"]),
                _f(c["time_ms"]),
                _f(c["busbw_gbps"], ".3g"),
                _f(c["skew_us"], ".4g"),
                str(c["straggler_rank"]),
            ],
            None,
        )
        for c in doc["collectives"]
    ]
    out += ["<h2>Collectives matched across ranks</h2>", H.table(cols, rows)]
    return "\n".join(out)


def job_html(doc: dict, fig) -> str:
    """The page: findings first (straggler, outliers, slowest step, failed ranks), the heat map, the tables."""
    import matplotlib.pyplot as plt

    findings = [f"straggler: rank {doc['straggler_rank']} (most start wait caused across matched collectives)"]
    if doc.get("missing_ranks"):
        findings.insert(
            0,
            f"{doc['missing_ranks']} of {doc['world_size']} ranks have no trace here: the straggler, "
            "skews and outliers are among the ranks read only",
        )
    findings += [
        f"outlier: rank {o['rank']} {o['metric']} = {o['value']:.4g} (median {o['median']:.4g}; "
        f"{o['statistic']} = {o['z']:.1f} > {o['threshold']})"
        for o in doc["outliers"]
    ]
    if doc.get("slowest_step"):
        s = doc["slowest_step"]
        findings.append(
            f"slowest step: {s['step']}, {s['time_ms']:.4g} ms on rank {s['slowest_rank']} "
            f"(median rank {s['median_rank_ms']:.4g} ms)"
        )
    findings += [f"failed to read: {f['file']}: {f['reason']}" for f in doc.get("failed", [])]
    body = [H.notes_html(findings), "<h2>Step time per rank</h2>", H.figure_img(fig, "rank x step heat map")]
    plt.close(fig)
    body.append(_tables(doc))
    return H.page(f"A job of {len(doc['ranks'])} ranks", "\n".join(body))
