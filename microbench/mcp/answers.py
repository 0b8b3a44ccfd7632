"""What the agent server answers: the documents the commands' `--json` write (a trace's report, a comparison, the
gate's verdict, a results file), whole or a page of one of their tables, each with `cannot_answer`: what the
document withholds or cannot tell, and why, so that an agent never fills a gap with a number of its own.

The trace documents are opened as `dawnscope trace` opens them (findings.analysis.TraceAnalysis) and kept for the
session (MAX_OPEN, by path, size and modification time): an agent asks several questions of one trace. Paths are
read only inside the folders the user allowed (`dawnscope mcp --allow DIR`, the current folder by default); nothing
is written."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict
from pathlib import Path

from microbench.compare.files import comparison
from microbench.core.errors import InputError
from microbench.core.jsonio import load_json
from microbench.findings.analysis import trace_report
from microbench.gate.gate import Limits, gate
from microbench.report.compare import resolve_results
from microbench.trace.analysis import is_profiler_trace
from microbench.trace.classify import classify_kernel
from microbench.trace.kernel_grammar import parse

MAX_OPEN = 8  # trace documents kept in memory (a report is tens of kB to a few MB)
MAX_PAGE = 200  # rows per page of a table
TRACE_TABLES = ("kernels", "ops", "steps", "annotations", "findings", "devices")
RESULTS_SCHEMA_PREFIX = "dawnscope.results/"


class Answers:
    """The server's library: every tool is a method returning a JSON-able dict with `cannot_answer`."""

    def __init__(self, allowed: list[str | Path] | None = None):
        self.allowed = [Path(a).resolve() for a in (allowed or [Path.cwd()])]
        self._docs: OrderedDict[tuple, dict] = OrderedDict()

    # -- paths and documents ------------------------------------------------------------------------------------

    def path(self, given: str) -> Path:
        """`given` (relative to the first allowed folder) inside an allowed folder, or bad input naming both."""
        p = Path(given)
        p = (p if p.is_absolute() else self.allowed[0] / p).resolve()
        if not any(p == root or root in p.parents for root in self.allowed):
            roots = ", ".join(str(r) for r in self.allowed)
            raise InputError(given, f"outside the folders this server may read ({roots}; dawnscope mcp --allow DIR)")
        if not p.exists():
            raise InputError(given, "no such file or folder")
        return p

    def trace_document(self, given: str) -> dict:
        """The trace's report as `dawnscope trace --json` writes it (a report given as the file: read as it is)."""
        p = self.path(given)
        st = p.stat()
        key = (str(p), st.st_size, st.st_mtime_ns)
        if key in self._docs:
            self._docs.move_to_end(key)
            return self._docs[key]
        doc = trace_report(p)
        self._docs[key] = doc
        while len(self._docs) > MAX_OPEN:
            self._docs.popitem(last=False)
        return doc

    # -- the tools -----------------------------------------------------------------------------------------------

    def trace_summary(self, path: str) -> dict:
        doc = self.trace_document(path)
        keys = ("schema", "file", "format", "summary", "devices", "mfu", "integrity", "notes")
        return {"document": {k: doc.get(k) for k in keys if k in doc}, "cannot_answer": trace_cannot_answer(doc)}

    def trace_findings(self, path: str) -> dict:
        doc = self.trace_document(path)
        part = {k: v for k, v in doc.items() if k.startswith("findings")}
        return {"document": part, "cannot_answer": trace_cannot_answer(doc)}

    def trace_table(self, path: str, table: str, offset: int = 0, limit: int = 50) -> dict:
        if table not in TRACE_TABLES:
            raise InputError(None, f"expected one of {', '.join(TRACE_TABLES)}", key="table", value=table)
        doc = self.trace_document(path)
        return {**page(doc.get(table) or [], offset, limit), "table": table, "cannot_answer": trace_cannot_answer(doc)}

    def compare(self, paths: list[str], baseline: str | None = None) -> dict:
        files = [self.path(p) for p in paths]
        analyzed = {f: self.trace_document(str(f)) for f in files if is_profiler_trace(f)}
        kind, cmp = comparison(files, baseline, analyzed)
        cannot = [{"figure": "ratios", "why": f} for f in cmp.get("flags", [])]
        if kind == "traces":
            for f in files:
                cannot += [dict(c, trace=str(f)) for c in trace_cannot_answer(self.trace_document(str(f)))]
        return {"document": cmp, "cannot_answer": cannot}

    def gate(self, baseline: str, current: str, max_slowdown: float | None = None) -> dict:
        doc = gate(self.path(baseline), self.path(current), Limits(max_slowdown))
        cannot = [{"figure": "the verdict", "why": f"{i['what']}: {i['detail']}"} for i in doc["incomparable"]]
        cannot += [
            {"figure": f"{r['metric']} {r['name']}", "why": f"not judged: {r['why']}"}
            for r in doc["rows"]
            if r["verdict"] == "not judged"
        ]
        return {"document": doc, "cannot_answer": cannot}

    def read_results(self, path: str, offset: int = 0, limit: int = 50) -> dict:
        p = resolve_results(self.path(path))
        doc = load_json(p)
        if not (isinstance(doc, dict) and str(doc.get("schema", "")).startswith(RESULTS_SCHEMA_PREFIX)):
            raise InputError(p, "not a results file (dawnscope roofline --out DIR: its results.json)")
        head = {k: v for k, v in doc.items() if k != "results"}
        rows = doc.get("results") or []
        cannot = [
            {"figure": _row_name(r), "why": r.get("reason") or r.get("status")}
            for r in rows
            if isinstance(r, dict) and r.get("status") != "ok"
        ]
        cannot += [
            {"figure": _row_name(r), "why": f}
            for r in rows
            if isinstance(r, dict)
            for f in r.get("flags") or []
            if isinstance(f, str) and f.startswith(("noisy", "impossible", "busy"))
        ]
        return {"document": head | page(rows, offset, limit, "results"), "cannot_answer": cannot}

    def kernel_verdict(self, name: str) -> dict:
        """What the kernel name says: its class and Tensor Core verdict with the evidence, and, where a library's
        naming grammar reads it, the op, the architecture it was built for, the instruction class, shape and types."""
        cls = classify_kernel(name)
        parsed = parse(name)
        doc = {
            "kernel": name,
            "class": cls.cls,
            "tensor_cores": cls.tensor_cores,
            "rule": cls.rule,
            "evidence": cls.note,
            "basis": cls.basis,
            "grammar": None if parsed is None else asdict(parsed),
        }
        cannot = []
        if cls.tensor_cores == "unknown":
            cannot.append(
                {
                    "figure": "Tensor Core use",
                    "why": "no rule or grammar settles it from the name; hardware counters in a trace would",
                }
            )
        return {"document": doc, "cannot_answer": cannot}


def page(rows: list, offset: int, limit: int, key: str = "rows") -> dict:
    """A page of a table: `limit` rows (at most MAX_PAGE) from `offset`, the total and the next offset (None: the
    last page)."""
    if offset < 0 or limit < 1:
        raise InputError(None, "expected offset >= 0 and limit >= 1", key="offset/limit", value=f"{offset}/{limit}")
    limit = min(limit, MAX_PAGE)
    end = offset + limit
    return {
        key: rows[offset:end],
        "total": len(rows),
        "offset": offset,
        "next_offset": end if end < len(rows) else None,
    }


def trace_cannot_answer(doc: dict) -> list[dict]:
    """What a trace report withholds or cannot tell, and why: each figure its integrity lines make unreliable, the
    figures withheld for FLOP coverage, the findings not checked, the devices without datasheet peaks."""
    integ = doc.get("integrity") or {}
    out = [
        {"figure": u, "why": f"{m.get('what')}: {m.get('detail')}"}
        for m in integ.get("missing") or []
        for u in m.get("unreliable") or []
    ]
    cov = integ.get("flop_coverage") or {}
    for figure in integ.get("withheld") or []:
        share = cov.get("share")
        out.append(
            {
                "figure": figure,
                "why": f"withheld: the recorded operators' FLOPs cover {share:.1%} of matrix-kernel time, under "
                f"{cov.get('threshold', 0):.0%}"
                if isinstance(share, (int, float))
                else "withheld: FLOP coverage too low",
            }
        )
    for f in doc.get("findings_not_checked") or []:
        out.append({"figure": f"finding {f.get('id')}", "why": f"not checked: {f.get('why')}"})
    for d in doc.get("devices") or []:
        if d.get("kernels_ran_here", True) and not d.get("datasheet"):
            out.append({"figure": f"MFU and % of peak on device {d.get('id')}", "why": "no datasheet entry for it"})
    return out


def _row_name(r: dict) -> str:
    return " ".join(str(r.get(k)) for k in ("op", "shape", "dtype", "provider") if r.get(k))
