"""`tta run --recipe tuned|standard`: recipes from tta.toml, the second test set (digits' seeded stand-in and
CIFAR-10.1's files), the statistics of the accuracy drop (checked against closed forms), and a short run of
both recipes whose rows carry recipe, test_accuracy, new_test_accuracy and seed."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest
import torch

from microbench.core.errors import InputError
from microbench.tta import cli as tta
from microbench.tta import datasets, stats
from microbench.tta.rules import tta_models


def test_recipes_override_the_model_keys():
    base = tta_models()["digits"]
    tuned, standard = base.with_recipe("tuned"), base.with_recipe("standard")
    assert (tuned.epochs, tuned.lr_values, tuned.precision, tuned.recipe) == (
        base.epochs,
        base.lr_values,
        "bf16",
        "tuned",
    )
    assert standard.epochs > 2 * base.epochs and standard.precision == "fp32"
    assert max(standard.lr_values) < max(base.lr_values)  # a conventional, smaller learning rate
    assert base.with_recipe(None) is base


def test_digits_new_test_set_is_held_out_seeded_and_shifted():
    a, b = datasets.digits(), datasets.digits()
    assert torch.equal(a.x_new, b.x_new) and torch.equal(a.y_new, b.y_new)  # the same procedure, the same images
    assert len(a.y_train) + len(a.y_new) + len(a.y_test) == 1797
    assert len(a.y_new) == 216 and sorted(set(a.y_new.tolist())) == list(range(10))
    train_rows = {row.numpy().tobytes() for row in a.x_train.flatten(1)}
    assert not any(row.numpy().tobytes() in train_rows for row in a.x_new.flatten(1))


def test_warp_moves_pixels_but_keeps_the_digit():
    from sklearn.datasets import load_digits

    img = load_digits().images[:20].astype(np.float32)[:, None]
    warped = datasets.warp_digits(img, np.random.default_rng(0))
    diff = np.abs(warped - img).mean(axis=(1, 2, 3))
    assert (diff > 0).all()  # every image redrawn
    assert np.corrcoef(warped.ravel(), img.ravel())[0, 1] > 0.8  # a small shift, not a new picture


def test_cifar101_reader(tmp_path):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "cifar10.1_v6_data.npy", rng.integers(0, 256, (5, 32, 32, 3), dtype=np.uint8))
    np.save(tmp_path / "cifar10.1_v6_labels.npy", np.array([0, 1, 9, 3, 4]))
    x, y = datasets.read_cifar101(tmp_path)
    data = np.load(tmp_path / "cifar10.1_v6_data.npy")
    assert x.shape == (5, 3, 32, 32) and torch.equal(x[2, 1], torch.from_numpy(data[2, :, :, 1]))
    assert y.tolist() == [0, 1, 9, 3, 4]
    np.save(tmp_path / "cifar10.1_v6_labels.npy", np.array([0, 1, 10, 3, 4]))
    with pytest.raises(InputError, match="labels are not one CIFAR-10 class"):
        datasets.read_cifar101(tmp_path)
    with pytest.raises(InputError, match="missing cifar10.1_v6_data.npy"):
        datasets.read_cifar101(tmp_path / "nothing")


def test_mean_ci95_closed_form():
    values = [0.1, 0.2, 0.4]  # t(0.975, 2) = 4.302652729911275
    mean, lo, hi = stats.mean_ci95(values)
    half = 4.302652729911275 * statistics.stdev(values) / math.sqrt(3)
    assert (mean, lo, hi) == pytest.approx((0.7 / 3, 0.7 / 3 - half, 0.7 / 3 + half))
    assert stats.mean_ci95([0.3])[1:] == (None, None)


def test_compare_drops_is_welchs_one_sided_test():
    tuned = [{"test_accuracy": 0.9, "new_test_accuracy": n} for n in (0.80, 0.78, 0.82)]
    standard = [{"test_accuracy": 0.9, "new_test_accuracy": n} for n in (0.86, 0.85, 0.87, 0.86)]
    c = stats.compare_drops(tuned, standard)
    a, b = [0.10, 0.12, 0.08], [0.04, 0.05, 0.03, 0.04]
    va, vb = statistics.variance(a) / 3, statistics.variance(b) / 4
    t = (statistics.fmean(a) - statistics.fmean(b)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)  # Welch-Satterthwaite
    from scipy.stats import t as student_t

    assert c.t == pytest.approx(t) and c.p_value == pytest.approx(float(student_t.sf(t, df)))
    assert c.difference == pytest.approx(statistics.fmean(a) - statistics.fmean(b))


@pytest.fixture(scope="module")
def two_recipes(tmp_path_factory):
    out = tmp_path_factory.mktemp("recipes")
    assert (
        tta.main(
            [
                "run",
                "--model",
                "digits",
                "--recipe",
                "tuned,standard",
                "--seeds",
                "2",
                "--epochs",
                "2",
                "--threads",
                "1",
                "--target-accuracy",
                "0.5",
                "--device",
                "cpu",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


@pytest.mark.slow
def test_both_recipes_rows_and_comparison(two_recipes):
    from microbench.core import device as devmod

    doc = json.loads((two_recipes / "tta.json").read_text())
    assert doc["schema"] == "dawnscope.tta-recipes/1" and [d["recipe"] for d in doc["recipes"]] == ["tuned", "standard"]
    tuned = doc["recipes"][0]
    assert tuned["precision"] == ("bf16" if devmod.cpu_device().native_bf16 else "fp32")
    for d in doc["recipes"]:
        g = d["generalization"]
        drops = [r["test_accuracy"] - r["new_test_accuracy"] for r in d["runs"]]
        assert g["drop"] == pytest.approx(statistics.fmean(drops)) and g["runs"] == 2
    c = doc["comparison"]
    assert c["tuned_drop"] == pytest.approx(doc["recipes"][0]["generalization"]["drop"])
    rows = [r for r in json.loads((two_recipes / "results.json").read_text())["results"] if r["layer"]]
    assert [(r["params"]["recipe"], r["params"]["seed"]) for r in rows] == [
        ("tuned", 0),
        ("tuned", 1),
        ("standard", 0),
        ("standard", 1),
    ]
    for r in rows:
        assert {"test_accuracy", "new_test_accuracy"} <= set(r["params"])
        assert 0 <= r["params"]["new_test_accuracy"] <= 1
    assert {r["shape"].rsplit("/", 1)[-1] for r in rows} == {"tuned", "standard"}


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--recipe", "fastest"], "--recipe = 'fastest': unknown recipe"),
        (["--recipe", "tuned,tuned"], "a recipe named twice"),
    ],
)
def test_bad_recipe_is_one_line(argv, words, capsys, tmp_path):
    assert tta.main(["run", "--model", "digits", "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err
