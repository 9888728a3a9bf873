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


def test_a_resumed_runs_versions_are_joined_the_later_one_replacing_steps_trained_again(tmp_path):
    from captioning.training.curves import run_series

    def version(n: int, steps: range, val_steps: tuple[int, ...]) -> None:
        folder = tmp_path / "csv" / f"version_{n}"
        folder.mkdir(parents=True)
        rows = ["epoch,step,train/xent,val/CIDEr"]
        for step in steps:
            rows.append(f"0,{step},{n + step / 100},")
            if step in val_steps:
                rows.append(f"0,{step},,{n + step / 10}")
        (folder / "metrics.csv").write_text("\n".join(rows) + "\n")

    version(0, range(10), (4, 9))  # killed after step 9; its last.ckpt was saved at step 6
    version(1, range(7, 13), (12,))  # resumed: steps 7-9 trained again
    series = run_series(tmp_path / "csv" / "version_1" / "metrics.csv")
    assert series["train/xent"] == [(s, s / 100) for s in range(7)] + [(s, 1 + s / 100) for s in range(7, 13)]
    assert series["val/CIDEr"] == [(4, 0.4), (12, 1 + 1.2)]  # step 9's validation was of the steps replaced
    assert run_series(tmp_path / "csv" / "version_0" / "metrics.csv")["val/CIDEr"] == [(4, 0.4), (9, 0.9)]
