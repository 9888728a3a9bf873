"""Weight averaging (`captioning export --checkpoint A --checkpoint B OUT`): the export holds the mean of the
weights, loads and captions like any export, and checkpoints of different networks are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from captioning.checkpoints.export import export_checkpoint
from captioning.checkpoints.load import load_checkpoint
from captioning.cli.main import main as captioning_main

from support.hostile import assert_one_line, mutated, replace_config


def shifted(good: Path, out: Path, seed: int) -> Path:
    """A copy of ``good`` whose floating weights moved by Gaussian noise (another point of one run)."""
    generator = torch.Generator().manual_seed(seed)

    def move(c: dict) -> None:
        for name, tensor in c["state_dict"].items():
            if tensor.is_floating_point():
                c["state_dict"][name] = tensor + 0.1 * torch.randn(tensor.shape, generator=generator)
            else:
                c["state_dict"][name] = tensor + seed  # a step counter: the first's is kept

    return mutated(good, out, move)


def test_the_export_of_three_checkpoints_holds_the_mean_of_their_weights(good_checkpoint, tmp_path, photo):
    paths = [shifted(good_checkpoint, tmp_path / f"c{k}.ckpt", k) for k in (1, 2, 3)]
    out = tmp_path / "soup.safetensors"
    argv = ["export", *(a for p in paths for a in ("--checkpoint", str(p))), str(out)]
    assert captioning_main(argv) == 0
    states = [torch.load(p, weights_only=True)["state_dict"] for p in paths]
    loaded = load_checkpoint(out)
    soup = loaded.net.state_dict()
    for name, tensor in soup.items():
        sources = [s[f"net.{name}"] for s in states]
        if tensor.is_floating_point():
            torch.testing.assert_close(tensor, sum(sources) / 3, rtol=0, atol=1e-6)
        else:
            assert torch.equal(tensor, sources[0]), name
    assert [a["checkpoint"] for a in loaded.provenance["averaged"]] == ["c1.ckpt", "c2.ckpt", "c3.ckpt"]
    assert captioning_main(["caption", str(photo), "--checkpoint", str(out)]) == 0


def test_a_checkpoint_averaged_with_itself_is_its_plain_export(good_checkpoint, tmp_path):
    plain = load_checkpoint(export_checkpoint(good_checkpoint, tmp_path / "plain.safetensors")).net
    twice = export_checkpoint(good_checkpoint, tmp_path / "twice.safetensors", average_with=[good_checkpoint])
    for name, tensor in load_checkpoint(twice).net.state_dict().items():
        assert torch.equal(tensor, plain.state_dict()[name]), name


@pytest.mark.parametrize(
    "mutate, culprit",
    [
        (replace_config("hidden_dim: 16", "hidden_dim: 24"), "its net_config differs"),
        (lambda c: c["captioning"]["vocab"]["itos"].reverse(), "its vocab differs"),
        (lambda c: c["state_dict"].popitem(), "but not in"),
    ],
    ids=["config", "vocabulary", "a tensor missing"],
)
def test_checkpoints_of_another_network_are_refused_and_nothing_is_written(
    good_checkpoint, tmp_path, capsys, mutate, culprit
):
    other = mutated(good_checkpoint, tmp_path / "other.ckpt", mutate)
    out = tmp_path / "soup.safetensors"
    argv = ["export", "--checkpoint", str(good_checkpoint), "--checkpoint", str(other), str(out)]
    assert captioning_main(argv) == 2
    assert_one_line(capsys.readouterr().err, str(other), culprit)
    assert not out.exists() and not list(tmp_path.glob("*.partial"))


def test_a_missing_second_checkpoint_is_named_before_anything_is_read(good_checkpoint, tmp_path, capsys):
    missing = tmp_path / "nowhere.ckpt"
    argv = ["export", "--checkpoint", str(good_checkpoint), "--checkpoint", str(missing), str(tmp_path / "o")]
    assert captioning_main(argv) == 2
    assert_one_line(capsys.readouterr().err, str(missing))


def test_a_checkpoint_saved_before_defaults_were_written_averages_with_a_later_one(good_checkpoint, tmp_path):
    """A run resumed across the version that writes every constructor default into the saved config: its
    checkpoints' config texts differ by a default-valued key, and they are still one network."""
    text = torch.load(good_checkpoint, weights_only=True)["captioning"]["net_config"]
    line = next(line for line in text.splitlines() if line.strip().startswith("entropy_c:"))
    older = mutated(good_checkpoint, tmp_path / "older.ckpt", replace_config(line + "\n", ""))
    assert "entropy_c" not in torch.load(older, weights_only=True)["captioning"]["net_config"]
    soup = export_checkpoint(good_checkpoint, tmp_path / "soup.safetensors", average_with=[older])
    plain = load_checkpoint(export_checkpoint(good_checkpoint, tmp_path / "plain.safetensors")).net
    for name, tensor in load_checkpoint(soup).net.state_dict().items():
        assert torch.equal(tensor, plain.state_dict()[name]), name
