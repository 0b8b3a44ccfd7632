"""The wheels a GPU loan carries (scripts/gpu-wheels, devtools.wheels) and the probe's list of missing
dependencies, against the image's package list (devtools/gpu_image.toml). Downloads are faked with wheels
written here: which requirements are fetched, recursion into their own, markers evaluated for the image's
CPython 3.12, one version each, the size budget, and `.whl/` left as it was when the new set is refused."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from devtools import probe, wheels

from .conftest import REPO


def _image(packages: list[str], equivalents: dict | None = None, max_mib: float = 48) -> dict:
    return {
        "python": "3.12",
        "implementation": "cp",
        "platforms": ["manylinux_2_28_x86_64"],
        "max_wheel_mib": max_mib,
        "equivalents": equivalents or {},
        "image": {"packages": packages, "versions": {"python": "3.12.3"}},
    }


def _fake_index(tmp_path, catalogue: dict[str, tuple[str, list[str], int]]):
    """download(req, dest, image) over `catalogue`: name -> (version, Requires-Dist lines, padding bytes)."""
    asked = []

    def download(req, dest, image):
        name = wheels.requirement_name(req)
        asked.append(req)
        version, requires, pad = catalogue[name]
        path = Path(dest) / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
            f"Requires-Dist: {r}\n" for r in requires
        )
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(f"{name}-{version}.dist-info/METADATA", meta)
            z.writestr("pad.bin", b"\0" * pad)
        return path

    return download, asked


def test_only_what_the_image_lacks_with_its_own_missing_requirements(tmp_path):
    image = _image(
        ["numpy", "pandas", "PyYAML", "nvidia-cuda-nvrtc"], {"nvidia-cuda-nvrtc-cu12": ["nvidia-cuda-nvrtc"]}
    )
    download, asked = _fake_index(
        tmp_path,
        {
            "msgspec": (
                "0.23.0",
                ['tomli; python_version < "3.11" and extra == "toml"', 'pyyaml; extra == "yaml"'],
                10,
            ),
            "mlperf-logging": (
                "4.1.68",
                [
                    "pandas>=1.0",
                    "pyyaml>=5.4.1",
                    "numpy>=1.17.3",
                    "extra-dep>=1",
                    'old-only; python_version < "3.9"',
                    'win-only; sys_platform == "win32"',
                ],
                10,
            ),
            "extra-dep": ("2.0", ["msgspec>=0.1"], 10),  # needs one already chosen: not downloaded twice
        },
    )
    reqs = ["numpy>=1.26", "msgspec>=0.18", "nvidia-cuda-nvrtc-cu12>=12.4", "mlperf-logging>=3.0"]
    got = wheels.write_wheels(tmp_path / "whl", image, reqs, download)
    assert asked == ["msgspec>=0.18", "mlperf-logging>=3.0", "extra-dep>=1"]
    assert sorted(p.name.split("-")[0] for p in got) == ["extra_dep", "mlperf_logging", "msgspec"]
    assert sorted(p.name for p in (tmp_path / "whl").iterdir()) == sorted(p.name for p in got)


def test_over_the_budget_is_refused_and_the_earlier_set_stays(tmp_path):
    dest = tmp_path / "whl"
    dest.mkdir()
    (dest / "earlier-1.0-py3-none-any.whl").write_bytes(b"x")
    download, _ = _fake_index(tmp_path, {"big": ("1.0", [], 2 * 2**20)})
    with pytest.raises(wheels.WheelError, match=r"over the 1 MiB a loan carries"):
        wheels.write_wheels(dest, _image([], max_mib=1), ["big"], download)
    assert [p.name for p in dest.iterdir()] == ["earlier-1.0-py3-none-any.whl"]


def test_the_image_data_is_the_shared_list(shared_dir):
    """devtools/gpu_image.toml holds the names of the lent image's package list, in its order
    (gpu-image/packages.txt of the optional corpus beside the repository)."""
    listed = shared_dir / "gpu-image" / "packages.txt"
    if not listed.is_file():
        pytest.skip(f"{listed} is not here")
    names = [ln.strip() for ln in listed.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert wheels.load_image()["image"]["packages"] == names


def test_what_the_project_needs_from_outside_the_image():
    """Among the declared dependencies: msgspec, nvtx and mlperf-logging are not on the image; the nvrtc cu12
    wheel is served by CUDA 13's NVRTC; torch, triton, numpy and pytest are there."""
    lacking = [wheels.requirement_name(r) for r in wheels.lacking(wheels.runtime_requirements(), wheels.load_image())]
    assert {"msgspec", "nvtx", "mlperf-logging"} <= set(lacking)
    assert not {"nvidia-cuda-nvrtc-cu12", "torch", "triton", "numpy", "pytest"} & set(lacking)


def test_a_requirement_with_extras_brings_the_extras_requirements(tmp_path):
    download, asked = _fake_index(
        tmp_path,
        {
            "dask": ("2025.1", ['distributed==2025.1; extra == "distributed"', 'pandas; extra == "dataframe"'], 10),
            "distributed": ("2025.1", ["tornado>=6", "toolz"], 10),
            "tornado": ("6.5", [], 10),
        },
    )
    wheels.write_wheels(tmp_path / "whl", _image(["toolz", "pandas"]), ["dask[distributed]>=2024.1"], download)
    assert asked == ["dask[distributed]>=2024.1", "distributed==2025.1", "tornado>=6"]


def test_probe_does_not_call_a_dependency_served_by_an_equivalent_missing(tmp_path, monkeypatch):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["nvidia-cuda-nvrtc-cu12>=12.4", "msgspec>=0.18"]\n')
    installed = {"nvidia-cuda-nvrtc": "13.0.88"}  # as on the image: CUDA 13's NVRTC, no cu12 wheel, no msgspec
    monkeypatch.setattr(probe, "installed_version", lambda name: installed.get(name))
    assert probe.missing_dependencies(pyproject) == ["msgspec"]
    installed.clear()
    assert probe.missing_dependencies(pyproject) == ["nvidia-cuda-nvrtc-cu12", "msgspec"]


def test_gitignored_and_the_script_is_valid_bash():
    import subprocess

    assert re.search(r"^\.whl/$", (REPO / ".gitignore").read_text(), re.M)
    subprocess.run(["bash", "-n", str(REPO / "scripts" / "gpu-wheels")], check=True)


def test_what_a_simulation_of_the_image_installs(tmp_path):
    """The declared requirements the image has and the carried wheels' requirements the image has, one line
    per name (pip refuses a name twice); nothing carried, nothing served only by an equivalent."""
    download, _ = _fake_index(
        tmp_path,
        {
            "mlperf-logging": ("4.1", ["pandas>=1.0", "numpy>=1.17.3", "pyyaml"], 10),
            "msgspec": ("0.23", ['pyyaml; extra == "yaml"'], 10),
        },
    )
    image = _image(
        ["numpy", "pandas", "PyYAML", "nvidia-cuda-nvrtc", "pytest"], {"nvidia-cuda-nvrtc-cu12": ["nvidia-cuda-nvrtc"]}
    )
    reqs = ["numpy>=1.26", "pytest>=8", "msgspec>=0.18", "nvidia-cuda-nvrtc-cu12>=12.4", "mlperf-logging>=3.0"]
    wheels.write_wheels(tmp_path / "whl", image, reqs, download)
    got = wheels.image_requirements(tmp_path / "whl", image, reqs)
    assert got == ["numpy>=1.17.3,>=1.26", "pytest>=8", "pandas>=1.0", "pyyaml"]
