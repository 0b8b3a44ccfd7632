"""microbench.roofline.launches: one record of which kernel ran, for Triton and CUDA C++ providers alike,
separate per thread, nested records each seeing every launch made inside them."""

from __future__ import annotations

import threading

from microbench.kernels import cuda_kernels as ck
from microbench.kernels import triton_runtime
from microbench.roofline.launches import KernelLaunch, launch_record, report_launch


def _cuda_launch(tag: str) -> ck.Launch:
    return ck.Launch("gemm_mma.cu", ("expr",), "expr", "cuda_gemm_mma", f"cfg {tag}", "bf16", 1024)


def test_both_providers_report_into_one_record_in_order():
    compiled = object()  # stands for Triton's CompiledKernel: the record keeps it as it is
    with launch_record() as ran:
        triton_runtime.report_launch("triton_gemm", compiled, "128x128x64")
        ck.report(_cuda_launch("a"))
    assert [(r.kernel, r.config) for r in ran] == [("triton_gemm", "128x128x64"), ("cuda_gemm_mma", "cfg a")]
    assert ran[0].detail is compiled and isinstance(ran[1].detail, ck.Launch)


def test_nothing_is_kept_outside_a_record_and_nested_records_see_their_launches():
    report_launch("before", "x")  # no record open: dropped, and no error
    with launch_record() as outer:
        report_launch("k1", "c1")
        with launch_record() as inner:
            report_launch("k2", "c2")
        report_launch("k3", "c3")
    report_launch("after", "x")
    assert [r.kernel for r in outer] == ["k1", "k2", "k3"]
    assert inner == [KernelLaunch("k2", "c2")]


def test_threads_measuring_at_once_see_only_their_own_launches():
    """Two threads interleave launches step by step (a barrier between each): with the old module-global
    `LaunchLog.last` the second thread's launch overwrote the first's."""
    n_threads, n_launches = 4, 5
    barrier = threading.Barrier(n_threads)
    seen: dict[int, list] = {}
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            with launch_record() as ran:
                for j in range(n_launches):
                    barrier.wait(timeout=10)
                    if i % 2:
                        ck.report(_cuda_launch(f"{i}.{j}"))
                    else:
                        triton_runtime.report_launch(f"triton_{i}", None, f"cfg {i}.{j}")
            seen[i] = [r.config for r in ran]
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    assert seen == {i: [f"cfg {i}.{j}" for j in range(n_launches)] for i in range(n_threads)}


def test_a_record_opened_in_one_thread_does_not_collect_another_threads_launches():
    started, reported = threading.Event(), threading.Event()

    def other() -> None:
        started.wait(timeout=10)
        report_launch("elsewhere", "x")
        reported.set()

    t = threading.Thread(target=other)
    t.start()
    with launch_record() as ran:
        started.set()
        reported.wait(timeout=10)
    t.join(timeout=10)
    assert ran == []
