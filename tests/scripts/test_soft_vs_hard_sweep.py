"""scripts/soft_vs_hard_sweep.py, the whole comparison as one command: the chain it plans for each pair (job
numbers as one captioning-train -m sweep numbers them, the readings each decoder takes, the records and the
reports), and how its chains run: in order, a failing step stopping only its own chain, named with its log."""

from __future__ import annotations

import sys

import pytest

from support.helpers import load_script

sweep = load_script("soft_vs_hard_sweep")


def planned(capsys, argv: list[str]) -> dict[str, list[str]]:
    """chain name -> its printed steps (``name: command``), from the dry run."""
    assert sweep.main([*argv, "--dry-run"]) == 0
    chains, current = {}, None
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("# "):
            current = chains.setdefault(line[2:], [])
        elif current is not None:
            current.append(line)
    return chains


@pytest.mark.parametrize("experiment", sweep.EXPERIMENTS)
def test_each_decoder_gets_its_job_number_and_the_readings_its_attention_declares(
    tmp_path, capsys, experiment
):
    chains = planned(
        capsys, ["--root", str(tmp_path), "--only", "seed=2", "--only", f"experiment={experiment}"]
    )
    assert list(chains) == [f"{experiment}-seed2", "when every chain has ended"]
    steps = chains[f"{experiment}-seed2"]
    job = 2 * 4 + sweep.EXPERIMENTS.index(experiment)  # seed-major, as `-m seed=0,1,2 experiment=a,b,c,d`
    assert [s.split(":")[0] for s in steps][:1] == ["cross-entropy"]
    assert f"seed=2 experiment={experiment}" in steps[0] and f"hydra.sweep.subdir={job}" in steps[0]
    assert f"hydra.sweep.dir={(tmp_path / 'xe').resolve()}" in steps[0] and "ckpt_path=auto" in steps[0]
    hard = experiment in ("flickr8k_hard_reinforce", "flickr8k_hard_gumbel")
    for objective in ("cross-entropy", "SCST"):
        evaluations = [s for s in steps if s.startswith(f"evaluate {objective}:")]
        assert len(evaluations) == (4 if hard else 3)
        assert all(f"--only seed=2 --only experiment={experiment}" in s for s in evaluations)
        assert any("hard_attention=expected" in s for s in evaluations) == hard
    scst = next(s for s in steps if s.startswith("SCST:"))
    assert f"--out {tmp_path / 'scst'} --only seed=2 --only experiment={experiment}" in scst
    assert scst.endswith(" ".join(sweep.SCST_RECIPE))
    assert not any(s.startswith("record") for s in steps)  # no --record: nothing written to the docs


def test_the_grid_its_filters_and_the_records(tmp_path, capsys):
    record = tmp_path / "docs"
    chains = planned(
        capsys, ["--root", str(tmp_path), "--only", "experiment=flickr8k_soft", "--record", str(record)]
    )
    assert list(chains) == [
        "flickr8k_soft-seed0",
        "flickr8k_soft-seed1",
        "flickr8k_soft-seed2",
        "when every chain has ended",
    ]
    assert [s.split(":")[0] for s in chains.pop("when every chain has ended")] == ["report xe", "report scst"]
    assert [next(s for s in steps if "hydra.sweep.subdir=" in s).split("subdir=")[1].split()[0]
            for steps in chains.values()] == ["0", "4", "8"]  # fmt: skip
    last = chains["flickr8k_soft-seed2"]
    assert last[-2].startswith("record cross-entropy:") and last[-2].endswith(f"--out {record / 'xe'}")
    assert last[-1].startswith("record SCST:")
    assert last[-1].endswith(f"--out {record / 'scst'} --alias {(tmp_path / 'xe').resolve()}=<xe sweep>")
    reports = sweep.report_steps(sweep.parse_args(["--root", str(tmp_path), "--record", str(record)]))
    assert [name for name, _ in reports] == ["report xe", "report scst"]
    assert reports[1][1][2:] == [str(record / "scst"), "--data", "flickr8k", "--baseline", "flickr8k_soft",
                                 "--out", str(record / "report" / "scst")]  # fmt: skip
    grid = planned(capsys, ["--root", str(tmp_path), "--seeds", "1,2"])
    assert len(grid) == 8 + 1 and list(grid)[:2] == ["flickr8k_soft-seed1", "flickr8k_hard_reinforce-seed1"]


def step(code: int, text: str) -> list[str]:
    return [sys.executable, "-c", f"print({text!r}); raise SystemExit({code})"]


def test_a_failing_step_stops_its_chain_only_and_is_named_with_its_log(tmp_path, capsys, monkeypatch):
    chains = {
        "flickr8k_soft": [("cross-entropy", step(0, "xe soft")), ("SCST", step(0, "scst soft"))],
        "flickr8k_transformer": [("cross-entropy", step(0, "xe tr")), ("SCST", step(3, "scst broke")),
                                 ("evaluate SCST", step(0, "never"))],
    }  # fmt: skip
    monkeypatch.setattr(sweep, "chain", lambda args, e, s, n: chains[e])
    monkeypatch.setattr(sweep, "report_steps", lambda args: [("report xe", step(0, "report"))])
    argv = [
        "--root",
        str(tmp_path),
        "--only",
        "seed=0",
        "--experiments",
        "flickr8k_soft,flickr8k_transformer",
    ]
    assert sweep.main([*argv, "--parallel", "2"]) == 1
    printed = capsys.readouterr().out
    assert "flickr8k_soft-seed0: done" in printed
    assert "flickr8k_transformer-seed0: FAILED at SCST (exit 3)" in printed and "scst broke" in printed
    log = (tmp_path / "logs" / "flickr8k_transformer-seed0.log").read_text()
    assert "xe tr" in log and "scst broke" in log and "never" not in log
    assert "report" in (tmp_path / "logs" / "report.log").read_text()  # the reports still run


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--only", "decoder=soft"], "--only decoder=...: expected seed=S or experiment=E"),
        (["--only", "seed"], "--only 'seed': expected NAME=VALUE"),
        (["--parallel", "0"], "--parallel 0: expected 1 or more"),
        (["--seeds", "one"], "invalid literal"),
    ],
)
def test_bad_arguments_get_one_clear_line(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit):
        sweep.main(["--root", str(tmp_path), *argv])
    assert message in capsys.readouterr().err


def test_a_filter_outside_the_grid_is_named(tmp_path):
    with pytest.raises(SystemExit, match=r"no pair of the grid has --only \{'seed': '7'\}"):
        sweep.main(["--root", str(tmp_path), "--only", "seed=7", "--dry-run"])
