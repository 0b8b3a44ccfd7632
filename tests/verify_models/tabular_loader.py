"""A three-layer MLP on tabular rows parsed per sample from CSV text in its DataLoader (split, float conversion,
hashed one-hot categories, standardization in Python): a KernelBench-style single-file model with an input
pipeline, written after the dataloader and amp rules (held out of every range's derivation). The step keeps one
intra-op thread, as where several jobs share a machine."""

import random
import zlib

import torch
from torch import nn
from torch.utils.data import DataLoader

from microbench.models.step import Workload

NUMERIC, CATEGORIES, BUCKETS, CLASSES = 24, 8, 64, 2


class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 16

    def __getitem__(self, i):
        rng = random.Random(i)
        line = ",".join(
            [f"{rng.gauss(0, 1) * 10:.4f}" for _ in range(NUMERIC)]
            + [f"c{rng.randrange(500)}" for _ in range(CATEGORIES)]
        )
        fields = line.split(",")
        nums = [float(v) / 10.0 for v in fields[:NUMERIC]]
        hot = [0.0] * (CATEGORIES * BUCKETS)
        for j, v in enumerate(fields[NUMERIC:]):
            hot[j * BUCKETS + zlib.crc32(v.encode()) % BUCKETS] = 1.0
        return torch.tensor(nums + hot), int(sum(nums) > 0)


def workload():
    torch.set_num_threads(1)
    width = NUMERIC + CATEGORIES * BUCKETS
    model = nn.Sequential(nn.Linear(width, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, CLASSES))
    return Workload(
        name="tabular_loader",
        model=model,
        make_inputs=None,
        loss_fn=nn.functional.cross_entropy,
        make_loader=lambda batch: DataLoader(
            Rows(), batch_size=batch, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(0)
        ),
    )
