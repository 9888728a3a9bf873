"""Loading a checkpoint for captioning never runs code and refuses every broken file clearly.

Each broken checkpoint is derived at test time from a good one (tests/support/corpus.py builds it from the real
composed config). Malicious files would ``touch`` a marker file if any of their code ran.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

import pytest
import torch
from PIL import Image

from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.checkpoints.load import CheckpointError, load_checkpoint, read_checkpoint
from captioning.cli.main import main
from captioning.decoding import GenerationConfig

from support import DECODERS
from support.corpus import build_module, checkpoint_dict, write_checkpoint


class RunsCommand:
    """Unpickling this calls ``os.system(command)``: the classic malicious-pickle payload."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


@pytest.fixture
def good(tmp_path: Path) -> Path:
    return write_checkpoint(tmp_path / "good.ckpt")


def test_good_checkpoint_round_trips_weights_vocab_and_decoding(good: Path) -> None:
    loaded = load_checkpoint(good)
    saved = torch.load(good, weights_only=True)
    assert loaded.vocab.itos == saved[CHECKPOINT_KEY]["vocab"]["itos"]
    assert loaded.decoding == GenerationConfig(num_beams=1, max_new_tokens=20).to_dict()  # debug=tiny's
    for name, tensor in loaded.net.state_dict().items():
        assert torch.equal(tensor, saved["state_dict"][f"net.{name}"]), name


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "the file is empty (0 bytes)"),
        (b"\x00" * 64, "not a readable checkpoint"),
        (b"model: soft\nhidden_dim: 16\n", "not a readable checkpoint"),
        (b'{"state_dict": {}}', "not a readable checkpoint"),
    ],
)
def test_a_file_that_is_not_a_checkpoint_is_refused(tmp_path: Path, content: bytes, fragment: str) -> None:
    path = tmp_path / "model.ckpt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert str(info.value).startswith(f"{path}: {fragment}")


def test_a_zip_that_is_not_a_torch_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.ckpt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("weights.txt", "0.1 0.2 0.3")
    with pytest.raises(CheckpointError, match=rf"^{path}: not a readable checkpoint"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    "obj",
    [{"weights": torch.zeros(3)}, torch.zeros(3), [1, 2, 3]],
    ids=["plain_state_dict", "tensor", "list"],
)
def test_a_torch_file_from_elsewhere_is_not_a_captioning_checkpoint(tmp_path: Path, obj) -> None:
    path = tmp_path / "other.ckpt"
    torch.save(obj, path)
    with pytest.raises(
        CheckpointError, match=rf"^{path}: not a captioning checkpoint \(expected 'state_dict'"
    ):
        load_checkpoint(path)


def test_a_missing_checkpoint_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=rf"^{tmp_path / 'nope.ckpt'}: no such checkpoint file"):
        load_checkpoint(tmp_path / "nope.ckpt")


@pytest.mark.parametrize("keep", [0.98, 0.5, 0.02])
def test_a_truncated_checkpoint_is_refused(good: Path, tmp_path: Path, keep: float) -> None:
    data = good.read_bytes()
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(
        CheckpointError, match=rf"^{cut}: not a readable checkpoint \(truncated or not a torch file"
    ):
        load_checkpoint(cut)


def test_a_checkpoint_whose_vocabulary_does_not_fit_its_decoder_is_refused(tmp_path: Path) -> None:
    checkpoint = checkpoint_dict(build_module(["a", "red", "circle"]))
    checkpoint[CHECKPOINT_KEY]["vocab"]["itos"].append("square")  # another vocabulary, same weights
    torch.save(checkpoint, tmp_path / "other_vocab.ckpt")
    with pytest.raises(CheckpointError, match="the vocabulary has 8 words but the decoder was built for 7"):
        load_checkpoint(tmp_path / "other_vocab.ckpt")


def test_weights_of_another_model_are_refused(tmp_path: Path) -> None:
    words = ["a", "red", "circle"]
    small = checkpoint_dict(build_module(words))
    wide = checkpoint_dict(build_module(words, ["model.decoder.hidden_dim=24"]))
    small["state_dict"] = wide["state_dict"]  # weights of a wider decoder under the small model's config
    torch.save(small, tmp_path / "other_model.ckpt")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(tmp_path / "other_model.ckpt")
    assert "the weights do not fit the saved network config" in str(info.value)
    assert "size mismatch" in str(info.value)


def test_an_incomplete_captioning_entry_is_refused(good: Path, tmp_path: Path) -> None:
    checkpoint = torch.load(good, weights_only=True)
    del checkpoint[CHECKPOINT_KEY]["vocab"]
    torch.save(checkpoint, tmp_path / "no_vocab.ckpt")
    with pytest.raises(CheckpointError, match=f"the '{CHECKPOINT_KEY}' entry is incomplete"):
        load_checkpoint(tmp_path / "no_vocab.ckpt")


# ----------------------------------------------------------------------------------- no code runs


def test_a_pickle_that_would_run_a_command_is_refused(good: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    checkpoint = torch.load(good, weights_only=True)
    checkpoint[CHECKPOINT_KEY]["decoding"] = RunsCommand(f"touch {marker}")
    evil = tmp_path / "evil.ckpt"
    torch.save(checkpoint, evil)  # a real torch zip file, valid in every other respect
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(evil)
    message = str(info.value)
    assert message.startswith(
        f"{evil}: refused to load: it contains objects other than tensors and plain data"
    )
    assert "weights_only=True" in message and "system" in message  # names the refused callable
    assert not marker.exists()


def test_a_legacy_raw_pickle_that_would_run_a_command_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.ckpt"
    evil.write_bytes(pickle.dumps({"state_dict": {}, CHECKPOINT_KEY: RunsCommand(f"touch {marker}")}))
    with pytest.raises(CheckpointError, match=rf"^{evil}: "):
        load_checkpoint(evil)
    assert not marker.exists()


def test_the_caption_cli_refuses_a_malicious_checkpoint(good: Path, tmp_path: Path, capsys) -> None:
    marker = tmp_path / "pwned"
    checkpoint = torch.load(good, weights_only=True)
    checkpoint["state_dict"]["net.extra"] = RunsCommand(f"touch {marker}")
    torch.save(checkpoint, tmp_path / "evil.ckpt")
    image = tmp_path / "image.png"
    Image.new("RGB", (16, 16)).save(image)
    assert main(["caption", str(image), "--checkpoint", str(tmp_path / "evil.ckpt")]) == 2
    assert "refused to load" in capsys.readouterr().err
    assert not marker.exists()


def _with_encoder_target(good: Path, tmp_path: Path, target: str, marker: Path) -> Path:
    checkpoint = torch.load(good, weights_only=True)
    net_config = f"""
_target_: captioning.models.caption_model.CaptionModel
encoder:
  _target_: {target}
  _args_: ["touch {marker}"]
decoder: {{}}
"""
    checkpoint[CHECKPOINT_KEY]["net_config"] = net_config  # plain text: weights_only loads it fine
    path = tmp_path / "bad_target.ckpt"
    torch.save(checkpoint, path)
    return path


@pytest.mark.parametrize(
    "target",
    [
        "os.system",  # outside the package
        "captioning.training.train.os.system",  # starts with "captioning." but resolves to os.system
        "captioning.models.caption_model.nn.Linear",  # a torch class reached through a captioning module
        "captioning.data.sources.SyntheticSource",  # a class of the package, but no network part
        "captioning.metrics.coco.score_captions",  # a function of the package
    ],
)
def test_a_config_target_outside_the_package_is_refused(good: Path, tmp_path: Path, target: str) -> None:
    marker = tmp_path / "pwned"
    path = _with_encoder_target(good, tmp_path, target, marker)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert str(info.value).startswith(f"{path}: net_config.encoder._target_ is {target!r}")
    assert "only the network classes of captioning.models.registry may be built" in str(info.value)
    assert not marker.exists()


def test_read_checkpoint_gives_plain_data_only(good: Path) -> None:
    checkpoint = read_checkpoint(good)
    meta = checkpoint[CHECKPOINT_KEY]
    assert isinstance(meta["net_config"], str) and isinstance(meta["vocab"]["itos"], list)
    assert all(isinstance(v, torch.Tensor) for v in checkpoint["state_dict"].values())


def test_every_model_config_names_a_registered_class() -> None:
    """Whatever captioning/conf/model/ can build, a checkpoint of it can be rebuilt (the registry is closed)."""
    from omegaconf import OmegaConf

    from captioning.models.registry import MODEL_CLASSES

    from support import CONF

    targets = {
        OmegaConf.load(f).get("_target_")
        for group in ("encoder", "decoder", "decoder/attention")
        for f in (CONF / "model" / group).glob("*.yaml")
    }
    targets.discard(None)  # decoder variants that only compose another one
    assert targets and targets <= set(MODEL_CLASSES), targets - set(MODEL_CLASSES)


@pytest.mark.parametrize("decoder", DECODERS)
def test_every_decoder_config_round_trips_through_a_checkpoint(tmp_path, decoder) -> None:
    """Whatever captioning/conf/model/decoder/ builds, a checkpoint of it loads (sizes, indices such as the
    Transformer's attention_layer=-1, partial attention layers) and gives the same network."""
    path = write_checkpoint(tmp_path / f"{decoder}.ckpt", extra=[f"model/decoder={decoder}"])
    loaded = load_checkpoint(path)
    fresh = build_module(["a", "red", "circle", "square", "left", "of"], [f"model/decoder={decoder}"])
    assert type(loaded.net.decoder) is type(fresh.net.decoder)
    for (name, a), (_, b) in zip(loaded.net.state_dict().items(), fresh.net.state_dict().items()):
        assert torch.equal(a, b), name


def test_a_huge_layer_in_a_checkpoint_is_refused(tmp_path) -> None:
    path = write_checkpoint(tmp_path / "model.ckpt")
    checkpoint = torch.load(path, weights_only=True)
    checkpoint[CHECKPOINT_KEY]["net_config"] = checkpoint[CHECKPOINT_KEY]["net_config"].replace(
        "hidden_dim: 16", "hidden_dim: 400000"
    )
    torch.save(checkpoint, path)
    with pytest.raises(
        CheckpointError, match=r"net_config.decoder.hidden_dim = 400000 is outside \[0, 16,384\]"
    ):
        load_checkpoint(path)


def _export_with(tmp_path: Path, edit) -> Path:
    """A weights-only export of the corpus checkpoint whose header holds the network config as a JSON
    object (not YAML text), changed by ``edit``."""
    import json

    import yaml
    from safetensors.torch import save_file

    from captioning.checkpoints.export import FORMAT
    from captioning.checkpoints.load import net_state

    checkpoint = torch.load(write_checkpoint(tmp_path / "model.ckpt"), weights_only=True)
    meta = dict(checkpoint[CHECKPOINT_KEY])
    meta["net_config"] = yaml.safe_load(meta["net_config"])
    edit(meta["net_config"])
    out = tmp_path / "model.safetensors"
    state = {k: v.contiguous() for k, v in net_state(checkpoint).items()}
    save_file(state, str(out), metadata={"format": FORMAT, CHECKPOINT_KEY: json.dumps(meta)})
    return out


@pytest.mark.parametrize(
    ("sizes", "count"),
    [
        ({"decoder.vocab_size": 120_000, "decoder.embed_dim": 16_384}, r"[\d,]{13} parameters"),
        ({"encoder.width": 16_384}, r"[\d,]{14} parameters"),
    ],
    ids=["vocabulary-x-embedding", "wide-encoder"],
)
def test_a_network_whose_sizes_multiply_to_gigabytes_is_refused_before_it_is_built(
    tmp_path, sizes, count
) -> None:
    import time

    def enlarge(config: dict) -> None:
        for key, value in sizes.items():
            part, name = key.split(".")
            config[part][name] = value  # each size within its own bound

    path = _export_with(tmp_path, enlarge)
    start = time.perf_counter()
    with pytest.raises(
        CheckpointError, match=rf"{path}: refused before building it: the network has {count}"
    ):
        load_checkpoint(path)
    assert time.perf_counter() - start < 10  # counted on the meta device: gigabytes were never allocated


def test_an_export_network_config_as_a_json_object_may_not_interpolate(tmp_path) -> None:
    path = _export_with(tmp_path, lambda c: c["decoder"].__setitem__("hidden_dim", "${oc.env:HOME}"))
    with pytest.raises(CheckpointError, match=rf"{path}: net_config holds an interpolation"):
        load_checkpoint(path)
