"""Multi-process training from the Hydra entry point (DDP over gloo, 2 CPU processes) and trainer configs.

The validation scores of a DDP run must be those of the whole split scored once (captions gathered
from every rank), not an average of per-rank scores: one process validating the same checkpoint has to
give exactly the same numbers.
"""

from __future__ import annotations

import csv
import json
import os
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from statistics import mean

import hydra
import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DistributedSampler

from captioning.checkpoints.load import load_checkpoint
from captioning.decoding import generate
from captioning.inference.captioner import Captioner
from captioning.losses import caption_loss
from captioning.metrics.coco import score_captions
from captioning.models.decoders.base import shift_inputs
from captioning.training.build import build_net
from captioning.training.lit_module import CaptionLitModule
from captioning.training.train import train

from support import DECODERS, TINY, compose_train
from support.preempt import read_draws, read_streams

METRICS = ["Bleu_1", "Bleu_4", "CIDEr"]
VAL_IMAGES = 7  # odd: the DistributedSampler pads rank 1 with a duplicate of image 0
DDP = [
    "trainer=ddp",
    "trainer.accelerator=cpu",
    "trainer.precision=32-true",
    "trainer.devices=2",
]
RUN = [
    *TINY,
    f"data.val.num_images={VAL_IMAGES}",
    f"model.val_metrics=[{','.join(METRICS)}]",
    "callbacks.model_checkpoint.monitor=val/CIDEr",  # the scenes' val/scene_score is not among METRICS
    "logger=csv",
    "trainer.max_epochs=1",
    "+trainer.limit_train_batches=2",
    "trainer.enable_progress_bar=false",
]


def read_val_row(run_dir) -> dict[str, float]:
    path = next((run_dir / "csv").rglob("metrics.csv"))
    rows = [row for row in csv.DictReader(path.open()) if row.get("val/CIDEr")]
    assert len(rows) == 1, f"{path}: expected one validation row, got {rows}"
    return {m: float(rows[0][f"val/{m}"]) for m in METRICS}


def validate_one_process(checkpoint, cfg) -> dict[str, float]:
    loaded = load_checkpoint(checkpoint)
    module = CaptionLitModule(
        encoder=loaded.net.encoder,
        decoder=loaded.net.decoder,
        vocab=loaded.vocab.to_dict(),
        val_metrics=METRICS,
        decoding=loaded.decoding,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    (metrics,) = trainer.validate(module, datamodule=hydra.utils.instantiate(cfg.data), verbose=False)
    return {m: metrics[f"val/{m}"] for m in METRICS}


@pytest.mark.slow
def test_ddp_from_the_hydra_entry_point_scores_the_whole_split_once(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "offline"}
    cmd = [sys.executable, "-m", "captioning.training.train", *DDP, *RUN, f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "distributed_backend=gloo" in output and "Starting with 2 processes" in output, output[-4000:]
    # Rank 1 is the entry point re-launched by Lightning, logging into the same Hydra run dir.
    assert (run_dir / "train_ddp_process_1.log").is_file()

    ddp_scores = read_val_row(run_dir)  # logged by rank 0 at the end of epoch 0
    checkpoint = run_dir / "checkpoints" / "last.ckpt"  # the weights that validation used
    cfg = compose_train(RUN, tmp_path / "single")
    assert validate_one_process(checkpoint, cfg) == ddp_scores  # exactly, not approximately

    # The same numbers from the captions directly; and a per-rank average would have been different.
    model = load_checkpoint(checkpoint)
    dm = hydra.utils.instantiate(cfg.data)
    val = dm.sources["val"]
    captions = Captioner(model).caption([val.image(i) for i in range(len(val))])
    hyps = {i: c.caption for i, c in enumerate(captions)}
    refs = {i: list(val.captions(i)) for i in range(len(val))}
    direct = score_captions(refs, hyps, metrics=METRICS, tokenizer="simple")
    assert ddp_scores == pytest.approx(direct, rel=1e-6)  # logged values are float32
    per_rank = []
    for rank in range(2):
        ids = sorted(set(DistributedSampler(range(VAL_IMAGES), num_replicas=2, rank=rank, shuffle=False)))
        per_rank.append(
            score_captions(
                {i: refs[i] for i in ids}, {i: hyps[i] for i in ids}, metrics=METRICS, tokenizer="simple"
            )
        )
    # After 2 steps the captions are poor (CIDEr may be 0 on both sides); BLEU-1 is not, and corpus BLEU
    # of the whole split is not the mean of the halves' BLEU.
    assert ddp_scores["Bleu_1"] > 0
    assert max(abs(mean(s[m] for s in per_rank) - ddp_scores[m]) for m in METRICS) > 1e-4


# 24 scenes x 5 captions over 2 processes of batch 8: 8 steps an epoch, two epochs
RESUMED_RUN = [*TINY, "trainer.max_epochs=2", "trainer.enable_progress_bar=false"]
RESUMED_STEPS = 16


def _ddp_run(
    run_dir: Path,
    warn_at: int = -1,
    trainer: list[str] = DDP,
    signal: str = "SIGUSR1",
    rank: int = 0,
    extra: tuple[str, ...] = (),
    expect: tuple[int, ...] = (0, 143),
) -> int:
    """The 2-process run (or ``trainer``'s) from the entry point in ``run_dir`` with the overrides ``extra``,
    ``signal`` (SLURM's warning) sent to global rank ``rank`` at step ``warn_at``; its exit status, one of
    ``expect`` (else the test fails with the run's output)."""
    tests = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")]),
    }
    callback = (
        f"{{_target_: support.preempt.SignalAt, step: {warn_at}, draws: {run_dir}.draws, signal: {signal}, "
        f"rank: {rank}}}"
    )
    cmd = [
        sys.executable,
        "-m",
        "captioning.training.train",
        *trainer,
        *RESUMED_RUN,
        f"+callbacks.signal_at={callback}",
        "allowed_targets=[support]",
        f"hydra.run.dir={run_dir}",
        *extra,
    ]
    proc = subprocess.run(cmd, cwd=run_dir.parent, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode in expect, (proc.stdout + proc.stderr)[-4000:]
    assert not (run_dir.parent / '"').exists()  # the launcher's quoted hydra.run.dir, read as Hydra reads it
    (run_dir.parent / f"{run_dir.name}.stderr").write_text(proc.stderr)
    return proc.returncode


@pytest.mark.slow
def test_a_requeued_ddp_run_resumes_mid_epoch_and_ends_with_the_uninterrupted_runs_weights(
    tmp_path, fake_slurm, monkeypatch
):
    """Each process goes on with its share of the interrupted epoch (data/resumable.py: Lightning keeps the
    resumable sampler instead of its DistributedSampler, which started the epoch again) and with its own
    random generators (callbacks/exact_resume.py). Warned, not preempted: SlurmRequeue saves where every
    rank is at one batch's end (a SIGTERM with no warning meets the ranks wherever they are, and Lightning's
    handler broadcasts from there)."""
    step = random.Random().randrange(1, RESUMED_STEPS - 2)  # not the run's generator: another step each time
    plain, requeued = tmp_path / "uninterrupted", tmp_path / "requeued"
    assert _ddp_run(requeued, step) == 143  # the requeue's SIGTERM
    assert fake_slurm.read_text() == "requeue 4242\n"
    saved = torch.load(requeued / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]
    assert step <= saved <= step + 2, step  # the warning's batch, the next one, or after an epoch's end
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # the job's own command resumes (requeue.py)
    assert _ddp_run(requeued) == 0
    monkeypatch.delenv("SLURM_RESTART_COUNT")
    monkeypatch.delenv("SLURM_JOB_ID")
    assert _ddp_run(plain) == 0

    for rank in (0, 1):
        theirs, mine = read_draws(f"{plain}.draws", rank), read_draws(f"{requeued}.draws", rank)
        assert sorted(theirs) == sorted(mine) == list(range(RESUMED_STEPS)), (step, rank)
        assert all(mine[s] == theirs[s] for s in theirs), (step, rank)  # the same images on each process
    # Each process draws its own random numbers (training/distributed.py; they were the same on every rank:
    # one dropout mask for all GPUs), from one shared order of each epoch: its 120 pairs split 60 and 60, each
    # scene's 5 captions once (an order of each process's own would draw some twice and miss others)
    streams = [read_streams(f"{plain}.draws", rank) for rank in (0, 1)]
    assert all(streams[0][s] != streams[1][s] for s in range(RESUMED_STEPS))
    draws = [read_draws(f"{plain}.draws", rank) for rank in (0, 1)]
    for epoch in (range(8), range(8, 16)):
        counts = Counter(i for ranked in draws for s in epoch for i in ranked[s])
        assert sorted(counts.values()) == [5] * 24, counts
    ends = [torch.load(run / "checkpoints" / "last.ckpt", weights_only=True) for run in (plain, requeued)]
    assert ends[0]["global_step"] == ends[1]["global_step"] == RESUMED_STEPS
    for key, value in ends[0]["state_dict"].items():
        assert torch.equal(ends[1]["state_dict"][key], value), (key, step)
    moments = [end["optimizer_states"][0]["state"] for end in ends]
    assert moments[0].keys() == moments[1].keys()
    for index, state in moments[0].items():
        assert all(torch.equal(moments[1][index][k], v) for k, v in state.items()), (index, step)


@pytest.mark.slow
def test_a_requeued_ddp_run_whose_sigterm_reaches_one_process_first_stops_every_process(tmp_path, fake_slurm):
    """After the requeue the processes wait for SLURM's SIGTERM, and leave that wait together on any one's
    (callbacks/slurm_requeue.py). One that left alone went on to the next collective and waited there for
    the others, still waiting for a SIGTERM of their own, past the strategy's timeout: a crash instead of
    a stop, here with the SIGTERM reaching rank 1 (rank 0's child, Lightning launched it) alone."""
    fake_slurm.parent.joinpath("bin", "scontrol").write_text(
        f'#!/bin/sh\necho "$@" >> {fake_slurm}\n'
        "(sleep 0.5; pkill -TERM -P $PPID -f captioning.training.train) >/dev/null 2>&1 &\n"
    )
    run = tmp_path / "run"
    # the wait longer than the collectives' timeout, as by default (600 s, 300 s); 60 s for the rendezvous
    extra = ("+callbacks.slurm_requeue.wait_s=200", "trainer.strategy.timeout_s=60")
    assert _ddp_run(run, 3, extra=extra) == 143
    assert fake_slurm.read_text() == "requeue 4242\n"
    stderr = (tmp_path / "run.stderr").read_text()
    assert len(set(re.findall(r"stopped by SIGTERM at step (\d+)", stderr))) == 1, stderr[-3000:]
    assert stderr.count("stopped by SIGTERM at step") == 2  # each process, at the same step


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_validation_is_scored_by_rank_zero_alone_and_its_failure_stops_every_rank(tmp_path, rank):
    """The whole split's captions are on every rank after the gather; rank 0 scores them and shares the
    scores (one METEOR JVM, not one per GPU). The scorer broken on rank 1 changes nothing; broken on rank 0,
    every rank stops with its error (rank 1 used to wait for the scores' collective forever or crash in it)."""
    run = tmp_path / "run"
    broken = f"+callbacks.fail_scoring={{_target_: support.scoring.FailScoringOn, rank: {rank}}}"
    scored = [
        f"model.val_metrics=[{','.join(METRICS)}]",
        "callbacks.model_checkpoint.monitor=val/CIDEr",
        broken,
    ]
    code = _ddp_run(run, extra=(*scored,), expect=(0,) if rank else (1,))
    stderr = (tmp_path / "run.stderr").read_text()
    if rank:
        assert code == 0 and "scorer broken" not in stderr
        assert (
            any((run / "checkpoints").glob("*CIDEr*.ckpt")) or (run / "checkpoints" / "last.ckpt").is_file()
        )
    else:
        assert "scorer broken on rank 0 (FailScoringOn)" in stderr  # rank 0's own error
        assert "validation scoring failed on global rank 0: RuntimeError: scorer broken on rank 0" in stderr


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_a_sigterm_to_one_process_stops_every_process_after_one_batch_with_its_checkpoint(tmp_path, rank):
    """A preemption's SIGTERM reaches the processes at different points of a step (or one process only,
    ``kill``): the stop and its save are agreed at a batch's end (callbacks/periodic_checkpoint.py). Sent
    to rank 1 alone, Lightning's handler and the per-process save met no partner: the run crashed in a
    collective, with no checkpoint of where it was."""
    step = random.Random().randrange(1, RESUMED_STEPS - 1)  # not the run's generator: another step each time
    run = tmp_path / "run"
    assert _ddp_run(run, step, signal="SIGTERM", rank=rank) == 143
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == step
    for r in (
        0,
        1,
    ):  # both processes trained up to the batch the signal ended (its step: global_step at start)
        assert sorted(read_draws(f"{run}.draws", r)) == list(range(step)), (step, r)
    assert _ddp_run(run, trainer=[*DDP, "ckpt_path=last"]) == 0  # resumed from there to the end
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == RESUMED_STEPS


@pytest.mark.slow
def test_a_sigterm_to_one_process_during_validation_stops_every_process_there(tmp_path):
    """The stop is agreed at validation batch ends too: with two validation batches a process, a SIGTERM to
    rank 1 after the first ends the validation on both (Lightning stops there), and the run resumes."""
    run = tmp_path / "run"
    extra = ("data.eval_batch_size=2",)  # 8 validation images: 4 a process, two batches each
    code = _ddp_run(run, 8, signal="SIGTERM", rank=1, extra=extra + ("+callbacks.signal_at.val_batch=0",))
    assert code == 143
    stderr = (tmp_path / "run.stderr").read_text()
    assert stderr.count("stopped by SIGTERM at step 8") == 2  # each process, at the same step
    for r in (0, 1):  # no process trained on past the validation
        assert sorted(read_draws(f"{run}.draws", r)) == list(range(8)), r
    assert _ddp_run(run, trainer=[*DDP, "ckpt_path=last"], extra=extra) == 0
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == RESUMED_STEPS


@pytest.mark.slow
def test_a_ddp_run_requeued_onto_one_process_trains_exactly_the_rest_of_its_epoch(
    tmp_path, fake_slurm, monkeypatch
):
    """Saved by 2 processes mid-epoch, resumed by 1 (a requeue onto fewer GPUs): the checkpoint counts the
    epoch order's positions trained, so the one process trains the rest of that order, every caption of
    the epoch once (data/resumable.py); it used to skip only its own share's batch count, training part
    of the epoch twice."""
    step = random.Random().randrange(1, 6)  # inside the first epoch of 8 steps a process
    requeued = tmp_path / "requeued"
    assert _ddp_run(requeued, step) == 143
    saved = torch.load(requeued / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    one = ["trainer.accelerator=cpu", "trainer.precision=32-true", "trainer.devices=1"]
    assert _ddp_run(requeued, trainer=one) == 0
    before = [ids for rank in (0, 1) for s, ids in read_draws(f"{requeued}.draws", rank).items() if s < saved]
    after_steps = -(-(120 - saved * 16) // 8)  # the 120 - 16·saved captions left, in batches of 8
    resumed = read_draws(f"{requeued}.draws", 0)  # rank 0 of the second run wrote after the first's lines
    after = [resumed[s] for s in range(saved, saved + after_steps)]
    counts = Counter(i for ids in before + after for i in ids)
    # each scene as often as it has captions (5): none drawn twice or left out, as far as the images tell
    assert sorted(counts.values()) == [5] * 24, (step, saved)
    end = torch.load(requeued / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]
    assert end == saved + after_steps + 15  # the second epoch: 120 captions in batches of 8, one process


def test_trainer_configs_compose():
    gpu = compose_train(["trainer=gpu"]).trainer
    assert (gpu.accelerator, gpu.devices, gpu.precision) == ("gpu", 1, "bf16-mixed")
    ddp = compose_train(["trainer=ddp", "trainer.devices=4", "trainer.num_nodes=2"]).trainer
    assert (ddp.devices, ddp.num_nodes, ddp.precision) == (4, 2, "bf16-mixed")
    assert (
        ddp.strategy._target_ == "captioning.training.distributed.DDPStrategy"
    )  # fails fast (test_rendezvous)
    assert ddp.max_epochs == compose_train([]).trainer.max_epochs  # everything else from trainer/cpu.yaml


@pytest.mark.parametrize("decoder", DECODERS)
def test_bf16_autocast_step_and_decoding_on_cpu(decoder):
    """trainer=gpu's bf16-mixed precision, on CPU autocast: the loss and decoding stay well-formed."""
    torch.manual_seed(0)
    cfg = compose_train([f"model/decoder={decoder}", *TINY, "model.decoder.vocab_size=12", "trainer=gpu"])
    trainer = hydra.utils.instantiate(cfg.trainer, accelerator="cpu", logger=False, enable_progress_bar=False)
    net = build_net(cfg.model, 12)
    tokens = torch.tensor([[1, 4, 5, 6, 2, 0], [1, 7, 8, 2, 0, 0]])  # (B, T+1) <start> .. <end> <pad>
    inputs, targets = shift_inputs(tokens)
    with trainer.precision_plugin.forward_context():
        output = net(torch.rand(2, 3, 96, 96), inputs)
        terms = caption_loss(output, targets, net.decoder)
        net.eval()
        generated = generate(net.decoder, net.encode(torch.rand(2, 3, 96, 96)), num_beams=2, max_new_tokens=5)
    assert output.logits.dtype == torch.bfloat16  # autocast really ran in bf16
    assert torch.isfinite(terms.loss)
    terms.loss.backward()
    assert all(
        p.grad.dtype == torch.float32 for p in net.parameters() if p.grad is not None
    )  # fp32 master weights
    assert generated.tokens.shape[0] == 2 and torch.isfinite(generated.score).all()
    live = generated.attention.float().sum(-1)  # (B, T): 1 on generated tokens, 0 after <end>
    assert ((live - 1).abs() < 2e-2).logical_or(live == 0).all()


def test_bf16_training_run_on_cpu(tmp_path):
    cfg = compose_train(
        [
            *TINY,
            "trainer=gpu",
            "trainer.accelerator=cpu",
            "trainer.max_epochs=1",
            "+trainer.limit_train_batches=2",
            "trainer.enable_progress_bar=false",
        ],
        tmp_path,
    )
    best = train(cfg)
    model = load_checkpoint(best)  # fp32 weights in the checkpoint, whatever the training precision
    assert all(p.dtype == torch.float32 for p in model.net.parameters())


@pytest.mark.parametrize("decoder", DECODERS)
def test_bf16_true_trains_and_validates_every_decoder(decoder, tmp_path):
    # Weights in bf16 and the default dtype bf16 inside a step: float32 position codes and the n-gram
    # blocking's counts must meet them in their dtype (a dtype error at the first step or validation).
    cfg = compose_train(
        [*TINY, f"model/decoder={decoder}", "trainer.precision=bf16-true", "trainer.max_epochs=1",
         "+trainer.limit_train_batches=2", "model.decoding.no_repeat_ngram_size=2",
         "trainer.enable_progress_bar=false"],
        tmp_path,
    )  # fmt: skip
    train(cfg)
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["finished"] and run["global_step"] == 2
