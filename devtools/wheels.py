"""python -m devtools.wheels [--dest .whl] [--list] (scripts/gpu-wheels): the wheels a GPU loan carries.

The lent machine's image (devtools/gpu_image.toml) cannot download anything, and it lacks some of the
project's runtime dependencies. This downloads, for the image's Python and platforms, exactly those that are
neither on the image nor served by an equivalent there, then their own requirements the image lacks, one
version each, and refuses a set over the loan's budget (`max_wheel_mib`). The previous `.whl/` stays as it was
unless the new set is complete. scripts/device-check installs what it finds there with
`pip install --no-index --no-deps --target` before its first stage.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
IMAGE_TOML = REPO / "devtools" / "gpu_image.toml"
PYPROJECT = REPO / "pyproject.toml"


class WheelError(Exception):
    """One line: why the set of carried wheels could not be built."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def load_image(path: Path = IMAGE_TOML) -> dict:
    return tomllib.loads(path.read_text())


def image_has(image: dict, name: str, installed=None) -> bool:
    """Whether the image (or `installed`, a set of canonical names seen elsewhere) serves requirement `name`:
    the package itself, or one of its equivalents."""
    have = {canonical(p) for p in image["image"]["packages"]} if installed is None else installed
    serving = [name, *image.get("equivalents", {}).get(canonical(name), [])]
    return any(canonical(n) in have for n in serving)


def runtime_requirements(pyproject: Path = PYPROJECT) -> list[str]:
    """What the device check needs on the image: the commands' dependencies, the `bench` extra's (it measures) and
    the `test` extra's (it runs the test suite there; Dask, pytest-benchmark and hypothesis are in that extra)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    extras = project.get("optional-dependencies", {})
    out = list(project["dependencies"])
    for extra in ("bench", "test"):
        out += [r for r in extras.get(extra, []) if r not in out]
    return out


def requirement_name(req: str) -> str:
    return canonical(re.split(r"[<>=!~;\[ (]", req.strip(), maxsplit=1)[0])


def lacking(requirements: list[str], image: dict) -> list[str]:
    """The requirements the image neither has nor serves by an equivalent."""
    return [r for r in requirements if not image_has(image, requirement_name(r))]


def _marker_env(image: dict) -> dict:
    py = image["image"]["versions"].get("python", image["python"])
    return {
        "python_version": image["python"],
        "python_full_version": py,
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }


def wheel_requirements(wheel: Path, image: dict, extras: frozenset[str] = frozenset()) -> list[str]:
    """The Requires-Dist of a wheel that apply on the image: markers evaluated there, for no extra and for
    each of `extras` (those the requirement asked for: `dask[distributed]`)."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode("utf-8", "replace").splitlines()
    envs = [{**_marker_env(image), "extra": e} for e in ("", *sorted(extras))]
    out = []
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is None or any(req.marker.evaluate(env) for env in envs):
            req.marker = None
            out.append(str(req))
    return out


def _extras(req: str) -> frozenset[str]:
    from packaging.requirements import Requirement

    return frozenset(Requirement(req).extras)


def pip_resolve(requirements: list[str], dest: Path, image: dict) -> list[Path]:
    """Every lacking requirement with its dependencies, chosen by pip's own resolver in one `pip download`, for the
    image's Python and platforms: a consistent set (one requirement at a time took dask 2026.11, whose
    `distributed==2026.11` the registry did not have yet, where the resolver falls back to a dask whose
    distributed exists). Returns the wheels of the names the image lacks; the others are left out."""
    with tempfile.TemporaryDirectory(prefix="gpu-wheels-resolve-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary=:all:",
            "--python-version",
            image["python"],
            "--implementation",
            image["implementation"],
            *[a for p in image["platforms"] for a in ("--platform", p)],
            "-d",
            tmp,
            *requirements,
        ]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise WheelError(f"pip download {' '.join(requirements)} for CPython {image['python']}: {tail}")
        keep = [w for w in Path(tmp).glob("*.whl") if not image_has(image, w.name.split("-", 1)[0])]
        return sorted(Path(shutil.copy2(w, dest)) for w in keep)


def build(dest: Path, image: dict, requirements: list[str], download=None) -> list[Path]:
    """The lacking requirements and theirs, one version of each name: pip's resolver over all of them at once
    (`pip_resolve`), or, with a `download` of one requirement at a time (the tests' fake registry), recursively."""
    if download is None:
        todo = lacking(requirements, image)
        return pip_resolve(todo, dest, image) if todo else []
    todo = lacking(requirements, image)
    chosen: dict[str, Path] = {}
    while todo:
        req = todo.pop(0)
        name = requirement_name(req)
        if name in chosen:
            continue  # one version each: the first requirement of a name decides (pip's own rule)
        chosen[name] = wheel = download(req, dest, image)
        todo += lacking(wheel_requirements(wheel, image, _extras(req)), image)
    return sorted(chosen.values())


def write_wheels(
    dest: Path, image: dict | None = None, requirements: list[str] | None = None, download=None
) -> list[Path]:
    """Build the set in a temporary folder, check its size, then replace `dest` with it."""
    image = load_image() if image is None else image
    requirements = runtime_requirements() if requirements is None else requirements
    budget_bytes = int(image["max_wheel_mib"] * 2**20)
    with tempfile.TemporaryDirectory(prefix="gpu-wheels-") as tmp:
        wheels = build(Path(tmp), image, requirements, download)
        total = sum(w.stat().st_size for w in wheels)
        if total > budget_bytes:
            raise WheelError(
                f"{total / 2**20:.1f} MiB of wheels is over the {image['max_wheel_mib']} MiB a loan "
                f"carries (devtools/gpu_image.toml, max_wheel_mib)"
            )
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        return [Path(shutil.copy2(w, dest)) for w in wheels]


def image_requirements(wheels_dir: Path, image: dict, requirements: list[str]) -> list[str]:
    """What a simulation of the image must install besides its pinned torch / triton / numpy / CuPy / NVRTC:
    the declared requirements the image itself has, and the requirements of the carried wheels the image
    has (pandas for mlperf-logging, toolz for dask, ...). A requirement served by an equivalent is left to
    the simulation's own pins; one carried in `wheels_dir` is not installed (it travels)."""
    carried = {canonical(w.name.split("-", 1)[0]) for w in wheels_dir.glob("*.whl")}
    reqs = list(requirements)
    for w in sorted(wheels_dir.glob("*.whl")):
        reqs += wheel_requirements(w, image)
    from packaging.requirements import Requirement

    have = {canonical(p) for p in image["image"]["packages"]}
    merged: dict[str, Requirement] = {}  # one line per name (pip refuses a name twice): specifiers joined
    for r in reqs:
        req, name = Requirement(r), requirement_name(r)
        if name not in have or name in carried:
            continue
        if name in merged:
            merged[name].specifier &= req.specifier
            merged[name].extras |= req.extras
        else:
            req.marker = None
            merged[name] = req
    return [str(r) for r in merged.values()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="scripts/gpu-wheels", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--dest", type=Path, default=REPO / ".whl", help="where the wheels go (default: .whl/)")
    ap.add_argument("--list", action="store_true", help="only name the dependencies the image lacks (no network)")
    ap.add_argument(
        "--image-requirements",
        action="store_true",
        help="what a simulation of the image installs besides its pins (reads --dest; no network)",
    )
    args = ap.parse_args(argv)
    image = load_image()
    if args.list or args.image_requirements:
        reqs = runtime_requirements()
        print(
            "\n".join(image_requirements(args.dest, image, reqs) if args.image_requirements else lacking(reqs, image))
        )
        return 0
    try:
        wheels = write_wheels(args.dest, image)
    except WheelError as e:
        print(f"gpu-wheels: {e}", file=sys.stderr)
        return 1
    for w in wheels:
        print(f"{w.stat().st_size / 2**20:7.2f} MiB  {w.name}")
    print(f"{sum(w.stat().st_size for w in wheels) / 2**20:7.2f} MiB in {len(wheels)} wheels in {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
