"""scripts/finetune_cost.py: the three settings are timed on the inputs their models really take."""

from __future__ import annotations

import json
import sys

from experiments import finetune_cost


def test_it_times_frozen_held_and_released_steps_and_writes_them(tmp_path, monkeypatch) -> None:
    out = tmp_path / "cost.json"
    argv = [
        "finetune_cost.py",
        "--steps",
        "1",
        "--warmup",
        "0",
        "--rounds",
        "1",
        "--batch",
        "2",
        "--length",
        "3",
    ]
    monkeypatch.setattr(sys, "argv", [*argv, "--json", str(out)])
    finetune_cost.main()
    result = json.loads(out.read_text())
    assert set(result["seconds_per_step_median"]) == {"frozen", "held", "released"}
    assert all(len(v) == 1 and v[0] > 0 for v in result["seconds_per_step_all"].values())
    assert result["ratio_to_frozen"]["frozen"] == 1.0 and result["vocabulary"] == finetune_cost.FLICKR8K_WORDS
    per_epoch = result["minutes_per_epoch_of_469_steps"]
    assert per_epoch["held"] == result["seconds_per_step_median"]["held"] * 469 / 60
