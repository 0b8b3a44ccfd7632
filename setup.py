"""What pyproject.toml cannot say. The packages: microbench and its subpackages, with the top-level kernels/ and
models/ mapped under it (microbench.kernels, microbench.models: one import name, never a top-level `kernels`).
And bench.toml lives at the repository's top level (where users edit it)
and is shipped inside the package, as microbench/bench.toml, so an installed dawnscope finds it through
importlib.resources (microbench.core.config.DEFAULT_CONFIG); so do the documents, docs/*.md as microbench/docs/
(`dawnscope help`)."""

from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    def run(self):
        super().run()
        if not self.dry_run:  # an editable build's build_lib holds no package folder yet: make it
            target = Path(self.build_lib) / "microbench" / "bench.toml"
            target.parent.mkdir(parents=True, exist_ok=True)
            self.copy_file(str(Path(__file__).parent / "bench.toml"), str(target))
            # the documents the messages name (docs/<name>.md), for `dawnscope help NAME` from an install
            docs = Path(self.build_lib) / "microbench" / "docs"
            docs.mkdir(parents=True, exist_ok=True)
            for md in sorted((Path(__file__).parent / "docs").glob("*.md")):
                self.copy_file(str(md), str(docs / md.name))


setup(
    packages=find_namespace_packages(include=["microbench", "microbench.*"])
    + ["microbench.kernels", "microbench.models"],
    package_dir={"microbench.kernels": "kernels", "microbench.models": "models"},
    cmdclass={"build_py": BuildPy},
)
