"""scripts/trace-from-tracelens: a TraceLens ops_unique_args.csv rebuilt as a trace our reader and the cross-chip
prediction take (the held-out pairs of docs/predict.md are built this way)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from .conftest import load_script

HEADER = [
    "name",
    "op category",
    "Input Dims",
    "Input type",
    "Concrete Inputs",
    "operation_count",
    "total_direct_kernel_time_sum",
    "kernel_details_summary",
]
GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16> >(int)"


def _rebuild(argv: list[str]) -> int:
    return load_script("trace-from-tracelens").main(argv)


def _kernels(name: str, count: int, mean: float) -> str:
    return (
        f"[{{'name': '{name}', 'stream': 7, 'count': {count}, 'total_duration_us': np.float64({count * mean}), "
        f"'mean_duration_us': np.float64({mean})}}]"
    )


def _csv(path: Path, add_total: float = 3 * 2.0) -> Path:
    rows = [
        [
            "aten::addmm",
            "GEMM",
            "((512,), (141, 512), (512, 2048), (), ())",
            "('c10::BFloat16', 'c10::BFloat16', 'c10::BFloat16', 'Scalar', 'Scalar')",
            "('', '', '', '1', '1')",
            "2",
            "16.0",
            _kernels(GEMM, 2, 8.0),
        ],
        [
            "aten::add",
            "elementwise",
            "((1, 141, 512), (1, 141, 512), ())",
            "('c10::BFloat16', 'c10::BFloat16', 'Scalar')",
            "('', '', '1')",
            "3",
            str(add_total),
            _kernels(ADD, 3, 2.0),
        ],
    ]
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([HEADER] + rows)
    return path


def test_a_report_becomes_a_trace_the_prediction_reads(tmp_path):
    from microbench.core.config import load_config
    from microbench.predict.from_trace import from_trace
    from microbench.trace.analysis import read_trace

    out = tmp_path / "t.json.gz"
    assert _rebuild([str(_csv(tmp_path / "ops.csv")), "--device", "h100", "--out", str(out)]) == 0
    tl = read_trace(out)
    assert len(tl.activities) == 5 and sorted(tl.activities.dur_us.tolist()) == [2.0, 2.0, 2.0, 8.0, 8.0]
    doc = from_trace(out, "mi300x_vf", load_config())
    assert doc["source"]["device"].startswith("NVIDIA H100") and doc["source"]["busy_us"] == pytest.approx(22.0)
    ops = {o["op"] for o in doc["ops"]}
    assert "aten::addmm M=141 N=2048 K=512 bf16" in ops  # the recorded shapes reach the work model
    assert doc["unplaced"] == []


def test_a_row_whose_totals_disagree_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        _rebuild(
            [str(_csv(tmp_path / "ops.csv", add_total=7.5)), "--device", "h100", "--out", str(tmp_path / "t.json")]
        )
    assert "ops.csv:3: aten::add" in str(e.value) and "7.500" in str(e.value)
    assert not (tmp_path / "t.json").exists()


def test_a_cell_that_is_no_literal_is_one_line(tmp_path):
    path = _csv(tmp_path / "ops.csv")
    path.write_text(path.read_text().replace("((512,), (141, 512)", "((512,), (141, 512", 1))
    with pytest.raises(SystemExit) as e:
        _rebuild([str(path), "--device", "mi300x", "--out", str(tmp_path / "t.json")])
    assert str(e.value).startswith(f"{path}:2: aten::addmm: not a TraceLens ops_unique_args row")
