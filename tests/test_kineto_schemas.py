"""Every Kineto schema torch.profiler has written since 1.8, read into the same timeline (docs/traces.md,
"Profiler schemas"). The seed is a cut of a real 2021-schema trace, the TensorBoard plugin's ResNet-50 sample
(pytorch/kineto tb_plugin/samples/resnet50_num_workers_4, V100; tests/data/SOURCES.md): categories `Operator`,
`Runtime`, `Kernel`, `Memcpy`, `Memset`, `ProfilerStep#N` as an `Operator`, `async` flows named `launch`, a
kernel's `external id` in lower case. The later schemas' spellings are the same events renamed the way later
profilers name them (`cpu_op`, `cuda_runtime` / `cuda_driver`, `kernel`, `gpu_memcpy`, `gpu_memset`, `ac2g`
flows, `External id`, the step as a `user_annotation`): each must give the same timeline."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from microbench.trace import kineto
from microbench.trace.timeline import KERNEL, MEMCPY, NO_ID

from .conftest import TRACES

DATA = Path(__file__).parent / "data"
SLICE_2021 = DATA / "v100_resnet50_2021schema_slice.json"
TB_SAMPLE = TRACES / "v100_resnet50_tbplugin_2021schema.json.gz" if TRACES else None
# The 2021 names and what PyTorch 1.10+ writes for the same events (libkineto ActivityType.cpp).
LATER_NAMES = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "async": "ac2g",
}


def _slice() -> dict:
    return json.loads(SLICE_2021.read_text())


def _write(tmp_path: Path, doc: dict, name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def _later_schema(doc: dict, step_category: str = "user_annotation", runtime: str = "cuda_runtime") -> dict:
    out = copy.deepcopy(doc)
    for e in out["traceEvents"]:
        cat = e.get("cat")
        if cat in LATER_NAMES:
            e["cat"] = LATER_NAMES[cat]
        if cat == "Runtime":
            e["cat"] = runtime
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            e["cat"] = step_category
        args = e.get("args")
        if isinstance(args, dict) and "external id" in args:
            args["External id"] = args.pop("external id")
    return out


def _shape(tl) -> dict:
    li = tl.launch_index()
    return {
        "kernels": len(tl.activities),
        "copies": int((tl.activities.category == MEMCPY).sum()),
        "launched": int((li != NO_ID).sum()),
        "launches": len(tl.launches),
        "ops": len(tl.cpu_ops),
        "steps": tl.step_windows().names,
        "external": tl.activities.external_id.tolist(),
        "op_names": sorted({tl.names[n] for n in tl.cpu_ops.name}),
    }


def test_the_2021_schema_reads_operators_launches_and_steps():
    tl = kineto.read(SLICE_2021)
    s = _shape(tl)
    assert s["steps"] == ["ProfilerStep#5", "ProfilerStep#6"]
    assert s["kernels"] == 24 and s["copies"] == 4
    assert s["launched"] == 24  # every activity's `Runtime` call (cudaLaunchKernel, cudaMemcpyAsync) is found
    assert {tl.names[n] for n in tl.launches.name} >= {"cudaLaunchKernel", "cudaMemcpyAsync"}
    assert "aten::cudnn_convolution" in s["op_names"] and not any(n.startswith("ProfilerStep") for n in s["op_names"])
    assert NO_ID not in s["external"]  # `external id`, lower case, on the 2021 kernels
    assert tl.meta["flow_events"] == 48  # one `s` and one `f` per activity
    assert "unread_categories" not in tl.meta


@pytest.mark.parametrize("step_category", ["user_annotation", "cpu_op"])
@pytest.mark.parametrize("runtime", ["cuda_runtime", "cuda_driver", "hip_runtime"])
def test_later_schemas_give_the_same_timeline(tmp_path, step_category, runtime):
    old = _shape(kineto.read(SLICE_2021))
    new = _shape(kineto.read(_write(tmp_path, _later_schema(_slice(), step_category, runtime))))
    assert new == old


def test_a_step_written_under_two_categories_is_one_step(tmp_path):
    doc = _later_schema(_slice(), "cpu_op")
    doc["traceEvents"] += [
        e | {"cat": "user_annotation"} for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    w = kineto.read(_write(tmp_path, doc)).step_windows()
    assert w.names == ["ProfilerStep#5", "ProfilerStep#6"]


def test_upper_case_kernel_and_lower_case_kernel_are_one_category(tmp_path):
    doc = _slice()
    k = [e for e in doc["traceEvents"] if e.get("cat") == "Kernel"]
    for e in k[::2]:
        e["cat"] = "kernel"
    tl = kineto.read(_write(tmp_path, doc))
    assert int((tl.activities.category == KERNEL).sum()) == len(k)


def test_device_work_in_an_unknown_category_is_counted_by_name(tmp_path):
    # Meta's MTIA traces file device work as `mtia_ccp_events` (libkineto ActivityType MTIA_CCP_EVENTS)
    doc = _slice()
    doc["traceEvents"] += [e | {"cat": "mtia_ccp_events"} for e in doc["traceEvents"] if e.get("cat") == "Kernel"][:3]
    tl = kineto.read(_write(tmp_path, doc))
    assert tl.meta["unread_categories"] == {"mtia_ccp_events": 3}
    assert len(tl.activities) == 24


@pytest.mark.skipif(TB_SAMPLE is None or not TB_SAMPLE.is_file(), reason="tests/data/traces not here")
def test_the_whole_tensorboard_sample_matches_the_plugins_own_kernel_time():
    from microbench.trace import gpu_time

    tl = kineto.read(TB_SAMPLE)
    assert (tl.launch_index() != NO_ID).all()
    w, steps, outside = gpu_time.step_breakdowns(tl)
    assert w.names == [f"ProfilerStep#{i}" for i in range(5, 11)]
    # the plugin's overview (tb_plugin/test/result_check_file.txt): Kernel 99,145 us per step on average;
    # its kernel time is the union of kernel intervals, our computation time
    per_step = np.mean([s["computation_us"] for s in steps])
    assert per_step == pytest.approx(99_145, abs=1)
    assert outside["outside_steps"]["activities"] == 0 and outside["before_first_step"]["activities"] == 0


@pytest.mark.parametrize("flow_category", ["async", "ac2g"])
def test_flow_events_link_what_has_no_correlation_id(tmp_path, flow_category):
    """A profiler that keeps the link in its flow events only (the `s` at the runtime call, the `f` at the
    kernel, with the correlation id as the flow's id): the same launches are found."""
    doc = _slice()
    for e in doc["traceEvents"]:
        if e.get("cat") in ("async", "ac2g"):
            e["cat"] = flow_category
        elif e.get("cat") in ("Kernel", "Memcpy", "Runtime"):
            e["args"].pop("correlation", None)
    tl = kineto.read(_write(tmp_path, doc))
    assert _shape(tl) == _shape(kineto.read(SLICE_2021))
    assert tl.meta["linked_by_flows"] == 48  # 24 activities and their 24 runtime calls


KINETO_SHARED = sorted(p.name for p in TRACES.glob("*.json.gz") if "rocprof" not in p.name) if TRACES else []


@pytest.mark.parametrize("name", KINETO_SHARED)
def test_no_category_of_the_shared_traces_is_unknown(name):
    # 2021 (Operator, Runtime, ...) to 2025 (cpu_op, cuda_runtime, cuda_driver, gpu_user_annotation, python_function,
    # cuda_sync, cpu_instant_event, fwdbwd and ac2g flows): each is read or left out on purpose, none unnamed
    tl = kineto.read(TRACES / name)
    assert "unread_categories" not in tl.meta


# Cuts of real traces in the later schemas (tests/data/SOURCES.md): HTA's V100 ResNet DDP trace (2023: cpu_op,
# cuda_runtime, gpu_memcpy, ac2g flows, ProfilerStep#N as a user_annotation) and TraceLens' MI300X bert-small
# (ROCm 2025: the same names, kernels on device 2, the step's GPU copy as a gpu_user_annotation)
LATER_CUTS = [
    ("v100_resnet_ddp_2023schema_slice.json", ["ProfilerStep#101", "ProfilerStep#102"], 60),
    ("mi300_bert_small_rocm_slice.json", ["ProfilerStep#6"], 12),
]


@pytest.mark.parametrize("name,steps,activities", LATER_CUTS)
def test_later_schema_cuts_read_steps_operators_and_launches(name, steps, activities):
    tl = kineto.read(DATA / name)
    s = _shape(tl)
    assert s["steps"] == steps and s["kernels"] == activities and s["launched"] == activities
    assert s["ops"] > 0 and not any(n.startswith("ProfilerStep") for n in s["op_names"])
    assert "unread_categories" not in tl.meta


def test_without_launches_the_gpu_step_annotation_places_the_kernels(tmp_path):
    """The MI300X cut with its hipLaunchKernel calls taken out: the step's GPU-side annotation (Kineto's
    gpu_user_annotation ProfilerStep#6) still places every kernel in the step, with the same GPU figures."""
    from microbench.trace import gpu_time

    full = gpu_time.step_breakdowns(kineto.read(DATA / "mi300_bert_small_rocm_slice.json"))
    doc = json.loads((DATA / "mi300_bert_small_rocm_slice.json").read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "cuda_runtime"]
    _, (step,), outside = gpu_time.step_breakdowns(kineto.read(_write(tmp_path, doc)))
    assert outside["placed_by_gpu_annotation"] == 12 and outside["unlaunched_outside_steps"] == 0
    (before,) = full[1]
    assert {k: step[k] for k in ("kernel_count", "gpu_span_us", "busy_us", "idle_us")} == {
        k: before[k] for k in ("kernel_count", "gpu_span_us", "busy_us", "idle_us")
    }
