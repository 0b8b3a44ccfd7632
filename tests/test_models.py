"""The benchmark models, their facts, the training step and the NVTX / profiler ranges (CPU)."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from microbench import models
from microbench.models.ranges import LOSS_LAYER, PHASES, StepRanges
from microbench.models.step import TrainingStep, Workload, image_inputs

# docs/reference.md: "ResNet-50 at 224x224 is about 4.1 GMAC (8.2 GFLOP) per image forward".
RESNET50_FORWARD_GFLOP = 8.2


@pytest.mark.slow
def test_resnet50_forward_flops_match_reference():
    w = models.load("resnet50")
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        w.model.eval()(x)
    gflop = fc.get_total_flops() / 1e9
    assert abs(gflop - RESNET50_FORWARD_GFLOP) / RESNET50_FORWARD_GFLOP < 0.02, gflop


def test_resnet50_is_v15_and_has_the_reference_layers():
    m = models.load("resnet50").model
    convs = [mod for mod in m.modules() if isinstance(mod, torch.nn.Conv2d)]
    assert len(convs) == 53  # 1 stem + 16 bottlenecks x 3 + 4 projection shortcuts
    assert sum(p.numel() for p in m.parameters()) == 25_557_032  # torchvision resnet50's count
    # v1.5: the stride of a stage's first bottleneck is on its 3x3 convolution
    assert m.layer2[0].conv2.stride == (2, 2) and m.layer2[0].conv1.stride == (1, 1)


@pytest.mark.parametrize("name", models.names())
def test_facts_and_synthetic_inputs(name):
    f = models.facts(name)
    assert f.dataset and f.target_metric and f.source
    assert f.reference_batch > 0 and f.cpu_batch > 0
    w = models.load(name)
    assert isinstance(w, Workload) and w.facts == f
    inputs, target = w.make_inputs(3, torch.device("cpu"))
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    if f.task == "image classification":
        assert inputs[0].shape == (3, *f.input_shape) and inputs[0].dtype == torch.float32
        assert target.dtype == torch.int64 and target.shape == (3,)
        assert w.uses_channels_last
    elif name == "transformer":
        src, tgt_in = inputs
        assert src.shape == (3, f.input_shape[0]) and tgt_in.shape == (3, f.input_shape[1])
        assert src.dtype == tgt_in.dtype == target.dtype == torch.int64
        assert torch.equal(tgt_in[:, 1:], target[:, :-1])  # decoder input = target shifted right
    elif name == "ncf":
        user, item = inputs
        assert user.dtype == item.dtype == torch.int64 and target.shape == (3, 1)
        assert int(user.max()) < 138493 and int(item.max()) < 26744


def test_benchmark_optimizers():
    # SGD with momentum for the CNNs, Adam for the Transformer and NCF (the benchmarks' own choices).
    for name in models.names():
        w = models.load(name) if name in ("resnet9", "ncf") else None
        opt = models.facts(name).optimizer["name"]
        assert opt == ("Adam" if name in ("transformer", "ncf") else "SGD")
        if w is not None:
            o = w.build_optimizer(w.model.parameters())
            assert type(o).__name__ == opt


def _tiny_cnn():
    # no conv bias: BatchNorm would cancel it and its gradient would be exactly zero
    m = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 5),
    )
    return Workload("tiny", m, image_inputs((3, 8, 8), 5), torch.nn.functional.cross_entropy, channels_last=True)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_training_step_trains(dtype):
    w = _tiny_cnn()
    step = TrainingStep(w, 4, "cpu", dtype)
    before = [p.detach().clone() for p in w.model.parameters()]
    step()
    assert torch.isfinite(step.last_loss)
    assert all(not torch.equal(a, b) for a, b in zip(before, w.model.parameters()))
    assert (step.scaler is not None) == (dtype == "fp16")
    assert step.inputs[0].is_contiguous(memory_format=torch.channels_last)
    assert w.model[0].weight.is_contiguous(memory_format=torch.channels_last)


def _profiled(step, steps=1):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    return prof


def test_ranges_nest_and_nvtx_matches_profiler(monkeypatch, tmp_path):
    """Forward ranges nest as the modules do; every NVTX push has its pop on its own thread; the NVTX names
    are the profiler range names; the stem conv's backward range (its input needs no gradient) still
    contains its convolution backward."""
    import nvtx

    pushed, popped = [], []
    monkeypatch.setattr(nvtx, "push_range", lambda name, **kw: pushed.append((threading.get_ident(), name)))
    monkeypatch.setattr(nvtx, "pop_range", lambda **kw: popped.append(threading.get_ident()))
    w = _tiny_cnn()
    ranges = StepRanges(w.model, root_name="Tiny")
    step = TrainingStep(w, 2, "cpu", "fp32", ranges)
    prof = _profiled(step)
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    ev = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    ann = [e for e in ev if e.get("cat") == "user_annotation"]
    names = {e["name"] for e in ann}
    ours = {name for _, name in pushed}
    # PyTorch adds its own optimizer annotations (Optimizer.step#SGD.step); every other range is ours.
    assert ours == {n for n in names if not n.startswith("Optimizer.")}
    assert len(pushed) == len(popped)
    for tid in {t for t, _ in pushed}:
        assert sum(t == tid for t, _ in pushed) == sum(t == tid for t in popped)
    assert set(PHASES) | {"step", LOSS_LAYER, "Tiny", "0", "1", "2", "5"} <= names

    def within(inner, outer):
        return outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1e-3

    fwd = next(e for e in ann if e["name"] == "forward")
    bwd = next(e for e in ann if e["name"] == "backward")
    root_f = next(e for e in ann if e["name"] == "Tiny" and within(e, fwd))
    for leaf in ("0", "1", "2", "5"):
        r = next(e for e in ann if e["name"] == leaf and within(e, fwd))
        assert within(r, root_f)
    conv_bwd_range = next(e for e in ann if e["name"] == "0" and within(e, bwd))
    conv_bwd_op = next(e for e in ev if e.get("cat") == "cpu_op" and e["name"] == "aten::convolution_backward")
    assert within(conv_bwd_op, conv_bwd_range)
    # backward ranges nest too: every leaf's inside the root's (whose input, the image, needs no gradient)
    root_b = next(e for e in ann if e["name"] == "Tiny" and within(e, bwd))
    for leaf in ("0", "1", "2", "5"):
        assert within(next(e for e in ann if e["name"] == leaf and within(e, bwd)), root_b), leaf
    assert ranges.interleaved_closes == 0 and ranges.unmatched_closes == 0


class _SharedEmbedding(torch.nn.Module):
    """One embedding called twice (like the Transformer's source and target embedding)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.mix = torch.nn.Linear(4, 4)

    def forward(self, a, b):
        return self.mix(self.embed(a)).sum() + self.embed(b).sum()


def test_shared_module_backward_ranges_all_close():
    m = _SharedEmbedding()
    ranges = StepRanges(m, nvtx_ranges=False)
    w = Workload("shared", m, lambda batch, device: ((torch.arange(batch) % 10, torch.arange(batch) % 7), None))
    TrainingStep(w, 4, "cpu", "fp32", ranges)()
    assert ranges._tls.backward == [] and ranges._tls.forward == []
    assert ranges.interleaved_closes == 0 and ranges.unmatched_closes == 0


def test_backward_attributed_by_sequence_number():
    """Each module's backward operators map to that module through the autograd sequence numbers its
    forward created (the rule attribution uses), whatever thread or order backward runs in."""
    from microbench.decompose.oprecord import OpRecorder

    w = _tiny_cnn()
    ranges = StepRanges(w.model, root_name="Tiny", nvtx_ranges=False)
    step = TrainingStep(w, 2, "cpu", "fp32", ranges)
    with OpRecorder(ranges) as rec:
        step()
    where = {
        (r.op, r.phase): r.layer
        for r in rec.records
        if r.op
        in (
            "aten::convolution",
            "aten::convolution_backward",
            "aten::native_batch_norm",
            "aten::native_batch_norm_backward",
            "aten::addmm",
            "aten::mm",
        )
    }
    assert where[("aten::convolution", "forward")] == "0"
    assert where[("aten::convolution_backward", "backward")] == "0"
    assert where[("aten::native_batch_norm_backward", "backward")] == "1"
    assert where[("aten::addmm", "forward")] == "5"
    assert where[("aten::mm", "backward")] == "5"
    loss_ops = {r.op for r in rec.records if r.layer == LOSS_LAYER}
    assert "aten::_log_softmax" in loss_ops and "aten::_log_softmax_backward_data" in loss_ops


def test_module_names_must_not_collide_with_phases():
    m = torch.nn.Module()
    m.backward = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="collide"):
        StepRanges(m)


@pytest.mark.parametrize(
    "spec, problem",
    [
        ("nosuch", "unknown model"),
        ("tests.ext_model:nope", "no callable"),
        ("nosuch_pkg.mod:make", "cannot import"),
        ("tests.ext_model:make_wrong", "returned int"),
        ("tests.ext_model:make_raises", "raised RuntimeError"),
        (":make", "expected package.module:factory"),
    ],
)
def test_bad_model_specs(spec, problem):
    with pytest.raises(models.ModelError, match=problem) as e:
        models.load(spec)
    assert "\n" not in e.value.line() and spec in e.value.line()


def test_factory_contract():
    w = models.load("tests.ext_model:make")
    assert isinstance(w, Workload) and w.loss_fn is None and not w.uses_channels_last
    (x,), y = w.make_inputs(2, torch.device("cpu"))
    step = TrainingStep(w, 2, "cpu", "fp32")
    step()  # the default loss: cross-entropy for integer targets
    assert torch.isfinite(step.last_loss)
    with pytest.raises(TypeError, match="scalar loss"):
        models.step.default_loss(torch.ones(2), None)


def test_a_loader_workload_takes_a_new_batch_every_step_and_restarts_its_epochs():
    """Workload.make_loader: each step takes the loader's next batch inside the step range (an epoch's end starts
    the next one); the synthetic augmented images are the same for the same index and differ between indices."""
    from microbench.models.loader import AugmentedImages

    data = AugmentedImages((3, 8, 8), 10, pad=2, length=6)
    (a, ya), (b, _) = data[1], data[2]
    assert a.shape == (3, 8, 8) and torch.equal(a, data[1][0]) and ya == data[1][1] and not torch.equal(a, b)
    assert a.dtype == torch.float32 and float(a.abs().max()) <= 2.0 + 1e-6  # (x / 255 - 0.5) / 0.25
    seen = []

    def make_loader(batch):
        loader = torch.utils.data.DataLoader(data, batch_size=batch, drop_last=True)
        return [(x, y) for x, y in loader]  # two batches of 3: any iterable of (inputs, target)

    wl = Workload(
        "loaded", torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 10)), None, make_loader=make_loader
    )
    step = TrainingStep(wl, batch=3, device="cpu")
    for _ in range(3):
        step()
        seen.append(step.inputs[0].clone())
    assert not torch.equal(seen[0], seen[1]) and torch.equal(seen[0], seen[2])  # the second epoch starts again
    assert torch.isfinite(step.last_loss)


def test_with_workers_copies_a_dataloader_and_refuses_anything_else():
    """models.loader.with_workers: the decompose probe's and `--num-workers`' copy of a step's loader, the same
    dataset, batches and collation made in that many persistent worker processes (0: in the process); a user's own
    iterable has nothing to copy."""
    from microbench.models.loader import augmented_loader, with_workers

    loader = augmented_loader((1, 8, 8), 10, pad=1, flip=False)(4)
    copy = with_workers(loader, 1)
    assert copy.num_workers == 1 and copy.persistent_workers and copy.dataset is loader.dataset
    (x, y), (x0, y0) = next(iter(copy)), next(iter(loader))
    assert x.shape == x0.shape == (4, 1, 8, 8) and y.shape == y0.shape == (4,) and x.dtype == x0.dtype
    in_process = with_workers(copy, 0)
    assert in_process.num_workers == 0 and not in_process.persistent_workers
    assert in_process.batch_sampler is loader.batch_sampler and next(iter(in_process))[0].shape == (4, 1, 8, 8)
    assert with_workers([(x, y)], 1) is None


def test_a_step_can_take_its_batches_from_more_workers():
    """TrainingStep(num_workers=N): the workload's DataLoader with N workers (decompose --num-workers, the dataloader
    finding's fix); a workload whose inputs are made once, or whose loader is not a DataLoader, cannot."""
    from microbench.models.step import TrainingStep
    from tests.findings_models import digits_loader

    step = TrainingStep(digits_loader(), 4, "cpu", num_workers=1)
    assert step.loader.num_workers == 1
    step()
    assert step.last_loss is not None and torch.isfinite(step.last_loss)
    with pytest.raises(ValueError, match="no DataLoader"):
        TrainingStep(
            Workload(
                name="flat",
                model=torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)),
                make_inputs=image_inputs((1, 8, 8), 10),
            ),
            4,
            "cpu",
            num_workers=1,
        )
    wl = digits_loader()
    wl.make_loader = lambda batch: [(torch.zeros(batch, 1, 8, 8), torch.zeros(batch, dtype=torch.long))]
    with pytest.raises(ValueError, match="not a torch DataLoader"):
        TrainingStep(wl, 4, "cpu", num_workers=1)


def test_a_users_module_is_found_in_the_current_directory(tmp_path, monkeypatch):
    """`dawnscope decompose --model mymodel:make` in the folder holding mymodel.py (the console script does not put
    that folder on sys.path as `python -m` does; was: "cannot import 'mymodel'")."""
    import sys
    from pathlib import Path

    source = (Path(__file__).parent / "ext_model.py").read_text()
    (tmp_path / "dawnscope_user_model.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "dawnscope_user_model", raising=False)
    workload = models.load("dawnscope_user_model:make")
    assert isinstance(workload, Workload)
    assert sys.path[-1] == str(tmp_path)  # appended: it shadows no installed package
