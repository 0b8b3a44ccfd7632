"""Self-contained HTML reports: one file with its tables and the roofline (a base64 PNG inside the page), no
scripts, fonts, stylesheets or images from anywhere else, so it opens the same offline, attached to a mail
or years later. Every string from a results file is escaped."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from microbench.core.fingerprint import fingerprint_line

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em; color: #111; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #bbb; padding: 0.2em 0.5em; vertical-align: top; }
th { background: #e8eef6; text-align: left; }
td.r { text-align: right; font-variant-numeric: tabular-nums; }
tr.red td { color: #b00; } tr.dim td { color: #888; } td.missing { color: #b00; font-style: italic; }
.fp { font-family: ui-monospace, monospace; font-size: 0.85em; }
.note { color: #7a5a00; } .flag { color: #b00; font-weight: bold; }
img.plot { max-width: 100%; border: 1px solid #ddd; }
tr.yellow td { color: #8a6d00; } dl.glossary dt { margin-top: 0.3em; } dl.glossary dd { margin-left: 1.5em; }
"""


def esc(v) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n<title>{esc(title)}</title>\n'
        f"<style>{_CSS}</style></head>\n<body>\n<h1>{esc(title)}</h1>\n{body}\n</body></html>\n"
    )


def table(
    columns: list[tuple[str, str]],
    rows: list[tuple[list[str], str | None]],
    cell_classes: list[list[str]] | None = None,
) -> str:
    """columns: (name, 'left'|'right'); rows: (cells, row style or None). Cells are text (escaped here)."""
    head = "".join(f"<th>{esc(c)}</th>" for c, _ in columns)
    body = []
    for i, (cells, style) in enumerate(rows):
        tds = []
        for j, (cell, (_, just)) in enumerate(zip(cells, columns)):
            cls = ["r"] if just == "right" else []
            if cell_classes:
                cls += [c for c in cell_classes[i][j].split() if c]
            attr = f' class="{" ".join(cls)}"' if cls else ""
            tds.append(f"<td{attr}>{esc(cell)}</td>")
        tr_attr = f' class="{esc(style)}"' if style else ""
        body.append(f"<tr{tr_attr}>{''.join(tds)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>\n" + "\n".join(body) + "\n</tbody></table>"


def figure_img(fig, alt: str) -> str:
    """A matplotlib figure as an <img> with a base64 PNG data URI (no file beside the page)."""
    buf = io.BytesIO()
    # No Software tag: the page should carry no address of any kind, even encoded.
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img class="plot" alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def fingerprint_text(hw: dict, sw: dict) -> str:
    """device.fingerprint_line, or what there is of it for another version's or a hand-made file."""
    try:
        return fingerprint_line(hw, sw)
    except (KeyError, TypeError, ValueError):
        bits = [str(hw.get(k)) for k in ("name", "arch", "kind") if hw.get(k)]
        bits += [f"{k} {sw[k]}" for k in ("torch", "triton", "python") if sw.get(k)]
        return ", ".join(bits) or "no fingerprint"


def notes_html(notes: list[str], cls: str = "note") -> str:
    return "".join(f'<p class="{cls}">{esc(n)}</p>' for n in notes)


def results_html(doc: dict, plot: bool = True) -> str:
    """The roofline report of one results.json document: fingerprint, results, ceilings, notes, plot."""
    from microbench.report.roofline_report import busy_line, results_cells, roofline_figure

    hw, sw = doc.get("hardware", {}), doc.get("software", {})
    cfgb = doc.get("config", {})
    warn = busy_line(doc)
    parts = ([f'<p class="flag">warning: {esc(warn)}</p>'] if warn else []) + [
        f'<p class="fp">{esc(fingerprint_text(hw, sw))}</p>',
        f"<p>profile {esc(cfgb.get('profile', '?'))}, {len(doc.get('results', []))} rows; started "
        f"{esc(doc.get('started', '?'))}, finished {esc(doc.get('finished', '?'))}"
        f"{' (interrupted)' if doc.get('interrupted') else ''}</p>",
    ]
    if plot:
        import matplotlib.pyplot as plt

        fig = roofline_figure(doc)
        try:
            parts.append("<h2>roofline</h2>" + figure_img(fig, "roofline: TFLOP/s against arithmetic intensity"))
        finally:
            plt.close(fig)
    columns, rows = results_cells(doc)
    parts.append("<h2>results</h2>" + table(columns, rows) + glossary_html([c for c, _ in columns]))
    ceil_cols = [
        ("name", "left"),
        ("kind", "left"),
        ("dtype", "left"),
        ("value", "right"),
        ("unit", "left"),
        ("source", "left"),
        ("note", "left"),
        ("noise", "left"),
    ]
    ceil_rows = [
        (
            [
                c["name"],
                c["kind"],
                c.get("dtype") or "-",
                f"{c['value']:.4g}",
                c["unit"],
                c["source"],
                c.get("note", ""),
                "; ".join(c.get("noise") or []) or "-",
            ],
            "red" if c.get("noise") else None,
        )
        for c in doc.get("ceilings", [])
    ]
    parts.append("<h2>ceilings</h2>" + table(ceil_cols, ceil_rows))
    if doc.get("replay"):
        parts.append(replay_html(doc))
    if doc.get("conditions"):
        parts.append("<h2>conditions</h2>" + conditions_html(doc["conditions"]))
    if doc.get("notes"):
        parts.append("<h2>notes</h2>" + notes_html(doc["notes"]))
    return page(f"dawnscope roofline: {hw.get('name', '?')}", "\n".join(parts))


def replay_html(doc: dict) -> str:
    """roofline --from-trace: the rows beside the trace's time, the best provider per case, the summary."""
    from microbench.report.roofline_report import replay_cells, replay_lines, replay_summary_cells

    return (
        "<h2>side by side with the trace</h2>"
        + table(*replay_cells(doc))
        + "<h2>per case: the best provider here</h2>"
        + table(*replay_summary_cells(doc["replay"]))
        + notes_html(replay_lines(doc["replay"]), "fp")
    )


def glossary_html(columns: list[str]) -> str:
    """What each column means (report.GLOSSARY), for the columns shown."""
    from microbench.report.roofline_report import GLOSSARY

    items = "".join(f"<dt><b>{esc(c)}</b></dt><dd>{esc(GLOSSARY[c])}</dd>" for c in columns if c in GLOSSARY)
    return f'<details open><summary>columns</summary><dl class="glossary">{items}</dl></details>'


def conditions_html(cond: dict) -> str:
    """The machine's load before and during the run, the threads, and the verdict."""

    def load(w):
        w = w or {}
        la = w.get("loadavg")
        other = w.get("other_cores")
        return (
            f"load average {', '.join(f'{v:.2f}' for v in la) if la else '?'}; other processes "
            f"{'?' if other is None else f'{other:.2f}'} cores; steal {w.get('steal_share', '?')}"
            + (f"; GPU {esc(w['gpu'])}" if w.get("gpu") else "")
        )

    th = cond.get("threads") or {}
    verdict = "busy: " + "; ".join(cond.get("reasons", [])) if cond.get("busy") else "quiet"
    return (
        f"<p>before the run: {esc(load(cond.get('before')))}<br>during the run: {esc(load(cond.get('during')))}"
        f"<br>threads: {esc(th.get('torch_threads', '?'))} of {esc(th.get('cores', '?'))} cores "
        f"({esc(th.get('why', '?'))})<br>verdict: {esc(verdict)}</p>"
    )


def write(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
