"""One self-contained HTML page for `dawnscope verify --html OUT` (the document: schema dawnscope.verify/1): per
check, the finding's predicted range (and the model's own where calibration widened it) against the measured
saving and its processes' spread, drawn as one row each (inline SVG, matplotlib), then the table, the fixes not
applied and the machine's conditions. Every string from the document is escaped."""

from __future__ import annotations

from microbench.report.figures import pyplot
from microbench.report.html import conditions_html, esc, fingerprint_text, page, table
from microbench.report.trace_html import svg_of
from microbench.report.verify_report import COLUMNS, check_cells, verdict, widened_lines

COLOURS = {"held": "#2e7d32", "missed": "#c62828", "cannot tell": "#888888"}


def checks_figure(checks: list[dict]):
    """Each check a row: its range as a bar with the expected value marked, the model's own range as a thin line
    where it was widened, the measured median as a dot coloured by the verdict, its processes' low - high as a
    whisker; in ms."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11, 0.8 + 0.5 * max(len(checks), 2)))
    for y, c in enumerate(checks):
        p, m = c["predicted"], c["measured_us"]
        ax.barh(y, (p["high"] - p["low"]) / 1e3, left=p["low"] / 1e3, height=0.45, color="#cfd8e6")
        ax.plot([p["expected"] / 1e3] * 2, [y - 0.25, y + 0.25], color="#4e79a7", lw=2)
        if c.get("predicted_model"):
            q = c["predicted_model"]
            ax.plot([q["low"] / 1e3, q["high"] / 1e3], [y + 0.32] * 2, color="#4e79a7", lw=1)
        colour = COLOURS[verdict(c)]
        ax.plot([m["low"] / 1e3, m["high"] / 1e3], [y, y], color=colour, lw=1)
        ax.plot(m["median"] / 1e3, y, "o", color=colour)
    ax.axvline(0.0, color="#444444", lw=0.6)
    ax.set_yticks(range(len(checks)), [c["finding"] for c in checks])
    ax.invert_yaxis()
    ax.set_xlabel("saving per step, ms (bar: predicted range, tick: expected; dot: measured median, line: processes)")
    fig.tight_layout()
    return fig


def verify_page(doc: dict) -> str:
    m = doc["method"]
    head = (
        f"<p><b>{esc(doc['model'])}</b>, batch {esc(doc['batch'])}, {esc(doc['dtype'])}, on {esc(doc['device'])}: "
        f"step {doc['step_time_us'] or 0:,.0f} us ({esc(doc.get('step_time_what') or 'the findings step')}); each fix "
        f"timed in {esc(m['processes'])} process(es) of {esc(m['blocks'])} alternating blocks of "
        f"{esc(m['steps_per_block'])} steps, the A/A pair the same way.</p>"
        f'<p class="fp">{esc(fingerprint_text(doc["fingerprint"], doc["software"]))}</p>'
    )
    body = [head]
    checks = doc["checks"]
    if checks:
        fig = checks_figure(checks)
        body.append(svg_of(fig))
        pyplot().close(fig)
        rows = [(check_cells(c), None if c["held"] or not c["decidable"] else "red") for c in checks]
        body.append(table(COLUMNS, rows))
        body += [f'<p class="note">{esc(line)}</p>' for line in widened_lines(doc)]
    else:
        body.append("<p>No finding had a fix verify could apply here.</p>")
    body.append(f"<p>{doc['held']} of {doc['decidable']} decidable checks held ({len(checks)} checked).</p>")
    if doc["not_applied"]:
        items = "".join(f"<li><b>{esc(n['finding'])}</b>: {esc(n['why'])}</li>" for n in doc["not_applied"])
        body.append(f"<h2>Not applied</h2><ul>{items}</ul>")
    body.append("<h2>Conditions</h2>" + conditions_html(doc.get("conditions") or {}))
    return page(f"dawnscope verify: {doc['model']}", "\n".join(body))
