"""The MCP server: one tool per question an agent asks of a trace or a benchmark (answers.Answers), described for
the agent, each answer a JSON object `{document, cannot_answer}` (tables paged: rows, total, offset,
next_offset). Read-only: no tool writes a file. The SDK (`pip install 'dawnscope[mcp]'`) is imported only here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from microbench.core.errors import InputError, error_line

from .answers import MAX_PAGE, TRACE_TABLES, Answers

INSTRUCTIONS = (
    "dawnscope reads GPU profiler traces (PyTorch/Kineto JSON, Nsight Systems SQLite, Nsight Compute CSV, rocprofv3) "
    "and benchmark results. Every answer is {document, cannot_answer}: `document` is what `dawnscope ... --json` "
    "writes; `cannot_answer` lists the figures the tool withheld or cannot tell, and why. Never state a figure that "
    "is in cannot_answer or absent from the document: say that the trace cannot tell it. Start with trace_summary, "
    "then trace_findings (ranked by the time each fix would save), then trace_table for details."
)


def build_server(allowed: list[str | Path] | None = None):
    """The server, reading only inside `allowed` (default: the current folder)."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
        from mcp.types import ToolAnnotations
    except ImportError:
        raise InputError(None, "the MCP server needs the mcp SDK: pip install 'dawnscope[mcp]'", key="mcp") from None

    answers = Answers(allowed)
    server = MCPServer("dawnscope", instructions=INSTRUCTIONS, log_level="WARNING")
    read_only = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)

    def answered(fn, *args, **kw) -> dict[str, Any]:
        try:
            return fn(*args, **kw)
        except InputError as e:  # bad input in one line, as the commands say it
            raise ToolError(error_line(e)) from None
        except OSError as e:
            raise ToolError(f"{getattr(e, 'filename', '') or ''}: {e.strerror or e}") from None

    @server.tool(annotations=read_only)
    def trace_summary(path: str) -> dict[str, Any]:
        """A profiler trace's summary as `dawnscope trace --json` has it: kernel time by class, Tensor Core share and
        its evidence, GPU busy / idle / exposed communication, devices and their datasheet peaks, MFU, integrity
        (what the trace lacks and which figures that makes unreliable), notes."""
        return answered(answers.trace_summary, path)

    @server.tool(annotations=read_only)
    def trace_findings(path: str) -> dict[str, Any]:
        """The findings of a trace, ranked by the time each fix would save per step (with its range, evidence and
        fix), the rules not checked and why, and how often each rule's range held when checked."""
        return answered(answers.trace_findings, path)

    @server.tool(
        annotations=read_only,
        description=f"One table of a trace's report, a page at a time (at most {MAX_PAGE} rows; next_offset is the "
        f"next page's offset, null on the last): {', '.join(TRACE_TABLES)}.",
    )
    def trace_table(path: str, table: str, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        return answered(answers.trace_table, path, table, offset, limit)

    @server.tool(annotations=read_only)
    def compare(paths: list[str], baseline: str | None = None) -> dict[str, Any]:
        """Several captures side by side as `dawnscope compare --json` has them: traces (or their reports) of one
        workload on several machines per kernel class and operator, or results / pytest-benchmark files per case."""
        return answered(answers.compare, paths, baseline)

    @server.tool(annotations=read_only)
    def gate(baseline: str, current: str, max_slowdown: float | None = None) -> dict[str, Any]:
        """The regression gate (`dawnscope gate --json`): verdict pass / regression / incomparable with exit_code 0 /
        1 / 2, each row's change against its noise floor, and why captures cannot be compared. max_slowdown: a
        fraction (0.05 is 5 %); default: the thresholds' 5 %. Keeps no baseline."""
        return answered(answers.gate, baseline, current, max_slowdown)

    @server.tool(annotations=read_only)
    def read_results(path: str, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        """A results file of `dawnscope roofline` (or its --out folder): the machine's fingerprint, conditions,
        ceilings and a page of its result rows (time, TFLOP/s, % of ceilings, Tensor Core verdict, the judge's
        flags)."""
        return answered(answers.read_results, path, offset, limit)

    @server.tool(annotations=read_only)
    def kernel_verdict(name: str) -> dict[str, Any]:
        """What a GPU kernel's name says: its class (Tensor Core GEMM, GEMM, communication, element-wise, ...), its
        Tensor Core verdict with the rule or naming grammar behind it, and what the grammar reads (op, architecture
        built for, instruction class, MMA shape, element types)."""
        return answered(answers.kernel_verdict, name)

    return server
