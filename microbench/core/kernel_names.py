"""Kernel names: the signature the kernel rules match (no parameter list), and the label a terminal column shows,
short and never two rows alike. A demangled CUDA name runs to hundreds of characters, most of it namespaces and the
parameter list, and kernels that differ only deep inside (two `vectorized_elementwise_kernel<4, ...>` of different
functors, Tensile's `Cijk_..._MT16x16x128` against `_MT32x64x128`) looked identical when cut at the end. The JSON
and the HTML page keep the full names."""

from __future__ import annotations

import re


def kernel_signature_name(name: str) -> str:
    """A demangled kernel name without its trailing parameter list: `void f<T, 4>(float*, X::reduced_divisor)`
    -> `void f<T, 4>`. Profilers report full signatures; the parameter types say nothing about what the
    kernel does and mislead the rules (`reduced_divisor` is not a reduction, `fbgemm_gpu::` not a GEMM).
    Template arguments stay: `cutlass::Kernel<cutlass_80_tensorop_s1688gemm_...>` is named only there."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        ch = name[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                head = name[:i].rstrip()
                # `(anonymous namespace)` or a bare parenthesised name is not a parameter list
                return head if head and not head.endswith("::") else name
    return name  # unbalanced: keep the whole name


# `at::native::`, `(anonymous namespace)::`, `c10::`: qualifiers say where a name lives, not which kernel it is
_QUALIFIER = re.compile(r"(?:\(anonymous namespace\)|(?<!\w)[A-Za-z_]\w*)::(?!\{)")
ELLIPSIS = "…"
_CONTEXT = 4  # characters kept before the place two names differ, so the cut reads as part of a word


def kernel_label(name: str) -> str:
    """`void at::native::f<4, at::native::Add<c10::Half>>(int, ...)` -> `f<4, Add<Half>>`. A copy keeps its name
    whole: `Memcpy HtoD (Pageable -> Device)` says in its parentheses what the pageable-copy finding is about."""
    if name.startswith(("Memcpy ", "Memset ")):
        return name
    short = _QUALIFIER.sub("", kernel_signature_name(name))
    return short[5:] if short.startswith("void ") else short


def _cut(label: str, width: int, diverge: int) -> str:
    """`label` in `width` characters, showing where it parts from its look-alikes (`diverge`)."""
    if len(label) <= width:
        return label
    if diverge + 12 <= width:  # the difference shows in a plain cut
        return label[: width - 1] + ELLIPSIS
    head = width // 2
    room = width - head - 2
    start = max(diverge - min(_CONTEXT, room // 2), head)  # the window always holds the first differing character
    tail = label[start : start + room]
    return label[:head] + ELLIPSIS + tail + (ELLIPSIS if start + len(tail) < len(label) else "")


def _common(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def distinct_labels(names: list[str], width: int) -> list[str]:
    """One label per name, at most `width` characters, distinct where the names are: a plain cut where that is
    enough, else the head, an ellipsis and the part from where the name parts from the others. Labels equal after
    the namespaces are dropped fall back to the full names."""
    labels = [kernel_label(n) for n in names]
    out = [_cut(x, width, 0) for x in labels]
    for _ in range(2):  # the second round: look-alikes among the clean labels use their full names
        groups: dict[str, list[int]] = {}
        for i, x in enumerate(out):
            groups.setdefault(x, []).append(i)
        for ids in groups.values():
            if len({names[i] for i in ids}) < 2:
                continue  # one kernel (or one name twice): nothing to tell apart
            src = labels if len({labels[i] for i in ids}) == len({names[i] for i in ids}) else names
            own = {i: max(_common(src[i], src[j]) for j in ids if src[j] != src[i]) for i in ids}
            # one window for the group where it tells them all apart (the rows then read alike: `_MT16x16x128`,
            # `_MT32x64x128`), else each from where it parts from its nearest look-alike
            cuts = {i: _cut(src[i], width, min(own.values())) for i in ids}
            if len(set(cuts.values())) < len({src[i] for i in ids}):
                cuts = {i: _cut(src[i], width, own[i]) for i in ids}
            for i, c in cuts.items():
                out[i] = c
    return out
