"""roofline --from-trace (docs/replay.md): a trace's GEMM / convolution cases, their shapes read back from the
trace independently (plain gzip + json over the events' Input Dims), measured on this CPU with the CPU providers."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from microbench.core.config import load_config
from microbench.core.errors import InputError
from microbench.predict.replay import summary
from microbench.roofline import cli as roofline
from microbench.roofline.trace_cases import compare, same_device_reason, trace_cases

from .conftest import REPO, TRACES, child_pytest_env, needs_traces

pytestmark = needs_traces
BERT = {"h100": "h100_bert_small.json.gz", "mi300": "mi300_bert_small.json.gz"}


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _recorded_gemms(path: Path) -> Counter:
    """(batch, m, n, k, trans_a, trans_b) -> calls, of every aten::addmm / mm / bmm the trace recorded with shapes;
    an operand is transposed where its recorded strides say column-major."""
    out = Counter()
    for e in _events(path):
        a = e.get("args", {})
        if e.get("cat") != "cpu_op" or e["name"] not in ("aten::addmm", "aten::mm", "aten::bmm"):
            continue
        if not a.get("Input Dims"):
            continue
        dims, strides = a["Input Dims"], a.get("Input Strides")
        ia, ib = (1, 2) if e["name"] == "aten::addmm" else (0, 1)
        A, B = dims[ia], dims[ib]
        batch = A[0] if len(A) == 3 else 1
        col_major = [bool(strides) and strides[i][-2] == 1 and strides[i][-1] != 1 for i in (ia, ib)]
        out[(batch, A[-2], B[-1], A[-1], *col_major)] += 1
    return out


def _recorded_attention(path: Path) -> Counter:
    """(batch x heads, query length, key length, head dim, causal) -> calls of aten::scaled_dot_product_attention
    (q, k, v [B, H, L, D]; is_causal its 6th argument)."""
    out = Counter()
    for e in _events(path):
        a = e.get("args", {})
        if e.get("cat") == "cpu_op" and e["name"] == "aten::scaled_dot_product_attention" and a.get("Input Dims"):
            (b, h, lq, d), lk = a["Input Dims"][0], a["Input Dims"][1][2]
            out[(b * h, lq, lk, d, a["Concrete Inputs"][5] == "True")] += 1
    return out


def _ours(tc, op: str = "gemm") -> Counter:
    out = Counter()
    for g in tc.groups + tc.below:
        for c in g.cases:
            s = c.shape
            if c.op != op:
                continue
            key = (
                (s.batch, s.m, s.n, s.k, s.trans_a, s.trans_b)
                if op == "gemm"
                else (s.batch_heads, s.q_len, s.kv_len, s.head_dim, s.causal)
            )
            out[key] += g.calls
    return out


@pytest.fixture(scope="module")
def full_cfg():
    return load_config()


@pytest.fixture
def replay_config(tiny_config) -> Path:
    """The tests' tiny profile and timing, with bench.toml's datasheet entries (to tell the trace's chip)."""
    text = (REPO / "bench.toml").read_text()
    devices = text[text.index("[devices.") : text.index("[cpu_estimate]")]
    tiny_config.write_text(tiny_config.read_text() + "\n" + devices)
    return tiny_config


@pytest.mark.parametrize("chip", sorted(BERT))
def test_bert_cases_are_the_traces_gemms(chip, full_cfg):
    path = TRACES / BERT[chip]
    tc = trace_cases(path, full_cfg, top=1000)
    assert _ours(tc) == _recorded_gemms(path)  # every linear's addmm, its calls, B transposed as recorded
    assert _ours(tc, "attention") == _recorded_attention(path) != Counter()  # the outer SDPA, once per call
    assert {c.dtype for c in tc.cases} == {"bf16"} and tc.datasheet_key in ("h100_sxm5", "mi300x_vf")
    times = [g.kernel_time_us for g in tc.groups]
    assert times == sorted(times, reverse=True) and all(t > 0 for t in times)
    assert tc.left_out == [] and sum(times) == pytest.approx(tc.matrix_time_us)
    att = next(g for g in tc.groups if g.cases[0].op == "attention")
    assert "measured contiguous" in tc.source(att)["layout"][0]  # recorded [B, H, L, D] over a [B, L, H, D] buffer


@pytest.mark.parametrize("rank", [0, 1])
def test_torchrec_cases_come_from_recorded_gemms(rank, full_cfg):
    path = TRACES / f"a100_torchrec_rank{rank}.json.gz"
    tc = trace_cases(path, full_cfg, top=1000)
    recorded, ours = _recorded_gemms(path), _ours(tc)
    assert len(ours) > 50 and set(ours) <= set(recorded)
    assert all(ours[k] <= recorded[k] for k in ours)  # no call counted twice
    assert {c.dtype for c in tc.cases} <= {"fp32", "tf32"}
    assert tc.device is None  # no deviceProperties: nothing to compare with
    assert all(tc.source(g)["note"].startswith("no Input Strides") for g in tc.groups)
    assert all(lo["why"] and lo["time_us"] >= 0 for lo in tc.left_out)


def test_selection_top_and_share(full_cfg):
    path = TRACES / "a100_torchrec_rank0.json.gz"
    every = trace_cases(path, full_cfg, top=1000).groups
    default = trace_cases(path, full_cfg)
    covered = sum(g.kernel_time_us for g in default.groups)
    assert covered >= 0.9 * default.matrix_time_us
    assert covered - default.groups[-1].kernel_time_us < 0.9 * default.matrix_time_us  # the fewest that do
    assert [g.label() for g in trace_cases(path, full_cfg, top=3).groups] == [g.label() for g in every[:3]]
    big = trace_cases(path, full_cfg, top=1000, min_share_pct=3.0)
    assert big.groups and all(g.kernel_time_us >= 0.03 * big.matrix_time_us for g in big.groups)
    assert len(big.groups) + len(big.below) == len(every)


def test_grouped_conv_and_its_backward_from_a_recorded_run(tmp_path, full_cfg):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(2, 8, 9, 9, requires_grad=True)
    w = torch.randn(16, 4, 3, 3, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.nn.functional.conv2d(x, w, stride=2, padding=1, groups=2).sum().backward()
    path = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(path))
    conv = next(e for e in _events(path) if e.get("cat") == "cpu_op" and e["name"] == "aten::convolution")
    (n, c, h, w_), (k, _, r, s) = conv["args"]["Input Dims"][:2]
    concrete = conv["args"]["Concrete Inputs"]
    tc = trace_cases(path, full_cfg, top=10)
    by_op = {case.op: case.shape for g in tc.groups for case in g.cases}
    assert set(by_op) == {"conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weight"}
    for shape in by_op.values():
        assert (shape.n, shape.c, shape.h, shape.w, shape.k, shape.r, shape.s) == (n, c, h, w_, k, r, s)
        assert [list(shape.stride), list(shape.pad), list(shape.dilation), shape.groups] == [
            json.loads(concrete[3]),
            json.loads(concrete[4]),
            json.loads(concrete[5]),
            int(concrete[8]),
        ]
    bwd = next(g for g in tc.groups if len(g.cases) == 2)
    assert bwd.operators == {"aten::convolution_backward": 1}
    # the recorded NCHW layout is not the one measured (the conv2d spec's NHWC): said on every row
    assert all("channels_last" in tc.source(g)["layout"][0] for g in tc.groups)


def test_no_shapes_is_one_line_exit_2(tmp_path, capsys):
    code = roofline.main(["--from-trace", str(TRACES / "a100_alexnet_forward.json.gz"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "record_shapes=True" in err[0] and "Input Dims" in err[0]
    assert roofline.main(["--top", "2", "--out", str(tmp_path / "o")]) == 2
    with pytest.raises(InputError):
        trace_cases(TRACES / "a100_alexnet_forward.json.gz", load_config())


def test_bert_replayed_on_this_cpu(replay_config, tmp_path, capsys):
    out = tmp_path / "out"
    trace = TRACES / BERT["h100"]
    assert (
        roofline.main(
            [
                "--from-trace",
                str(trace),
                "--top",
                "1",
                "--config",
                str(replay_config),
                "--out",
                str(out),
                "--device",
                "cpu",
                "--no-plot",
            ]
        )
        == 0
    )
    doc = json.loads((out / "results.json").read_text())
    rows = doc["results"]
    assert {(r["op"], r["shape"], r["dtype"]) for r in rows} == {("gemm", "141x512x512 B^T", "bf16")}
    for r in rows:
        src = r["trace_source"]
        assert src["trace"] == str(trace) and src["operators"] == {"aten::linear": 17} and src["calls"] == 17
        assert src["device"] == "NVIDIA H100 80GB HBM3" and src["trace_us_per_call"] > 0
        assert "h100_sxm5" in src["not_compared"] and "ratio_vs_trace" not in src  # another chip: for reference
    torch_row = next(r for r in rows if r["provider"] == "torch")
    assert torch_row["status"] == "ok" and torch_row["rel_err"] <= torch_row["tolerance"]
    assert torch_row["trace_source"]["ours_us_per_call"] == pytest.approx(torch_row["time_ms"]["median"] * 1e3)
    rp = doc["replay"]
    timed = [r for r in rows if r["status"] == "ok" and r.get("time_ms")]
    assert rp["groups"][0]["best"] == [min(timed, key=lambda r: r["time_ms"]["median"])["provider"]]
    assert rp["groups"][0]["ours_us"] == pytest.approx(rp["groups"][0]["ours_us_per_call"] * 17)
    assert rp["matrix_here_us"] is None and rp["rest_how"].startswith("not placed")  # no datasheet for this CPU
    printed = capsys.readouterr().out
    assert "side by side with the trace" in printed and "below the selection: 4 case group(s)" in printed
    html = (out / "report.html").read_text()
    assert "side by side with the trace" in html and "the best provider here" in html


def test_mi300_attention_replayed_on_this_cpu(replay_config, tmp_path):
    """The MI300X trace's biggest matrix operator is its attention: measured through both SDPA providers."""
    out = tmp_path / "out"
    assert (
        roofline.main(
            [
                "--from-trace",
                str(TRACES / BERT["mi300"]),
                "--top",
                "1",
                "--config",
                str(replay_config),
                "--out",
                str(out),
                "--device",
                "cpu",
                "--no-plot",
            ]
        )
        == 0
    )
    rows = json.loads((out / "results.json").read_text())["results"]
    assert {(r["op"], r["shape"], r["dtype"]) for r in rows} == {("attention", "bh8 q141 kv141 d64", "bf16")}
    assert {r["provider"] for r in rows} == {"torch", "torch_math"}
    assert all(r["status"] == "ok" and r["rel_err"] <= r["tolerance"] for r in rows)
    assert all(r["trace_source"]["operators"] == {"aten::scaled_dot_product_attention": 4} for r in rows)
    assert all(r["flops"] == 2 * 8 * 141 * 141 * (64 + 64) for r in rows)


def _rows_for(tc, ms: float) -> list[dict]:
    """Rows as a run writes them, one correct timed provider per case at `ms` per call."""
    return [
        {
            "op": c.op,
            "shape": c.shape.label(),
            "dtype": c.dtype,
            "provider": "torch",
            "status": "ok",
            "time_ms": {"median": ms},
        }
        for c in tc.cases
    ]


def test_same_chip_is_compared_and_the_rest_held(full_cfg):
    tc = trace_cases(TRACES / BERT["h100"], full_cfg, top=2)
    same, why = same_device_reason(tc, "NVIDIA H100 80GB HBM3", full_cfg)
    assert same and "h100_sxm5" in why
    g = tc.groups[0]
    src = compare(tc.source(g), 0.004, same, why)
    assert src["ratio_vs_trace"] == pytest.approx(4.0 / g.us_per_call)
    rp = summary(tc, _rows_for(tc, 0.004), "NVIDIA H100 80GB HBM3", full_cfg, [], same, why)
    here = sum(4.0 * g.calls for g in tc.groups)
    assert rp["replayed_here_us"] == pytest.approx(here)
    assert rp["rest_here_us"] == rp["rest_trace_us"] == pytest.approx(tc.matrix_time_us - rp["replayed_trace_us"])
    assert rp["matrix_here_us"] == pytest.approx(here + rp["rest_trace_us"])
    assert [r["ratio_vs_trace"] for r in rp["groups"]] == pytest.approx([4.0 / g.us_per_call for g in tc.groups])


def test_another_chip_moves_the_rest_by_the_prediction(full_cfg):
    tc = trace_cases(TRACES / BERT["h100"], full_cfg, top=1)
    same, why = same_device_reason(tc, "AMD Instinct MI300X VF", full_cfg)
    assert not same and "mi300x_vf" in why
    rp = summary(tc, _rows_for(tc, 0.01), "AMD Instinct MI300X VF", full_cfg, [], same, why)
    assert rp["rest_how"] == "predicted h100_sxm5 -> mi300x_vf (predict.estimate)"
    assert rp["rest_here_us"] > 0 and rp["rest_here_us"] != pytest.approx(rp["rest_trace_us"])
    assert all(r["ratio_vs_trace"] is None for r in rp["groups"])  # another chip: for reference only
    assert rp["matrix_here_us"] == pytest.approx(rp["replayed_here_us"] + rp["rest_here_us"])


@pytest.mark.slow
def test_benchmarks_run_a_traces_cases(tmp_path, replay_config):
    """DAWNSCOPE_TRACE: pytest-benchmark times the trace's cases, each with its trace_source (the tests' short timing,
    a ceilings cache of their own)."""
    env = child_pytest_env(
        DAWNSCOPE_TRACE=str(TRACES / BERT["mi300"]),
        DAWNSCOPE_TRACE_TOP="1",
        DAWNSCOPE_DEVICE="cpu",
        DAWNSCOPE_CONFIG=str(replay_config),
        DAWNSCOPE_CACHE_DIR=str(tmp_path / "cache"),
    )
    out = tmp_path / "bench.json"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--benchmark-only",
            f"--benchmark-json={out}",
            str(REPO / "tests" / "test_benchmarks.py"),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert p.returncode == 0, p.stdout[-2000:]
    doc = json.loads(out.read_text())
    assert doc["machine_info"]["dawnscope"]["profile"] == "trace:mi300_bert_small.json.gz"
    timed = doc["benchmarks"]
    assert {b["extra_info"]["provider"] for b in timed} == {"torch", "torch_math"}  # its top group: attention
    assert all(b["extra_info"]["shape"] == "bh8 q141 kv141 d64" for b in timed)
    assert all(b["extra_info"]["trace_source"]["operators"] == {"aten::scaled_dot_product_attention": 4} for b in timed)


def test_attention_providers_match_the_float64_reference(cfg):
    """The attention family (the trace's attention calls' cases): both SDPA providers against the written-out
    float64 attention, causal and not; the mask changes the result and halves the FLOPs."""
    from microbench.core.cases import make_inputs, reference, rel_err
    from microbench.core.ops import case_work
    from microbench.core.shapes import AttentionShape, Case
    from microbench.roofline import registry
    from microbench.roofline.registry import bind

    outs = {}
    for causal in (False, True):
        case = Case("attention", AttentionShape(3, 17, 17, 16, causal), "fp32")
        a, b = make_inputs(case)
        ref = outs[causal] = reference(case, a, b)
        for p in registry.for_op("attention"):
            assert rel_err(bind(p, case, a, b)(), ref) <= cfg.tolerance["fp32"], p.name
    assert rel_err(outs[True], outs[False]) > 0.1
    full, causal = (case_work(Case("attention", AttentionShape(3, 17, 17, 16, c), "fp32")).flops for c in (0, 1))
    assert full == 2 * 3 * 17 * 17 * 32 and causal == full // 2
