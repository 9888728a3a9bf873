"""The COCO recipe (experiment=coco_*, docs/guides/coco.md) on a Karpathy-format replica, on the CPU.

Every coco_* experiment composes at its 8-GPU sizes and trains a few steps on the replica
(tests/support/coco_replica.py) with tiny overrides; the soft one is resumed (ckpt_path=last continues the step
count) and fine-tuned by SCST from its XE checkpoint; two CPU ranks (gloo) share one feature cache; and a
2-node launch (torchrun, one rank per "node") is simulated on this machine.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from captioning.data.readers import read_karpathy
from captioning.models.encoders import EfficientNetLiteEncoder
from captioning.training.train import train

from support import compose_train
from support.coco_replica import SPLITS, replica_overrides, write_karpathy_replica

EXPERIMENTS = ["coco_soft", "coco_hard_reinforce", "coco_hard_gumbel", "coco_transformer"]
TESTS = Path(__file__).resolve().parents[1]  # tests/, where the support package is
STEPS = 2  # optimizer steps per epoch in the runs below


def tiny(experiment: str) -> list[str]:
    """The experiment at seconds-on-a-CPU sizes: one process, fp32, 64 px images, 16-wide decoder."""
    decoder = ["model.decoder.embed_dim=16"]
    if experiment != "coco_transformer":
        decoder += ["model.decoder.hidden_dim=16", "model.decoder.attention.attention_dim=16"]
    else:
        decoder += ["model.decoder.ff_dim=16", "model.decoder.num_layers=1"]
    return [
        f"experiment={experiment}",
        "trainer.accelerator=cpu",
        "trainer.devices=1",
        "trainer.strategy=auto",
        "trainer.precision=32-true",  # bf16-mixed is for the GPUs
        "trainer.max_epochs=1",
        f"trainer.limit_train_batches={STEPS}",
        "trainer.enable_progress_bar=false",
        "~logger",
        "callbacks.lr_monitor=null",
        "data.feature_cache.device=cpu",
        "data.feature_cache.progress=false",
        "data.image_size=64",
        "data.batch_size=8",
        "data.eval_batch_size=4",
        "data.num_workers=0",
        "data.min_word_count=1",
        "model.encoder.grid_size=3",
        "model.decoding.max_new_tokens=6",
        *decoder,
    ]


@pytest.fixture(scope="module")
def replica(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("coco")
    write_karpathy_replica(root)
    return root


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")  # shared by the in-process runs: one encoder, one cache


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def encoder_head(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The trained weights (not BN statistics) of the encoder's head in a Lightning checkpoint."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    return {
        k: v
        for k, v in state.items()
        if k.startswith("net.encoder.head.") and "running" not in k and "num_batches" not in k
    }


def global_step(checkpoint: Path) -> int:
    return torch.load(checkpoint, map_location="cpu", weights_only=True)["global_step"]


def test_experiments_compose_at_their_8_gpu_sizes():
    for experiment in EXPERIMENTS:
        cfg = compose_train([f"experiment={experiment}"])
        t, d, m = cfg.trainer, cfg.data, cfg.model
        assert (t.strategy.find_unused_parameters, t.devices, t.num_nodes, t.precision) == (
            True,  # the held encoder stages of epoch 0 get no gradient
            8,
            1,
            "bf16-mixed",
        ), experiment
        assert d.train.records._target_.endswith("read_karpathy") and d.test.records.split == "test"
        assert (d.batch_size, d.image_size, d.min_word_count) == (64, 224, 5)
        assert (m.encoder.variant, m.encoder.freeze, m.encoder.stage) == ("lite1", True, "head")
        # fine-tuning from a stated epoch: stage7 + head from epoch 1, at a tenth of the rate, BN kept
        assert (m.encoder.fine_tune_from, m.encoder.bn_eval, m.encoder.lr_scale) == ("stage7", True, 0.1)
        assert cfg.callbacks.unfreeze_encoder.at_epoch == 1
        assert "encoder" not in d.feature_cache  # the model's own encoder makes the cache
        assert cfg.callbacks.model_checkpoint.monitor == cfg.callbacks.early_stopping.monitor == "val/CIDEr"
        # The LR rule of coco_base.yaml: the Flickr8k rate at B = 64 x sqrt(global batch / 64).
        global_batch = d.batch_size * t.devices * t.num_nodes
        reference = 5e-4 if experiment == "coco_transformer" else 1e-3
        assert global_batch == 512
        assert m.optimizer.lr == pytest.approx(reference * math.sqrt(global_batch / 64), rel=2e-3)
        assert m.scheduler.warmup_steps == 1000
    # The soft-vs-hard experiments change only the attention layer (and eq. 14, off for hard attention).
    soft = compose_train(["experiment=coco_soft"]).model.decoder
    for hard in ("coco_hard_reinforce", "coco_hard_gumbel"):
        decoder = compose_train([f"experiment={hard}"]).model.decoder
        assert (decoder.embed_dim, decoder.hidden_dim, decoder.attention.attention_dim) == (512, 1024, 512)
        assert decoder.alpha_c == 0.0 and soft.alpha_c == 1.0
    # SCST composes on top: the objective's module and image batches.
    scst = compose_train(["experiment=coco_soft", "objective=scst", "init_from=x.ckpt"])
    assert scst.model._target_.endswith("SelfCriticalLitModule") and scst.data.train_items == "images"


def test_replica_reads_as_the_karpathy_split(replica):
    json_path = replica / "dataset_coco.json"
    train = read_karpathy(json_path, replica, "train")
    assert len(train) == SPLITS["train"] + SPLITS["restval"]  # restval trains, as in the standard practice
    assert len(read_karpathy(json_path, replica, "train", include_restval=False)) == SPLITS["train"]
    val, test = (read_karpathy(json_path, replica, s) for s in ("val", "test"))
    assert (len(val), len(test)) == (SPLITS["val"], SPLITS["test"])
    assert all(r.path.parent.name == "val2014" for r in val + test)
    assert all(r.path.parent.name == "train2014" and len(r.captions) == 5 for r in train)
    assert {r.image_id for r in train}.isdisjoint(r.image_id for r in val + test)  # cocoids
    assert train[0].image_id == 100_000 and train[0].captions[0] == "a red circle on a white background"


@pytest.mark.parametrize("experiment", ["coco_hard_reinforce", "coco_hard_gumbel", "coco_transformer"])
def test_experiment_trains_on_the_replica(experiment, replica, cache, tmp_path):
    cfg = compose_train([*tiny(experiment), *replica_overrides(replica, cache)], tmp_path)
    best = train(cfg)
    assert Path(best).is_file() and "cider" in Path(best).name  # ranked by val CIDEr-D
    assert global_step(tmp_path / "checkpoints" / "last.ckpt") == STEPS


def test_coco_soft_trains_resumes_and_scst_fine_tunes(replica, cache, tmp_path):
    xe = tmp_path / "xe"
    overrides = [*tiny("coco_soft"), *replica_overrides(replica, cache)]
    best = train(compose_train(overrides, xe))
    last = xe / "checkpoints" / "last.ckpt"
    assert global_step(last) == STEPS
    held = encoder_head(last)  # epoch 0: the encoder's trained stages are held at their ImageNet weights
    pretrained = EfficientNetLiteEncoder(
        variant="lite1", stage="head", grid_size=3, out_dim=1280
    ).state_dict()
    assert held and all(torch.equal(v, pretrained[k.removeprefix("net.encoder.")]) for k, v in held.items())
    # Resume: ckpt_path=last in the same run folder, one more epoch: the step count continues.
    train(compose_train([*overrides, "ckpt_path=last", "trainer.max_epochs=2"], xe))
    assert global_step(last) == 2 * STEPS
    assert any(not torch.equal(v, held[k]) for k, v in encoder_head(last).items())  # epoch 1: they train
    # SCST from the XE checkpoint (the guide's second command), at tiny sizes.
    scst = tmp_path / "scst"
    train(compose_train([*overrides, "objective=scst", f"init_from={best}", "data.batch_size=4"], scst))
    assert global_step(scst / "checkpoints" / "last.ckpt") == STEPS
    # Only two splits were cached (train + restval, val), once each, whatever the number of runs.
    (directory,) = [p for p in cache.iterdir() if p.is_dir()]
    assert len(json.loads((directory / "index.json").read_text())["chunks"]) == 2


def run_ranks(commands: list[tuple[list[str], dict]], cwd: Path) -> list[str]:
    """Start every command at once, wait for all; each must succeed. Returns their outputs."""
    procs = [
        subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for cmd, env in commands
    ]
    outputs = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        outputs.append(out)
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, out[-4000:]
    return outputs


def probe(out_dir: Path) -> list[str]:
    return [
        "+callbacks.rank_probe._target_=support.coco_replica.RankProbe",
        f"+callbacks.rank_probe.out_dir={out_dir}",
        "allowed_targets=[support.coco_replica]",  # the probe is this suite's (config_safety.py)
    ]


def probed(out_dir: Path) -> list[dict]:
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(2)]


def subprocess_env() -> dict:
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}


@pytest.mark.slow
def test_ddp_two_cpu_ranks_build_one_feature_cache(replica, tmp_path):
    """trainer=ddp as the recipe sets it, on 2 gloo CPU ranks: both train the same steps on a world of 2;
    the cold cache is encoded once (one rank under the lock, the other waits and reads it)."""
    cache, probes = tmp_path / "cache", tmp_path / "probes"
    overrides = [
        *tiny("coco_soft"),
        *replica_overrides(replica, cache),
        "trainer.strategy=ddp_find_unused_parameters_true",  # as the recipe: epoch 0 holds the encoder
        "trainer.devices=2",  # after tiny's devices=1
        *probe(probes),
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    (output,) = run_ranks(
        [([sys.executable, "-m", "captioning.training.train", *overrides], subprocess_env())], tmp_path
    )
    assert "distributed_backend=gloo" in output and "Starting with 2 processes" in output, output[-3000:]
    ranks = probed(probes)
    assert [r["dist_world_size"] for r in ranks] == [2, 2]
    assert ranks[0]["global_step"] == ranks[1]["global_step"] == STEPS
    (directory,) = [p for p in cache.iterdir() if p.is_dir() and p.name.startswith("EfficientNet")]
    index = json.loads((directory / "index.json").read_text())
    assert len(index["chunks"]) == 2  # train and val, each encoded once: never once per rank
    assert len(index["images"]) == sum(SPLITS.values()) - SPLITS["test"]
    assert not list(directory.glob("*.partial"))


@pytest.mark.slow
def test_two_node_launch_simulated_with_torchrun(replica, tmp_path):
    """trainer.num_nodes=2 under torchrun: two launches of one rank each (NODE_RANK 0 and 1, one master
    address and port), as on two machines; each "node" has its own run folder, the cache is shared."""
    port, probes = free_port(), tmp_path / "probes"
    commands = []
    for node in range(2):
        launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1"]
        launcher += [f"--node-rank={node}", "--master-addr=127.0.0.1", f"--master-port={port}"]
        overrides = [
            *tiny("coco_soft"),
            *replica_overrides(replica, tmp_path / "cache"),
            "trainer.strategy=ddp_find_unused_parameters_true",
            "trainer.num_nodes=2",
            *probe(probes),
            f"hydra.run.dir={tmp_path / f'node{node}'}",
        ]
        commands.append(([*launcher, "-m", "captioning.training.train", *overrides], subprocess_env()))
    outputs = run_ranks(commands, tmp_path)
    ranks = probed(probes)
    assert [(r["global_rank"], r["node_rank"], r["local_rank"]) for r in ranks] == [(0, 0, 0), (1, 1, 0)]
    assert all(r["world_size"] == r["dist_world_size"] == 2 and r["num_nodes"] == 2 for r in ranks), ranks
    assert ranks[0]["global_step"] == ranks[1]["global_step"] == STEPS, ranks
    assert (tmp_path / "node0" / "checkpoints" / "last.ckpt").is_file()  # global rank 0 writes checkpoints
    assert not (tmp_path / "node1" / "checkpoints").exists(), outputs[1][-2000:]
