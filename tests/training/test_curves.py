"""Every run draws its curves; progress lines when the bar is off; `captioning plot` redraws them."""

import re

import pytest
from PIL import Image

from captioning.cli.main import main
from captioning.training.curves import read_series
from captioning.training.train import train

from support import TINY, compose_train


def test_a_run_draws_its_curves_and_prints_progress_lines(tmp_path, capsys):
    overrides = [
        *TINY,
        "logger=csv",
        "trainer.max_epochs=2",
        "trainer.enable_progress_bar=false",
        "trainer.log_every_n_steps=1",
        "callbacks.progress_lines.every_n_steps=2",
        "model.decoder.alpha_c=1.0",
    ]  # fmt: skip  (λ > 0: the penalty is printed)
    train(compose_train(overrides, tmp_path))
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("step ")]
    assert lines and all("ETA" in line and "min" in line for line in lines)
    assert any("val/CIDEr" in line for line in lines)  # after a validation
    # loss = xent + attention_reg, printed side by side (a loss far above the cross-entropy is the penalty)
    values = dict(re.findall(r"(train/\w+) ([-\d.]+)", lines[-1]))
    assert float(values["train/loss"]) == pytest.approx(
        float(values["train/xent"]) + float(values["train/attention_reg"]), abs=2e-3
    )
    assert lines[-1].startswith("step 30/30 (100%)")  # 24 images x 5 captions / batch 8 = 15 steps, 2 epochs
    (curves,) = tmp_path.rglob("curves.png")
    assert Image.open(curves).size[0] > 300 and f"training curves: {curves}" in out
    (metrics,) = tmp_path.rglob("metrics.csv")
    series = read_series(metrics)
    assert [s for s, _ in series["val/CIDEr"]] == [14, 29] and len(
        series["train/xent"]
    ) == 30  # 0-based steps
    curves.unlink()
    assert main(["plot", str(tmp_path)]) == 0 and curves.is_file()
    assert main(["plot", str(tmp_path / "nothing-here")]) == 2
    assert "no metrics.csv below it" in capsys.readouterr().err
