"""The toolchain of the static inspection in every layout we meet: NVRTC from the CUDA 12 wheel, the CUDA 13
wheel (nvidia/cu13/lib), CUDA_HOME or a library this process already loaded; PTX newer than the ptxas at
hand lowered when its code allows it. Layouts are faked with empty files in temporary folders; the
lowering runs the real NVRTC and the real ptxas of this environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from microbench.kernels import nvrtc
from microbench.roofline import sass

pytestmark = pytest.mark.inspect


def _touch(*paths: Path) -> None:
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"")


def test_wheels_cu13_before_cu12_and_only_the_library_itself(tmp_path):
    site = tmp_path / "site-packages"
    cu13, cu12 = site / "nvidia" / "cu13" / "lib", site / "nvidia" / "cuda_nvrtc" / "lib"
    _touch(
        cu13 / "libnvrtc.so.13",
        cu13 / "libnvrtc-builtins.so.13.0",
        cu13 / "libnvrtc.alt.so.13",
        cu13 / "libcublas.so.13",
        cu12 / "libnvrtc.so.12",
        cu12 / "libnvrtc-builtins.so.12.9",
    )
    found = nvrtc.candidates(site_dirs=[str(site)], environ={}, maps=tmp_path / "no-maps")
    wheel = [p for p in found if p.startswith(str(site))]
    assert wheel == [str(cu13 / "libnvrtc.so.13"), str(cu12 / "libnvrtc.so.12")]


def test_cuda_home_lib64_lib_and_targets(tmp_path):
    home = tmp_path / "cuda-13.0"
    _touch(home / "lib64" / "libnvrtc.so.13", home / "targets" / "x86_64-linux" / "lib" / "libnvrtc.so.13.0.88")
    found = nvrtc.candidates(site_dirs=[], environ={"CUDA_HOME": str(home)}, maps=tmp_path / "no-maps")
    assert found[:2] == [
        str(home / "lib64" / "libnvrtc.so.13"),
        str(home / "targets" / "x86_64-linux" / "lib" / "libnvrtc.so.13.0.88"),
    ]
    assert nvrtc.candidates(site_dirs=[], environ={"CUDA_PATH": str(home)}, maps=tmp_path / "x")[0] == found[0]


def test_a_library_already_in_the_process_comes_first(tmp_path):
    site = tmp_path / "site"
    _touch(site / "nvidia" / "cu13" / "lib" / "libnvrtc.so.13")
    maps = tmp_path / "maps"
    torch_copy = "/opt/conda/lib/python3.12/site-packages/torch/lib/libnvrtc-672ee683.so.11.2"
    maps.write_text(
        "7f0000000000-7f0000001000 r--p 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
        f"7f0000002000-7f0000003000 r-xp 00001000 08:01 456 {torch_copy}\n"
        "7f0000004000-7f0000005000 r--p 00000000 08:01 789 /x/nvidia/cu13/lib/libnvrtc-builtins.so.13.0\n"
        "7f0000006000-7f0000007000 rw-p 00000000 00:00 0 \n"
    )
    found = nvrtc.candidates(site_dirs=[str(site)], environ={}, maps=maps)
    assert found[:2] == [torch_copy, str(site / "nvidia" / "cu13" / "lib" / "libnvrtc.so.13")]


def test_the_real_process_map_names_a_loaded_nvrtc():
    try:
        path = Path(nvrtc.candidates()[0])
    except IndexError:
        pytest.skip("no libnvrtc in this environment")
    code = (
        "import ctypes, sys; sys.path.insert(0, '.'); ctypes.CDLL(sys.argv[1]);"
        "from kernels import nvrtc; print(nvrtc.loaded_in_process()[0])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parent.parent,
        check=True,
    ).stdout.strip()
    assert Path(out).resolve() == path.resolve()


_SAXPY = 'extern "C" __global__ void saxpy(float a, const float* x, float* y) { y[threadIdx.x] += a * x[threadIdx.x]; }'


def _real_ptx() -> str:
    try:
        nvrtc.version()
        sass.toolchain()
    except (nvrtc.NvrtcError, sass.ToolchainError) as e:
        pytest.skip(f"no NVRTC or ptxas here: {str(e).splitlines()[0]}")
    return nvrtc.compile_ptx(_SAXPY, name="saxpy.cu", arch="compute_80").ptx


def test_ptx_newer_than_ptxas_is_lowered_when_its_code_allows():
    ptx = _real_ptx()
    original = sass.ptx_version(ptx)
    assert original and original.count(".") == 1
    future = sass.lower_ptx_version(ptx, "99.9")  # a PTX ISA no ptxas reads yet
    assert sass.ptx_version(future) == "99.9" and future.replace("99.9", original, 1) == ptx
    cubin, log = sass.assemble(future, "sm_80")
    first = log.splitlines()[0]
    assert first.startswith("PTX .version 99.9 lowered to ")
    accepted = first.split()[5].rstrip(",")
    assert tuple(map(int, accepted.split("."))) >= (7, 0)
    assert sass.opcode_counts(sass.disassemble(cubin))["FFMA"] >= 1  # the saxpy's a * x + y survived
    rec = sass.inspect_build(sass.AotBuild(kernel="saxpy", config="-", target="sm_80", cubin=cubin, ptxas_log=log))
    assert rec.note == first and rec.as_dict()["note"].startswith("PTX .version 99.9 lowered")


def test_ptx_that_needs_the_newer_isa_says_why(tmp_path):
    ptx = _real_ptx().replace("ret;", "not_an_instruction_in_any_isa;\n\tret;")
    with pytest.raises(sass.ToolchainError) as info:
        sass.assemble(sass.lower_ptx_version(ptx, "99.9"), "sm_80")
    msg = str(info.value)
    assert "refuses PTX .version 99.9" in msg and "uses what that ISA lacks" in msg
    assert "not_an_instruction_in_any_isa" in msg  # ptxas's own words about the line


def _fake_modules(monkeypatch, cubin: bytes):
    import types

    from microbench import kernels

    good, bad = types.ModuleType("fake_good_kernels"), types.ModuleType("fake_broken_kernels")
    good.aot_builds = lambda target: [sass.AotBuild(kernel="saxpy", config="-", target=target, cubin=cubin)]

    def broken(target):
        raise sass.ToolchainError(f"ptxas -arch={target} failed:\nUnsupported .version 9.0; current version is '8.7'")

    bad.aot_builds = broken
    for m in (bad, good):
        monkeypatch.setitem(sys.modules, m.__name__, m)
    monkeypatch.setattr(kernels, "STATIC_MODULES", (bad.__name__, good.__name__))


def test_inspect_goes_on_past_a_failing_module_and_says_what_failed(tmp_path, monkeypatch, capsys):
    from microbench.inspect import cli as cli

    cubin, _ = sass.assemble(_real_ptx(), "sm_80")
    _fake_modules(monkeypatch, cubin)
    out = tmp_path / "inspect.json"
    assert cli.main(["--json", str(out)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "fake_broken_kernels (sm_80), fake_broken_kernels (sm_90)" in err and "Unsupported .version 9.0" in err
    rows = json.loads(out.read_text())
    assert [(r["kernel"], r["target"]) for r in rows if "kernel" in r] == [("saxpy", "sm_80"), ("saxpy", "sm_90")]
    assert [(r["module"], r["target"]) for r in rows if "error" in r] == [
        ("fake_broken_kernels", "sm_80"),
        ("fake_broken_kernels", "sm_90"),
    ]


def test_inspect_json_is_written_as_it_goes(tmp_path, monkeypatch):
    from microbench.inspect import cli as cli

    cubin, _ = sass.assemble(_real_ptx(), "sm_80")
    _fake_modules(monkeypatch, cubin)
    out, seen = tmp_path / "inspect.json", []
    cli.run(json_path=out, progress=lambda name, target, _: seen.append(len(json.loads(out.read_text()))))
    assert seen == [1, 2, 3, 4]  # after every (module, target): failure, failure, record, record
    assert not list(tmp_path.glob("*.tmp"))
