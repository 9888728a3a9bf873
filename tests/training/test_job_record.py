"""ckpt_path=auto and a finished run (captioning/training/job_record.py): the run stands for the job only if it
was trained with the job's config; another config's run is refused in one line naming the keys, and the
folder's .hydra/ files, which Hydra rewrote with the new job's, are written back from run.json, as after
every refused start in an earlier run's folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from captioning.training.resume import ResumeError
from captioning.training.train import train

from support import TINY, compose_train

RUN = [*TINY, "trainer.max_epochs=1", "trainer.max_steps=4", "ckpt_path=auto"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("finished")
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "config.yaml").write_text("the finished run's config.yaml\n")  # as Hydra wrote it
    (folder / ".hydra" / "overrides.yaml").write_text("- the finished run's overrides\n")
    best = train(compose_train(RUN, folder))
    return folder, best


def _copy(finished: tuple[Path, str], tmp_path: Path) -> Path:
    """The finished run's folder as another place (its run.json pointing at the copied checkpoint)."""
    import shutil

    folder, _ = finished
    copy = tmp_path / "run"
    shutil.copytree(folder, copy)
    summary = json.loads((copy / "run.json").read_text())
    summary["checkpoint"] = summary["checkpoint"].replace(str(folder), str(copy))
    (copy / "run.json").write_text(json.dumps(summary))
    return copy


def test_the_same_job_gets_its_finished_run_back_and_run_json_records_the_job(finished, tmp_path):
    folder = _copy(finished, tmp_path)
    record = json.loads((folder / "run.json").read_text())["job"]
    assert record["config"]["model"]["decoder"]["hidden_dim"] == 16 and set(record["config"]) <= {
        "model", "data", "seed", "init_from"
    }  # fmt: skip
    assert record["hydra_files"]["config.yaml"] == "the finished run's config.yaml\n"
    best = json.loads((folder / "run.json").read_text())["checkpoint"]
    assert train(compose_train(RUN, folder)) == best
    # how the job runs may change between the two: workers, time limits, callbacks
    assert train(compose_train([*RUN, "data.num_workers=1", "trainer.max_time=00:01:00:00"], folder)) == best


def test_a_job_of_another_config_is_refused_naming_the_keys_and_hydra_files_are_written_back(
    finished, tmp_path
):
    folder = _copy(finished, tmp_path)
    hydra = folder / ".hydra"
    for name in ("config.yaml", "overrides.yaml"):
        (hydra / name).write_text("what Hydra wrote for the new job\n")
    with pytest.raises(ResumeError) as err:
        train(compose_train([*RUN, "model.decoder.hidden_dim=24"], folder))
    message = str(err.value)
    assert "holds a finished run of another config (model.decoder.hidden_dim: 16 -> 24)" in message
    assert "its checkpoint is not this job's" in message and "\n" not in message
    assert "written back from its run.json (config.yaml, overrides.yaml)" in message
    assert (hydra / "config.yaml").read_text() == "the finished run's config.yaml\n"  # as they were
    assert (hydra / "overrides.yaml").read_text() == "- the finished run's overrides\n"


def test_a_run_json_from_before_the_record_is_checked_by_the_checkpoints_network(finished, tmp_path):
    folder = _copy(finished, tmp_path)
    summary = json.loads((folder / "run.json").read_text())
    del summary["job"]
    (folder / "run.json").write_text(json.dumps(summary))
    assert (
        train(compose_train([*RUN, "trainer.max_steps=5"], folder)) == summary["checkpoint"]
    )  # same network
    with pytest.raises(ResumeError, match=r"another config \(model\.decoder\.hidden_dim: 16 -> 24\)"):
        train(compose_train([*RUN, "model.decoder.hidden_dim=24"], folder))


def test_in_a_hydra_job_the_overrides_that_differ_come_first(finished, monkeypatch):
    from captioning.training import job_record

    folder, _ = finished
    summary = json.loads((folder / "run.json").read_text())
    summary["job"]["overrides"] = ["debug=tiny", "model.decoder.hidden_dim=16"]
    monkeypatch.setattr(
        job_record,
        "_hydra_overrides",
        lambda: ["debug=tiny", "model.decoder.hidden_dim=24", "ckpt_path=auto"],
    )
    cfg = compose_train([*RUN, "model.decoder.hidden_dim=24"], folder)
    differences = job_record.finished_run_differences(
        cfg, job_record.job_record(cfg), summary, summary["checkpoint"]
    )
    assert differences == [
        "overrides ['model.decoder.hidden_dim=16'] -> ['model.decoder.hidden_dim=24']",
        "model.decoder.hidden_dim: 16 -> 24",
    ]


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        (["ckpt_path=null"], "already holds checkpoints"),  # a fresh run over the earlier run's checkpoints
        (["ckpt_path=last", "model.decoder.hidden_dim=24"], "network config differs"),  # after the data
    ],
    ids=["fresh-run", "resume-of-another-network"],
)
def test_every_refused_start_writes_the_earlier_runs_hydra_files_back(finished, tmp_path, overrides, refusal):
    folder = _copy(finished, tmp_path)
    hydra = folder / ".hydra"
    (hydra / "config.yaml").write_text("what Hydra wrote for the refused command\n")
    with pytest.raises(ResumeError) as err:
        train(compose_train([*RUN[:-1], "trainer.max_steps=8", *overrides], folder))
    message = str(err.value)
    assert refusal in message and "\n" not in message
    assert message.endswith(
        "the folder's .hydra/ files were written back from its run.json (config.yaml, overrides.yaml)"
    )
    assert (hydra / "config.yaml").read_text() == "the finished run's config.yaml\n"


def test_a_failed_start_in_a_new_folder_writes_nothing_back(tmp_path):
    hydra = tmp_path / ".hydra"
    hydra.mkdir()
    (hydra / "config.yaml").write_text("this command's config\n")
    with pytest.raises(ResumeError) as err:
        train(compose_train([*TINY, "ckpt_path=last"], tmp_path))  # nothing to resume: no run.json either
    assert "written back" not in str(err.value)
    assert (hydra / "config.yaml").read_text() == "this command's config\n"
