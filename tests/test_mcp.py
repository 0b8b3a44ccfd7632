"""`dawnscope mcp`: the agent server driven by the mcp SDK's own client, in-process (and once over stdio, as an MCP
client launches it), on the shipped traces. Each answer is the document `--json` writes, with `cannot_answer`."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys

import pytest

from microbench.mcp.server import build_server

from .conftest import REPO, TRACES, analyze_with_findings

mcp = pytest.importorskip("mcp", reason="the mcp SDK (the `test` extra installs it)")
Client = mcp.Client

TOOLS = {"trace_summary", "trace_findings", "trace_table", "compare", "gate", "read_results", "kernel_verdict"}
BERT = "tests/data/traces/h100_bert_small.json.gz"


def ask(calls: list[tuple[str, dict]], allowed=(REPO,)) -> list:
    """The server's answers to the calls, through the SDK's client connected in-process."""

    async def session():
        async with Client(build_server(list(allowed))) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return asyncio.run(session())


def test_tools_are_listed_read_only():
    async def session():
        async with Client(build_server([REPO])) as client:
            return (await client.list_tools()).tools

    tools = asyncio.run(session())
    assert {t.name for t in tools} == TOOLS
    assert all(t.annotations.read_only_hint and not t.annotations.destructive_hint for t in tools)


def test_a_trace_s_summary_and_findings_are_the_cli_s_document():
    summary, findings = ask([("trace_summary", {"path": BERT}), ("trace_findings", {"path": BERT})])
    cli = analyze_with_findings(REPO / BERT)
    doc = summary.structured_content["document"]
    assert doc["summary"] == json.loads(json.dumps(cli["summary"])) and doc["schema"] == "dawnscope.trace/1"
    assert findings.structured_content["document"]["findings"] == json.loads(json.dumps(cli["findings"]))
    cannot = summary.structured_content["cannot_answer"]
    assert [c["figure"] for c in cannot] == [f"finding {f['id']}" for f in cli["findings_not_checked"]]


def test_a_withheld_figure_is_in_cannot_answer_and_absent_from_the_document():
    """The TensorBoard plugin's ResNet-50 trace: its operators' FLOPs cover 67.7 % of matrix-kernel time, so MFU is
    withheld; the answer says so and carries no MFU number."""
    (answer,) = ask([("trace_summary", {"path": "tests/data/traces/v100_resnet50_tbplugin_2021schema.json.gz"})])
    doc, cannot = answer.structured_content["document"], answer.structured_content["cannot_answer"]
    assert doc["mfu"]["mfu"] is None and doc["mfu"]["achieved_tflops"] is None
    (mfu,) = [c for c in cannot if c["figure"] == "mfu"]
    assert mfu["why"] == "withheld: the recorded operators' FLOPs cover 67.7% of matrix-kernel time, under 80%"


def test_tables_come_a_page_at_a_time():
    first, last = ask(
        [
            ("trace_table", {"path": BERT, "table": "kernels", "limit": 10}),
            ("trace_table", {"path": BERT, "table": "kernels", "offset": 10, "limit": 200}),
        ]
    )
    a, b = first.structured_content, last.structured_content
    total = len(analyze_with_findings(REPO / BERT)["kernels"])
    assert len(a["rows"]) == 10 and a["total"] == total and a["next_offset"] == 10
    assert len(b["rows"]) == total - 10 and b["next_offset"] is None


def test_compare_gate_and_kernel_names():
    cmp, gated, pooling, unknown = ask(
        [
            ("compare", {"paths": [BERT, "tests/data/traces/mi300_bert_small.json.gz"]}),
            ("gate", {"baseline": BERT, "current": "tests/data/traces/mi300_bert_small.json.gz"}),
            ("kernel_verdict", {"name": "sm50_xmma_pooling_fw_4d_FP16FP32NHWC_Average_FastDiv_CAlign4"}),
            ("kernel_verdict", {"name": "my_own_kernel"}),
        ]
    )
    assert cmp.structured_content["document"]["schema"] == "dawnscope.trace_compare/1"
    g = gated.structured_content
    assert g["document"]["verdict"] == "incomparable" and g["document"]["exit_code"] == 2
    assert g["cannot_answer"][0]["figure"] == "the verdict" and g["cannot_answer"][0]["why"].startswith("device:")
    p = pooling.structured_content["document"]
    assert p["tensor_cores"] == "no" and p["grammar"]["op"] == "pooling" and p["grammar"]["arch"] == 50
    assert unknown.structured_content["cannot_answer"][0]["figure"] == "Tensor Core use"


def test_results_files_are_paged_with_what_the_judge_flagged():
    (answer,) = ask([("read_results", {"path": "docs/cpu-roofline", "limit": 5})])
    doc = answer.structured_content["document"]
    stored = json.loads((REPO / "docs" / "cpu-roofline" / "results.json").read_text())
    assert doc["schema"] == stored["schema"] and doc["results"] == stored["results"][:5]
    assert doc["total"] == len(stored["results"])
    flagged = [
        r
        for r in stored["results"]
        if r.get("status") != "ok" or any(f.startswith("noisy") for f in r.get("flags", []))
    ]
    assert len(answer.structured_content["cannot_answer"]) >= len(flagged)


def test_it_reads_only_inside_the_allowed_folders(tmp_path):
    outside, missing, bad_table = ask(
        [
            ("trace_summary", {"path": str(TRACES / "h100_bert_small.json.gz")}),
            ("trace_summary", {"path": "nothing.json"}),
            ("trace_table", {"path": "h100_bert_small.json.gz", "table": "secrets"}),
        ],
        allowed=(tmp_path,),
    )
    assert outside.is_error and "outside the folders this server may read" in outside.content[0].text
    assert missing.is_error and "no such file" in missing.content[0].text
    assert bad_table.is_error
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.slow
def test_over_stdio_as_a_client_launches_it(tmp_path):
    """`dawnscope mcp --allow DIR` started by the SDK's stdio client, as an agent's configuration starts it."""
    from mcp.client.stdio import StdioServerParameters

    shutil.copy(TRACES / "h100_bert_small.json.gz", tmp_path)
    params = StdioServerParameters(command=sys.executable, args=["-m", "microbench.mcp", "--allow", str(tmp_path)])

    async def session():
        async with Client(params) as client:
            tools = await client.list_tools()
            answer = await client.call_tool("trace_summary", {"path": "h100_bert_small.json.gz"})
            return tools, answer

    tools, answer = asyncio.run(session())
    assert {t.name for t in tools.tools} == TOOLS
    assert answer.structured_content["document"]["summary"]["kernel_count"] == 60
