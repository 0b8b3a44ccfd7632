"""NVTX ranges and profiler ranges, under the same names, for a training step: the step, its phases
(`forward`, `backward`, `optimizer`) and every module's forward and backward, nested as the modules are.

NVTX ranges (the `nvtx` package) show in Nsight Systems; the profiler ranges (`record_function`) show in
torch.profiler traces, where microbench.decompose.attribution reads them. Forward ranges come from forward pre-/post-
hooks and nest exactly. Backward ranges come from full backward pre-hooks and hooks, with two corrections:

- When none of a module's inputs requires a gradient (the stem convolution: its input is the image; an
  embedding: its input is integer ids), PyTorch calls the full backward hook as soon as the output gradient
  arrives, before the module's own backward has run. Such a module's backward range instead closes when
  the last of its parameters has its gradient accumulated (post-accumulate-grad hooks): that is when its
  backward work is done.
- Autograd may run backward on another thread (one per GPU) and in an order that is not strictly nested.
  Each thread keeps its own stack; closing a range that is not on top pops and re-pushes the NVTX ranges
  above it (NVTX ranges are a per-thread stack) and counts it in `interleaved_closes`.

For attribution, backward work is NOT assigned by these time ranges but by autograd sequence numbers:
every autograd node carries the sequence number it got when the forward op created it, and the forward
ranges record which sequence numbers each module's forward created (`layer_for_seq`). That rule holds
whatever thread or order backward runs in; the backward ranges are for Nsight Systems, and the
decomposition reports how often the two agree.
"""

from __future__ import annotations

import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

PHASES = ("forward", "backward", "optimizer")
STEP_RANGE = "step"
LOSS_LAYER = "(loss)"
RESERVED = frozenset(PHASES) | {STEP_RANGE, LOSS_LAYER}
_PHASE_COLORS = {"forward": "green", "backward": "red", "optimizer": "blue", STEP_RANGE: "grey"}


def _seq_nr() -> int:
    """The sequence number the next autograd node created on this thread will get."""
    return torch._C._autograd._get_sequence_nr()


class _TorchNvtx:
    """torch.cuda.nvtx behind the `nvtx` package's push_range / pop_range (the same NVTX library)."""

    @staticmethod
    def push_range(name: str, color: str | None = None) -> None:
        torch.cuda.nvtx.range_push(name)

    @staticmethod
    def pop_range() -> None:
        torch.cuda.nvtx.range_pop()


def _nvtx_api():
    """The `nvtx` package; where it is missing (a bare GPU image), PyTorch's own NVTX binding on a CUDA build;
    else none: the profiler ranges still carry the same names."""
    try:
        import nvtx

        return nvtx
    except ImportError:
        if torch.cuda.is_available() and torch.version.cuda:
            return _TorchNvtx
        warnings.warn("the nvtx package is not installed: no NVTX ranges (profiler ranges only)", stacklevel=3)
        return None


@dataclass
class _Open:
    name: str
    record: object  # torch.autograd.profiler.record_function, entered
    seq_start: int = 0
    module: nn.Module | None = None


@dataclass
class _Thread(threading.local):
    forward: list = field(default_factory=list)
    backward: list = field(default_factory=list)


class StepRanges:
    """Instrument `model` (hooks on every module) and provide the step and phase ranges.

    `nvtx_ranges=False` keeps only the profiler ranges; `backward_ranges=False` registers no backward hooks
    (a model that modifies a module's output in place cannot have full backward hooks).
    """

    def __init__(
        self, model: nn.Module, root_name: str | None = None, nvtx_ranges: bool = True, backward_ranges: bool = True
    ):
        self.model = model
        self.root_name = root_name or type(model).__name__
        self.names: dict[nn.Module, str] = {}
        self._depth: dict[nn.Module, int] = {}
        for qual, m in model.named_modules():
            if m not in self.names:  # a module reachable twice keeps its first name
                self.names[m] = qual or self.root_name
                self._depth[m] = qual.count(".") + 1 if qual else 0
        clash = RESERVED & set(self.names.values())
        if clash:
            raise ValueError(f"module names {sorted(clash)} collide with the step's range names")
        self.types = {name: type(m).__name__ for m, name in self.names.items()}
        self.layer_names = set(self.names.values()) | {LOSS_LAYER}
        self.current_phase: str | None = None
        self.backward_ranges = backward_ranges
        self.interleaved_closes = 0
        self.unmatched_closes = 0
        self._nvtx = _nvtx_api() if nvtx_ranges else None
        self._tls = _Thread()
        self._lock = threading.Lock()
        self._intervals: list[tuple[int, int, int, str]] = []  # (seq_start, seq_end, depth, layer)
        self._param_close: dict[nn.Module, bool] = {}  # module -> its inputs needed no gradient
        self._waiting: dict[nn.Module, set[int]] = {}  # module -> ids of parameters still to accumulate
        self._owners: dict[int, list[nn.Module]] = {}
        self._handles = []
        for m in self.names:
            self._handles.append(m.register_forward_pre_hook(self._fw_pre))
            self._handles.append(m.register_forward_hook(self._fw_post, always_call=True))
            # An in-place module (ReLU(inplace=True)) modifies the tensor the backward hook wraps: skip it.
            if backward_ranges and not getattr(m, "inplace", False):
                self._handles.append(m.register_full_backward_pre_hook(self._bw_pre))
                self._handles.append(m.register_full_backward_hook(self._bw_post))
        if backward_ranges:
            # PyTorch warns when it calls a full backward hook early (no input needs a gradient); that case is
            # handled above (_param_close), so the warning says nothing the user must act on.
            warnings.filterwarnings(
                "ignore",
                message="Full backward hook is firing when gradients are computed with respect to module outputs",
                category=UserWarning,
            )
            for m in self.names:
                for p in m.parameters():
                    if p.requires_grad:
                        self._owners.setdefault(id(p), []).append(m)
            for p in model.parameters():
                if p.requires_grad:
                    self._handles.append(p.register_post_accumulate_grad_hook(self._param_done))

    # ---- ranges ---------------------------------------------------------------------------------------
    def _enter(self, name: str, color: str | None = None) -> object:
        if self._nvtx is not None:
            self._nvtx.push_range(name, color=color or "yellow")
        rf = torch.autograd.profiler.record_function(name)
        rf.__enter__()
        return rf

    def _exit_top(self, rf) -> None:
        rf.__exit__(None, None, None)
        if self._nvtx is not None:
            self._nvtx.pop_range()

    @contextmanager
    def phase(self, name: str):
        """A step phase (forward, backward, optimizer) or the whole step."""
        rf = self._enter(name, _PHASE_COLORS.get(name))
        previous = self.current_phase
        if name in PHASES:
            self.current_phase = name
        try:
            yield
        finally:
            self.current_phase = previous
            self._exit_top(rf)

    @contextmanager
    def layer(self, name: str):
        """A pseudo-layer that is not a module (the loss): a forward range that also records the autograd
        sequence numbers it creates, so that its backward is attributed to it as well."""
        self._push_forward(name, None)
        try:
            yield
        finally:
            self._pop_forward(None)

    # ---- forward --------------------------------------------------------------------------------------
    def _push_forward(self, name: str, module) -> None:
        self._tls.forward.append(_Open(name, self._enter(name), _seq_nr(), module))

    def _pop_forward(self, module) -> None:
        stack = self._tls.forward
        if not stack:
            return
        top = stack.pop()
        seq_end = _seq_nr()
        if seq_end > top.seq_start:
            with self._lock:
                self._intervals.append((top.seq_start, seq_end, len(stack), top.name))
        self._exit_top(top.record)

    def _fw_pre(self, module, args):
        self._param_close[module] = not any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in torch.utils._pytree.tree_leaves(args)
        )
        self._push_forward(self.names[module], module)

    def _fw_post(self, module, args, output):
        self._pop_forward(module)

    def current_forward_layer(self) -> str | None:
        stack = self._tls.forward
        return stack[-1].name if stack else None

    # ---- backward -------------------------------------------------------------------------------------
    def _bw_pre(self, module, grad_output):
        self._tls.backward.append(_Open(self.names[module], self._enter(self.names[module]), module=module))
        if self._param_close.get(module):
            pending = {id(p) for p in module.parameters() if p.requires_grad}
            if pending:
                with self._lock:
                    self._waiting.setdefault(module, set()).update(pending)
            else:
                self._close(module)  # no input gradient, no parameter: no backward work at all

    def _bw_post(self, module, grad_input, grad_output):
        if self._param_close.get(module):
            return  # called before the module's backward ran; closed by _param_done instead
        if not self._close(module):
            self.unmatched_closes += 1

    def _param_done(self, param) -> None:
        done = []
        with self._lock:
            for m in self._owners.get(id(param), ()):
                pending = self._waiting.get(m)
                if pending is not None and id(param) in pending:
                    pending.discard(id(param))
                    if not pending:
                        del self._waiting[m]
                        done.append(m)
        # Innermost first, so that the NVTX stack unwinds in order. A module called more than once (a shared
        # embedding) has one range open per call; its parameters' gradients are complete for all of them.
        for m in sorted(done, key=lambda m: -self._depth[m]):
            while self._close(m):
                pass

    def _close(self, module) -> bool:
        """Close the latest open backward range of `module` on this thread; False when there is none."""
        stack = self._tls.backward
        for i in range(len(stack) - 1, -1, -1):
            if stack[i].module is module:
                break
        else:
            return False
        above = stack[i + 1 :]
        if above:
            # Autograd finished this module while ranges opened after it are still open: NVTX can only pop
            # the top of a thread's stack, so pop those, pop this one, and push those again.
            self.interleaved_closes += 1
            if self._nvtx is not None:
                for _ in above:
                    self._nvtx.pop_range()
        target = stack.pop(i)
        target.record.__exit__(None, None, None)
        if self._nvtx is not None:
            self._nvtx.pop_range()
            for o in above:
                self._nvtx.push_range(o.name, color="yellow")
        return True

    def current_backward_layer(self) -> str | None:
        stack = self._tls.backward
        return stack[-1].name if stack else None

    # ---- attribution by autograd sequence number -------------------------------------------------------
    def seq_map(self) -> dict[int, str]:
        """Autograd sequence number -> the innermost layer whose forward created that node."""
        out: dict[int, str] = {}
        with self._lock:
            intervals = sorted(self._intervals, key=lambda t: (t[0], -t[1], t[2]))
        for start, end, _, name in intervals:  # outer first, inner ones overwrite
            for s in range(start, end):
                out[s] = name
        return out

    def reset(self) -> None:
        """Forget recorded sequence numbers and close dangling ranges (after an interrupted step)."""
        with self._lock:
            self._intervals.clear()
            self._waiting.clear()
        for stack in (self._tls.forward, self._tls.backward):
            while stack:
                self._exit_top(stack.pop().record)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
