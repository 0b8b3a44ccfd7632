"""A small CNN on 64x64 images cropped, resized, flipped and colour-jittered per sample in its DataLoader (torch ops
in the step's own process, as torchvision's transforms do): a KernelBench-style single-file model with an input
pipeline, written after the dataloader and amp rules (held out of every range's derivation)."""

import torch
from torch import nn
from torch.utils.data import DataLoader

from microbench.models.step import Workload

SIZE, CLASSES = 64, 10


class Images(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 14

    def __getitem__(self, i):
        gen = torch.Generator().manual_seed(i)
        img = torch.randint(0, 256, (3, 96, 96), dtype=torch.uint8, generator=gen).float() / 255
        side = int(torch.randint(48, 96, (), generator=gen))
        y, x = (int(v) for v in torch.randint(0, 96 - side + 1, (2,), generator=gen))
        img = nn.functional.interpolate(img[None, :, y : y + side, x : x + side], size=(SIZE, SIZE), mode="bilinear")[0]
        if torch.rand((), generator=gen) < 0.5:
            img = img.flip(-1)
        img = (img * torch.empty(3, 1, 1).uniform_(0.7, 1.3, generator=gen)).clamp(0, 1)
        return (img - 0.5) / 0.25, i % CLASSES


def workload():
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, CLASSES),
    )  # fmt: skip
    return Workload(
        name="augment_loader",
        model=model,
        make_inputs=None,
        loss_fn=nn.functional.cross_entropy,
        make_loader=lambda batch: DataLoader(
            Images(), batch_size=batch, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(0)
        ),
    )
