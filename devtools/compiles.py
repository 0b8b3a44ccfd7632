"""python -m devtools.compiles: how many Triton kernels a GPU run of a profile compiles, counted on a CPU
(microbench/inspect/compiles.py does the counting; `dawnscope inspect --profile` uses the same plans)."""

from __future__ import annotations

import sys

from microbench.core.args import Parser, number
from microbench.core.config import load_config
from microbench.core.errors import run_command
from microbench.inspect.compiles import count, environ


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m devtools.compiles", description=__doc__.split("(")[0])
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--family", default="sm_90", choices=["sm_80", "sm_90", "cdna"])
    ap.add_argument(
        "--sms",
        type=number(int, 1, 1024),
        default=132,
        help="multiprocessors of the GPU, 1 to 1024 (H100/H200 SXM: 132)",
    )
    ap.add_argument("--config", default=None)
    args = ap.parse_args(argv)
    return run_command(lambda: _main(args))


def _main(args) -> int:
    from microbench.kernels.triton_runtime import AUTOTUNE_ENV

    cases = load_config(args.config).case_set(args.profile).cases
    for setting in ("1", "0"):
        with environ(AUTOTUNE_ENV, setting):
            c = count(cases, args.family, args.sms)
        kernels_ = ", ".join(f"{k} {n}" for k, n in c["by_kernel"].items())
        print(
            f"profile {args.profile}, {args.family}, {AUTOTUNE_ENV}={setting}: {c['total']} Triton compiles "
            f"({kernels_})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
