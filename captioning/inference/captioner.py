"""The Python API: ``Captioner.from_checkpoint(path).caption(images, **decoding)``.

    from captioning import Captioner
    model = Captioner.from_checkpoint("model.ckpt", device="cpu")        # or "cuda", "auto"
    out = model.caption(["a.jpg", pil_image, tensor_3hw], num_beams=3)
    out[0].caption, out[0].tokens, out[0].attention, out[0].token_log_probs, out[0].score

Inputs are paths, PIL images, (3, H, W) tensors or (H, W, 3) uint8 arrays, one or an iterable of them.
They are streamed: each batch of ``batch_size`` images is read, resized and released before the next
is read, so memory stays bounded for any number of photos of any size. Decoding options are HF
``generate``'s (``captioning.decoding.config``); unset ones are the checkpoint's. Each result carries
its n-best list (``candidates``) when ``num_return_sequences > 1``.

An input that cannot be read never costs the others their captions: every good image is captioned, and
with ``on_error="raise"`` (the default) one :class:`ImageInputError` then names every bad input, with
the good images' results in its ``.results`` (``.failures``: (index, name, reason) of each bad one);
``on_error="skip"`` leaves the bad ones out of the results with a warning naming each.
A network that captions nothing (NaN/inf scores, or every caption of a batch empty) raises a
:class:`BrokenOutput` naming the checkpoint.

``caption`` is the words for people: ``<unk>`` (a word the vocabulary lacks) is left out of it, and kept
in ``tokens`` (aligned with the attention rows) and the JSON's "tokens". A checkpoint trained on the
synthetic scenes (``trained_on == "synthetic"``) warns once when it captions a file that is not a
synthetic scene: it can only describe coloured shapes. A Flickr8k model's result carries a
``domain_notice`` when the photo looks unlike its training photos (``captioning.inference.domain``: what
the encoder's ImageNet classifier sees in it, e.g. "looks like: Egyptian cat (0.78), tabby; ..."), else
None; ``model.domain = None`` turns the check off.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from captioning.checkpoints.ensemble import load_checkpoints
from captioning.checkpoints.load import LoadedCheckpoint
from captioning.data.images import image_to_tensor
from captioning.decoding import GenerationConfig
from captioning.decoding.captions import (  # noqa: F401 - the errors for callers
    BrokenOutput,
    EmptyCaptions,
    NonFiniteScores,
)
from captioning.hashing import encoder_identity
from captioning.inference.batch_decoder import BatchDecoder
from captioning.inference.consensus import ConsensusReranker
from captioning.inference.domain import DomainCheck, DomainNotice, domain_for
from captioning.inference.image_inputs import SINGLE, ImageInput, as_pil, failure_reason, input_name
from captioning.inference.results import (  # noqa: F401 - what the API returns, importable from here
    ON_ERROR,
    CaptionedBatch,
    CaptionResult,
    ImageInputError,
    display_caption,
)
from captioning.inference.trained_on import scene_vocabulary, synthetic_note, trained_data


def is_synthetic_scene(picture: Image.Image) -> bool:
    """Whether an image has the synthetic scenes' canvas size (what a photo almost never has)."""
    from captioning.data.synthetic import CANVAS

    return picture.size == (CANVAS, CANVAS)


def zoo_data(path: object) -> str | None:
    """What a zoo model was trained on, by its file name (captioning/zoo.py), or None for another file."""
    from captioning.zoo import MODELS

    name = Path(str(path)).name
    return next((m.data for m in MODELS.values() if m.file == name), None)


def resolve_device(device: str | torch.device) -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    given = str(device)
    try:
        device = torch.device(device)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device={given!r}: expected cpu, cuda, cuda:N, mps or auto")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device}: CUDA is not available on this machine (use 'cpu' or 'auto')")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(
            f"device={device}: this machine has {torch.cuda.device_count()} GPU(s), cuda:0 to "
            f"cuda:{torch.cuda.device_count() - 1}"
        )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(
            f"device={device}: Apple's MPS is not available on this machine (use 'cpu' or 'auto')"
        )
    return device


class Captioner:
    """A trained captioner on a device: the network, its vocabulary and its decoding defaults."""

    def __init__(self, loaded: LoadedCheckpoint, device: str | torch.device = "cpu", bf16: bool = False):
        self.net, self.vocab = loaded.net, loaded.vocab
        self.decoding = GenerationConfig.from_dict(loaded.decoding)
        self.image_size, self.path, self.provenance = loaded.image_size, loaded.path, loaded.provenance
        self.decoder = BatchDecoder.of(loaded, bf16)  # the one batch decoder, shared with evaluate and tune
        # "synthetic" (recorded, or a vocabulary of synthetic-scene words only), a recorded data name, or None
        meta = {"vocab": {"itos": self.vocab.itos}, "provenance": self.provenance}
        self.trained_on = trained_data(meta)
        # a scene model whatever its data config is called (data=my_scenes): its words say so too
        self._scene_model = self.trained_on == "synthetic" or scene_vocabulary(self.vocab.itos)
        self._noted_synthetic = False
        self.domain = domain_for(self.trained_on or zoo_data(self.path))  # None: no domain notices
        self._domain_check: DomainCheck | None = None
        self.to(device)

    @classmethod
    def from_checkpoint(
        cls, path: str | Path | Sequence[str | Path], device: str = "cpu", bf16: bool = False
    ) -> Captioner:
        """Load a training checkpoint (.ckpt) or a weights-only export (.safetensors), or a zoo model by
        name, as ``--checkpoint`` takes them; a list of several is their ensemble
        (``captioning.checkpoints.ensemble``). ``device``: "cpu", "cuda", "auto"; ``bf16``: decode under
        bfloat16 autocast (on a GPU)."""
        from captioning.zoo import checkpoint_path

        paths = [path] if isinstance(path, str | Path) else path
        if (
            not isinstance(paths, list | tuple)
            or not paths
            or not all(isinstance(p, str | Path) and str(p).strip() for p in paths)
        ):
            raise TypeError(
                f"from_checkpoint: path={path!r}; expected the path of a .ckpt or .safetensors file or a "
                "zoo model's name (or a list of them, for their ensemble)"
            )
        files = [
            checkpoint_path(p) if isinstance(p, str) else p for p in paths
        ]  # a name: its file; a Path: as given
        return cls(load_checkpoints(files), device=device, bf16=bf16)

    @classmethod
    def from_pretrained(cls, name: str, device: str = "cpu", bf16: bool = False) -> Captioner:
        """A model of the zoo by name (``captioning models``; captioning/zoo.py), its file SHA-256 checked."""
        from captioning.zoo import resolve

        return cls.from_checkpoint(resolve(name), device=device, bf16=bf16)

    @property
    def bf16(self) -> bool:
        """Whether batches decode under bfloat16 autocast."""
        return self.decoder.bf16

    @property
    def grid(self) -> tuple[int, int]:
        return self.net.grid_size, self.net.grid_size

    def to(self, device: str | torch.device) -> Captioner:
        self.device = resolve_device(device)
        self.net.to(self.device).eval()
        return self

    def generation_config(self, **options: Any) -> GenerationConfig:
        """The checkpoint's decoding defaults with ``options`` (HF names) changed. ``hard_attention`` is
        refused for a model none of whose attention layers chooses a cell (soft attention): it would
        change nothing."""
        return self.decoder.generation_config(self.decoding, options)

    def caption(
        self, images: ImageInput | Iterable[ImageInput], on_error: str = "raise", **kwargs: Any
    ) -> list[CaptionResult]:
        """Caption one image or many: ``iter_captions`` collected into a list (same arguments). With
        ``on_error="raise"``, the :class:`ImageInputError` naming the bad inputs carries in ``.results``
        the captions of all the good ones."""
        results: list[CaptionResult] = []
        try:
            for result in self._captions(images, on_error, kwargs):
                results.append(result)
        except ImageInputError as err:
            err.results = results
            raise
        return results

    def iter_captions(
        self, images: ImageInput | Iterable[ImageInput], on_error: str = "raise", **kwargs: Any
    ) -> Iterator[CaptionResult]:
        """Results batch by batch (streamed): :meth:`iter_batches` (same arguments) one result at a time.
        ``on_error``: what an unreadable input does once every good one is yielded: "raise" one
        :class:`ImageInputError` naming them all, or "skip" them with a warning each. A batch the network
        captions nothing for raises its :class:`BrokenOutput`."""
        yield from self._captions(images, on_error, kwargs)

    def _captions(
        self, images: ImageInput | Iterable[ImageInput], on_error: str, kwargs: dict[str, Any]
    ) -> Iterator[CaptionResult]:
        """The one loop of :meth:`caption` and :meth:`iter_captions`: called by either from the user's
        code, so its warnings point there (stacklevel 3: this generator, its caller, the user's line)."""
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error={on_error!r}: expected 'raise' or 'skip'")
        failures: list[tuple[int, str, str]] = []
        for batch in self.iter_batches(images, **kwargs):
            if batch.note:
                warnings.warn(batch.note, stacklevel=3)
            failures += batch.failures
            if batch.broken is not None:
                raise batch.broken
            yield from batch.results
        if failures and on_error == "raise":
            raise ImageInputError(failures)
        for _, name, reason in failures:
            warnings.warn(f"{name}: skipped: {reason}", stacklevel=3)

    def iter_batches(
        self,
        images: ImageInput | Iterable[ImageInput],
        batch_size: int = 16,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        reranker: ConsensusReranker | None = None,
        overlay_side: int | None = None,
        **options: Any,
    ) -> Iterator[CaptionedBatch]:
        """The images read and decoded ``batch_size`` readable ones at a time (each batch released before
        the next is read), one :class:`CaptionedBatch` each: its results, the inputs that could not be
        read, and a broken network's error instead of results (the next batch is still decoded: a caller
        that reports per batch, like ``captioning caption``, goes on). ``options``: HF ``generate`` names
        (unset: the checkpoint's); ``seed`` or a ``generator`` (not both) make sampling repeatable (one
        generator for the whole stream). With a ``reranker`` (``captioning.inference.consensus``), each
        caption is the candidate its vote keeps (the beams use ``options``, except what the reranker sets
        itself: ``RerankConfig.check_decoding``; ``candidates`` then lists every distinct candidate).
        ``overlay_side``: also keep each image, shrunk to fit that many pixels, in ``pictures`` (for
        overlays). Every batch goes through the one :class:`BatchDecoder`."""
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r}: expected an integer >= 1")
        if seed is not None and (
            not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63
        ):  # as the CLI's --seed
            raise ValueError(f"seed={seed!r}: expected an integer in [0, 2**63)")
        if seed is not None and generator is not None:
            raise ValueError(
                f"seed={seed} and a generator given together: the generator's state would decide and the "
                "seed be ignored; pass one of them"
            )
        if reranker is not None:  # what the reranker sets itself, named before the options are combined
            reranker.config.check_decoding(options)
        config = self.generation_config(**options)
        if reranker is not None:
            reranker.bank.check_encoder(self.encoder_identity, str(self.path))
        if generator is None and seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(seed)
        if images is None or isinstance(images, Mapping) or not isinstance(images, (*SINGLE, Iterable)):
            raise TypeError(
                f"cannot caption a {type(images).__name__}: give a path, PIL image, tensor, array, binary "
                "file or image bytes, or a list of them"
            )
        stream = enumerate([images] if isinstance(images, SINGLE) else images)
        while True:
            batch = self._read_batch(stream, batch_size, overlay_side)
            if batch is None:
                break
            if batch.indices:
                try:  # no_grad inside decode, not around the yield: the caller's code keeps its grad mode
                    batch.results = self._decode(batch, config, generator, reranker)
                except BrokenOutput as err:
                    batch.broken = err
            batch.tensors = []  # released: the caller holds a batch's results, not its model inputs
            yield batch

    def _read_batch(
        self, stream: Iterator, batch_size: int, overlay_side: int | None
    ) -> CaptionedBatch | None:
        """Up to ``batch_size`` readable inputs of ``stream`` as model inputs (S x S), each unreadable one
        named in ``failures``; None once the stream is exhausted."""
        batch, read_any = CaptionedBatch(), False
        for index, image in stream:
            read_any = True
            name = input_name(image, index)
            try:
                picture = as_pil(image)
                batch.tensors.append(image_to_tensor(picture, self.image_size))  # (3, S, S)
            except (ValueError, TypeError, OSError) as err:  # one bad input: named, the others captioned
                batch.failures.append((index, name, failure_reason(err, name)))
                continue
            batch.indices.append(index)
            batch.names.append(name)
            if isinstance(image, str | Path) and not is_synthetic_scene(picture):
                batch.note = batch.note or self._synthetic_note()
            if overlay_side is not None:  # a photo's full decode is released at once, a copy kept
                picture.thumbnail((overlay_side, overlay_side), Image.Resampling.BICUBIC)
                batch.pictures.append(picture)
            del picture
            if len(batch.indices) == batch_size:
                break
        return batch if read_any else None

    def _synthetic_note(self) -> str | None:
        """The note that a synthetic-scene model captions a user's photo, once per model."""
        if self._scene_model and not self._noted_synthetic:
            self._noted_synthetic = True
            return synthetic_note(self.path)
        return None

    @property
    def encoder_identity(self) -> dict:
        """What the encoder's grids depend on (``captioning.data.features.encoder_identity``)."""
        return encoder_identity(self.net.encoder, self.image_size)

    def _decode(
        self, batch: CaptionedBatch, config: GenerationConfig, generator, reranker
    ) -> list[CaptionResult]:
        """The batch's results through the one decoder; each result's ``candidates`` its n-best list."""
        inputs = torch.stack(batch.tensors)  # (B, 3, S, S)
        per_image = self.decoder.decode(inputs, config, batch.names, generator=generator, reranker=reranker)
        (h, w) = self.grid
        results = []
        for name, captions in zip(batch.names, per_image):
            candidates = [
                CaptionResult(
                    caption=display_caption(c.words),
                    tokens=c.words,
                    attention=c.attention.numpy().reshape(len(c.words), h, w),  # (T, H*W) -> (T, H, W)
                    token_log_probs=c.token_log_probs,
                    score=c.score,
                    log_prob=c.log_prob,
                    image=name,
                    attention_label=self.net.decoder.attention_map_label,
                )
                for c in captions
            ]
            candidates[0].candidates = candidates
            results.append(candidates[0])
        for result, notice in zip(results, self._domain_notices(inputs)):
            result.domain_notice = notice
        return results

    def _domain_notices(self, inputs: torch.Tensor) -> list[DomainNotice | None]:
        """Per image of the batch, a notice when it looks unlike the training photos (``self.domain``)."""
        if self.domain is None:
            return [None] * len(inputs)
        if self._domain_check is None or self._domain_check.domain is not self.domain:
            self._domain_check = DomainCheck(self.domain, self.device)
        self._domain_check.device = self.device
        return self._domain_check.notices(inputs)
