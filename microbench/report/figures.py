"""The one door to matplotlib: pyplot on the Agg backend (files only, never a display), loaded when a plot is
drawn. A plotting library that cannot load (a bad MPLBACKEND, a broken install or font cache) is a PlotError:
the command says it in one line and the rows it measured stay (core.errors.run_command, core.outdir)."""

from __future__ import annotations

from microbench.core.errors import PlotError


def pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001 - whatever stops matplotlib from loading, the plot cannot be drawn
        first = (str(e).splitlines() or [""])[0][:200]
        raise PlotError(f"cannot draw the plot: matplotlib failed to load ({type(e).__name__}: {first})") from None
    return plt
