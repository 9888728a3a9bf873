"""CaptionLitModule: a thin LightningModule around an injected CaptionModel.

One shared step computes the loss for train and val; validation also decodes every image and scores
the captions of the *whole* split at epoch end (gathered across DDP ranks, scored once): the toolkit's
metrics, and on synthetic scenes, where ``val_metrics`` names them, the scene scores
(captioning.metrics.scenes: every metric registered in captioning.metrics.names.SCENE_METRICS, by the path
`captioning evaluate` takes; val_metrics names those logged as val/<name>).
The module never branches on the decoder type: decoders return what their loss needs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from importlib.metadata import version
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.plugins.precision import Precision
from pytorch_lightning.utilities import GradClipAlgorithmType
from torch import Tensor, nn

from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.data.features import CachedEncoder
from captioning.data.vocab import Vocab
from captioning.decoding import GenerationConfig, decode_captions
from captioning.losses import caption_loss
from captioning.metrics.coco import score_captions
from captioning.metrics.names import SCENE_METRICS, TEXT_METRICS
from captioning.metrics.scenes import scene_values, score_scenes
from captioning.models.caption_model import CaptionModel
from captioning.models.decoders.base import Decoder, shift_inputs
from captioning.training.word_dropout import drop_words

# How long the other ranks wait for rank 0's validation scores (the JVM scorers on a large split; SPICE).
SCORING_TIMEOUT = timedelta(hours=3)


class CaptionLitModule(pl.LightningModule):
    def __init__(
        self,
        encoder: nn.Module,
        decoder: Decoder,
        vocab: dict,
        net_config: str | None = None,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., Any] | None = None,
        decoding: dict[str, Any] | None = None,
        val_metrics: Sequence[str] = ("Bleu_4", "CIDEr"),
        image_size: int = 224,
        compile: bool = False,
        init_from: str | None = None,
        label_smoothing: float = 0.0,
        word_dropout: float = 0.0,
    ):
        super().__init__()
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"model.label_smoothing={label_smoothing}, expected 0 <= ε < 1")
        if not 0.0 <= word_dropout < 1.0:
            raise ValueError(f"model.word_dropout={word_dropout}, expected 0 <= p < 1")
        self.label_smoothing = label_smoothing  # of the cross-entropy term only (captioning.losses)
        self.word_dropout = word_dropout  # of the teacher-forced inputs, in training only (word_dropout.py)
        self.init_from = init_from  # weights to start from (a new optimizer): SCST, soft-to-hard, fine-tuning
        # Validation decoding, stored in every checkpoint as the defaults of `captioning caption` etc.
        self.decoding = GenerationConfig.from_dict(decoding, where="model.decoding").to_dict()
        self.net = net = CaptionModel(encoder, decoder)  # injected parts; checks their dimensions agree
        self.vocab = Vocab.from_dict(vocab)
        if len(self.vocab) != net.decoder.vocab_size:
            raise ValueError(
                f"vocabulary has {len(self.vocab)} words but the decoder was built for {net.decoder.vocab_size}"
            )
        self.net_config = net_config
        # The data config it trains on (Hydra's choice of the data group), set by train() and recorded in every
        # checkpoint: ``captioning evaluate`` without data= scores that data, never a guess from the words.
        self.trained_on: str | None = None
        self._scoring_group = None  # the process group rank 0's validation scores are sent through (DDP)
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.val_metrics = tuple(val_metrics)
        unknown = [m for m in self.val_metrics if m not in TEXT_METRICS and m not in SCENE_METRICS]
        if unknown:
            raise ValueError(f"val_metrics {unknown}: expected names from {(*TEXT_METRICS, *SCENE_METRICS)}")
        self.toolkit_metrics = tuple(m for m in self.val_metrics if m in TEXT_METRICS)
        self.scene_metrics = tuple(m for m in self.val_metrics if m in SCENE_METRICS)
        self.image_size = image_size  # saved so `captioning caption` resizes images as in training
        if compile:
            net.decoder.compile_step()  # torch.compile of the per-token step (see scripts/bench.py)
        self.save_hyperparameters(
            ignore=["encoder", "decoder", "optimizer", "scheduler", "vocab", "net_config"]
        )
        # (image_id, caption, references, scene item or None) of every decoded val/test image
        self._generated: list[tuple[Any, str, list[str], Any]] = []
        # The model's encoder with the data's feature cache (data.feature_cache): features by image key
        self.cached_encoder: CachedEncoder | None = None
        self._cached_splits: set[str] = set()

    # -- starting weights ---------------------------------------------------------------------------
    def on_fit_start(self) -> None:
        if self.init_from and self.trainer.ckpt_path is None:  # a resumed run has its own weights
            self.load_initial_weights(self.init_from)
        self.prepare_feature_cache(("train", "val"), rebind=True)  # the weights that train are final here

    # -- cached features ------------------------------------------------------------------------------
    def prepare_feature_cache(self, splits: Sequence[str], rebind: bool = False) -> None:
        """With a ``feature_cache`` in the datamodule: bind it to this model's encoder (``CachedEncoder``)
        and encode the missing images of ``splits`` into it (one rank at a time, under the cache's lock)."""
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        settings = getattr(datamodule, "feature_cache", None)
        if settings is None:
            return
        if rebind or self.cached_encoder is None:
            self.cached_encoder = CachedEncoder(settings.bind(self.net.encoder), datamodule.image_size)
            self._cached_splits = set()
        for name in splits:
            for view in datamodule.views(name):  # "train" and its views: crops, mirrors (datamodule.py)
                if view not in self._cached_splits:
                    self.cached_encoder.add(datamodule.source(view), datamodule.image_keys(view))
                    self._cached_splits.add(view)

    def on_validation_start(self) -> None:
        self.prepare_feature_cache(("val",))  # trainer.validate alone; in fit, prepared at its start

    def on_test_start(self) -> None:
        self.prepare_feature_cache(("test",), rebind=True)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """A batch of ``image_keys`` (the datamodule with a feature cache) gets their cached ``features``."""
        if isinstance(batch, dict) and "image_keys" in batch and batch.get("features") is None:
            if self.cached_encoder is None:
                raise RuntimeError("a batch of image keys, but no feature cache is prepared for this model")
            # float32 as stored, cast to the module's dtype: bf16 under trainer.precision=bf16-true
            batch["features"] = self.cached_encoder.lookup(batch["image_keys"]).to(self.dtype)
        return batch

    def load_initial_weights(self, path: str) -> None:
        """Weights only from a checkpoint or export (``init_from``); the vocabulary must be this run's and
        every parameter must fit. Buffers the other network lacks keep their initial values: a soft
        attention checkpoint starts a hard-attention run (soft-to-hard), whose REINFORCE baseline and
        step counters then start from zero, and a learned baseline's value head (``value_head``, the one
        parameter set that belongs to the estimator, not the captioner) from its initialisation."""
        from captioning.checkpoints.load import CheckpointError, load_checkpoint
        from captioning.data.vocab import vocabulary_difference

        loaded = load_checkpoint(path)
        if loaded.vocab.itos != self.vocab.itos:
            raise CheckpointError(
                f"init_from={path}: its vocabulary is not this run's "
                f"({vocabulary_difference(loaded.vocab.itos, self.vocab.itos)}); start from a checkpoint "
                "trained on the same data"
            )
        mine, theirs = type(self.net.decoder).__name__, type(loaded.net.decoder).__name__
        fresh = {name for name, _ in self.net.named_buffers()} | {
            name for name, _ in self.net.named_parameters() if ".value_head." in f".{name}"
        }
        try:
            result = self.net.load_state_dict(loaded.net.state_dict(), strict=False)
            missing = [k for k in result.missing_keys if k not in fresh]
            if missing or result.unexpected_keys:
                raise RuntimeError(f"missing {missing[:3]}, unexpected {result.unexpected_keys[:3]}")
        except RuntimeError as err:
            raise CheckpointError(
                f"init_from={path}: its network ({theirs} over {type(loaded.net.encoder).__name__}) does not "
                f"fit this run's ({mine} over {type(self.net.encoder).__name__}): {' '.join(str(err).split())[:300]}"
            ) from err

    # -- one shared step ------------------------------------------------------------------------------
    def shared_step(self, batch: dict, stage: str) -> Tensor:
        inputs, targets = shift_inputs(batch["tokens"])  # (B, T), (B, T)
        if stage == "train":
            keep = (self.vocab.pad_id, self.vocab.start_id)
            inputs = drop_words(inputs, self.word_dropout, self.vocab.unk_id, keep)  # (B, T)
        output = self.net(batch.get("images"), inputs, features=batch.get("features"))
        terms = caption_loss(output, targets, self.net.decoder, self.label_smoothing)
        b = targets.shape[0]
        # loss = xent (the cross-entropy, nats a word; smoothed if label_smoothing) + attention_reg (λ times the
        # doubly stochastic penalty of eq. 14, + λ_E times the attention entropy) + a decoder's own terms. At
        # λ = 1 on a 7x7 grid the penalty alone is ~30, so the bar shows the parts beside the sum.
        show_reg = stage == "train" and bool(
            getattr(self.net.decoder, "alpha_c", 0) or getattr(self.net.decoder, "entropy_c", 0)
        )
        self.log(f"{stage}/loss", terms.loss, prog_bar=True, batch_size=b, sync_dist=stage != "train")
        self.log(
            f"{stage}/xent", terms.xent, prog_bar=stage == "train", batch_size=b, sync_dist=stage != "train"
        )
        self.log(
            f"{stage}/attention_reg",
            terms.attention_reg,
            prog_bar=show_reg,
            batch_size=b,
            sync_dist=stage != "train",
        )
        for name, value in terms.logs.items():
            self.log(f"{stage}/{name}", value, batch_size=b, sync_dist=stage != "train")
        return terms.loss

    def on_train_batch_start(self, batch: dict, batch_idx: int) -> None:
        # Explicit per-batch state of the decoder (semi-sampling coin, Gumbel τ), never a side effect
        # of a forward pass or a loss.
        self.net.decoder.start_training_batch()

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        return self.shared_step(batch, "train")

    def eval_step(self, batch: dict, stage: str) -> None:
        """Loss on the references, and the decoded caption of every image for the whole-split scores
        (with its words, attention and scene where scene scores are asked for)."""
        self.shared_step(batch, stage)
        decoded = decode_captions(
            self.net, self.vocab, batch.get("images"), features=batch.get("features"), **self.decoding
        )
        scenes = batch["scenes"]  # None per photo (captioning.data.datamodule.collate)
        if self.scene_metrics and any(scene is None for scene in scenes):
            raise ValueError(
                f"model.val_metrics names {list(self.scene_metrics)}, which score synthetic scenes, but the "
                f"{stage} images (e.g. {batch['image_ids'][0]!r}) are not scenes; drop them from val_metrics"
            )
        for image_id, caption, refs, scene in zip(batch["image_ids"], decoded, batch["references"], scenes):
            item = None
            if self.scene_metrics:  # only what the scores need: the words, (T, L) maps, the frame and objects
                item = (caption.words, caption.attention.numpy(), scene["image_size"], scene["objects"])
            self._generated.append((image_id, " ".join(caption.words), refs, item))

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.eval_step(batch, "val")

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self.eval_step(batch, "test")

    # -- decoding and scoring ----------------------------------------------------------------------------
    def _score_generated(self, stage: str) -> None:
        generated = self._gather(self._generated)
        self._generated = []
        if not generated:
            return
        for name, value in self._on_rank_zero(lambda: self._scores(generated)).items():
            # Every rank holds the same globally computed value, so the sync's mean is that value.
            self.log(f"{stage}/{name}", float(value), prog_bar=name in ("Bleu_4", "CIDEr"), sync_dist=True)

    def _scores(self, generated: list) -> dict[str, float]:
        """The metrics of the whole split's (image_id, caption, refs, scene item) tuples."""
        hyps = {image_id: caption for image_id, caption, _, _ in generated}
        refs = {image_id: refs for image_id, _, refs, _ in generated}
        scores = {}
        if self.toolkit_metrics:
            scores = score_captions(refs, hyps, metrics=self.toolkit_metrics, tokenizer="simple")
        if self.scene_metrics:  # every registered scene metric, by evaluate's path; those named are logged
            captions = [caption for _, caption, _, _ in generated]
            words, maps, sizes, scenes = zip(*(item for *_, item in generated))
            grid = (self.net.grid_size, self.net.grid_size)
            values = scene_values(score_scenes(captions, words, maps, grid, sizes, scenes))
            scores |= {k: v for k, v in values.items() if k in self.scene_metrics}
        return {name: float(value) for name, value in scores.items()}

    def _on_rank_zero(self, compute: Callable[[], dict]) -> dict:
        """``compute()`` run once, by global rank 0, and its result given to every rank. Every rank holds
        the whole split, so one scoring is enough: METEOR's Java scorer is not started once per GPU. An
        error there is every rank's: the others raise it too instead of waiting for a result forever."""
        if self._trainer is None or self.trainer.world_size == 1 or not torch.distributed.is_initialized():
            return compute()
        if self._scoring_group is None:  # every rank is here: creating a group is collective
            # The other ranks wait while rank 0 scores (SPICE, or METEOR on a large split, can take longer
            # than the strategy's collective timeout, trainer.strategy.timeout_s): a group of its own,
            # with a timeout for scoring. gloo: the result is a Python object, sent from the CPU.
            self._scoring_group = torch.distributed.new_group(backend="gloo", timeout=SCORING_TIMEOUT)
        box: list = [None]
        error = None
        if self.trainer.is_global_zero:
            try:
                box = [("scores", compute())]
            except Exception as err:  # shared before it is raised here, so no rank waits on rank 0
                error, box = err, [("error", f"{type(err).__name__}: {err}")]
        torch.distributed.broadcast_object_list(box, src=0, group=self._scoring_group)
        kind, value = box[0]
        if error is not None:
            raise error
        if kind == "error":
            raise RuntimeError(f"validation scoring failed on global rank 0: {value}")
        return value

    def _gather(self, items: list) -> list:
        """All ranks' (image_id, caption, refs, scene item), deduplicated by image (DistributedSampler pads)."""
        if self._trainer is None or self.trainer.world_size == 1 or not torch.distributed.is_initialized():
            return items
        per_rank: list[list] = [None] * self.trainer.world_size  # type: ignore[list-item]
        torch.distributed.all_gather_object(per_rank, items)
        merged = {}
        for rank_items in per_rank:
            for item in rank_items:
                merged.setdefault(item[0], item)
        return sorted(merged.values(), key=lambda item: str(item[0]))

    def on_validation_epoch_end(self) -> None:
        self._score_generated("val")

    def on_test_epoch_end(self) -> None:
        self._score_generated("test")

    # -- optimisation and checkpoints ------------------------------------------------------------------
    def configure_optimizers(self):
        """The optimizer over the trainable parameters. A trained encoder whose ``lr_scale`` is not 1 (a
        pretrained one fine-tuned, model.encoder.lr_scale) gets its own parameter group at lr_scale x the
        optimizer's lr (scaled after construction, so the scheduler's factor applies to both groups);
        otherwise one group, as before. Both groups share every other setting (weight_decay included):
        the decoder's norms and biases are not exempted from weight decay, so the encoder's are not either.
        """
        params = [p for p in self.net.parameters() if p.requires_grad]
        scale = float(getattr(self.net.encoder, "lr_scale", 1.0))
        encoder = [p for p in self.net.encoder.parameters() if p.requires_grad]
        if encoder and scale != 1.0:
            ids = {id(p) for p in encoder}
            groups = [{"params": [p for p in params if id(p) not in ids]}, {"params": encoder}]
            params = [group for group in groups if group["params"]]
        optimizer = (
            self.optimizer_factory(params) if self.optimizer_factory else torch.optim.AdamW(params, 1e-3)
        )
        if encoder and scale != 1.0:
            optimizer.param_groups[-1]["lr"] *= scale  # the encoder's group is the last one
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(optimizer, total_steps=self.trainer.estimated_stepping_batches)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def configure_gradient_clipping(
        self, optimizer: torch.optim.Optimizer, gradient_clip_val=None, gradient_clip_algorithm=None
    ) -> None:
        # Lightning refuses to clip whenever a fused optimizer (model.optimizer.fused, which can unscale
        # fp16 gradients inside its step) meets mixed precision, and leaves its gradients scaled. Clipping
        # needs the true gradients: with a gradient scaler (16-mixed), unscale them first (the scaler
        # then steps the optimizer without scaling again); without one (bf16-mixed, 32-true) they are
        # already true. Then clip with the plain precision plugin's code.
        if not gradient_clip_val:
            return
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)
        if scaler is not None and getattr(optimizer, "_step_supports_amp_scaling", False):
            scaler.unscale_(optimizer)
        algorithm = GradClipAlgorithmType(gradient_clip_algorithm or GradClipAlgorithmType.NORM)
        Precision.clip_gradients(self.trainer.precision_plugin, optimizer, gradient_clip_val, algorithm)

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path, map_location=None, **overrides: Any) -> CaptionLitModule:
        """Rebuild the module from a captioning checkpoint (or export) alone, safely.

        Lightning's own loader would need the encoder, decoder and vocabulary as arguments (they are
        injected objects, not hyper-parameters) and unpickles the file; this rebuilds them from the saved
        network config through the closed registry (``captioning.checkpoints.load``). For inference,
        ``captioning.Captioner.from_checkpoint`` is the simpler way. ``overrides``: constructor arguments
        such as ``optimizer`` or ``val_metrics``."""
        from captioning.checkpoints.load import load_checkpoint

        loaded = load_checkpoint(checkpoint_path, map_location or "cpu")
        arguments = {
            "encoder": loaded.net.encoder,
            "decoder": loaded.net.decoder,
            "vocab": loaded.vocab.to_dict(),
            "net_config": loaded.net_config,
            "decoding": loaded.decoding,
            "image_size": loaded.image_size,
            **overrides,
        }
        return cls(**arguments)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # Plain data only, so captioning/evaluation load with torch.load(weights_only=True).
        checkpoint[CHECKPOINT_KEY] = {
            "vocab": self.vocab.to_dict(),
            "net_config": self.net_config,
            "decoding": dict(self.decoding),
            "image_size": self.image_size,
            "provenance": {
                "captioning_version": version("captioning"),
                "epoch": self.current_epoch,
                "global_step": self.global_step,
                "saved": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                **({"data": self.trained_on} if self.trained_on else {}),
            },
        }
