"""Broken checkpoints given to the commands are refused in one line naming the file and the culprit."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from captioning.checkpoints.format import CHECKPOINT_KEY
from captioning.cli.main import main as captioning_main

from support.hostile import (
    assert_one_line,
    mutated,
    set_config,
    set_first,
)

BROKEN = {
    "negative-running-var": (set_first("running_var", lambda t: -torch.ones_like(t)), "has negative values"),
    "meta-tensor": (set_first("weight", lambda t: torch.empty_like(t, device="meta")), "on the meta device"),
    "sparse-tensor": (
        set_first("embedding.weight", lambda t: t.to_sparse()),
        "torch.sparse_coo (not dense)",
    ),
}


def test_a_yaml_alias_bomb_in_a_checkpoint_is_refused_before_parsing(
    good_checkpoint, photo, tmp_path, capsys
):
    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{n}: &{n} [{','.join(['*' + p] * 9)}]\n" for p, n in zip("abcdef", "bcdefg")
    )
    bad = mutated(good_checkpoint, tmp_path / "bomb.ckpt", set_config(bomb + "encoder: {}\n"))
    assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2  # in milliseconds
    assert_one_line(capsys.readouterr().err, str(bad), "anchors/aliases")


def test_vocabulary_words_with_whitespace_are_refused(good_checkpoint, photo, tmp_path, capsys):
    def spaced(c: dict) -> None:
        c[CHECKPOINT_KEY]["vocab"]["itos"][5] = "two\nlines"

    bad = mutated(good_checkpoint, tmp_path / "nl.ckpt", spaced)
    assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2
    assert_one_line(capsys.readouterr().err, str(bad), "vocabulary word 5")


def test_a_legacy_pickle_is_refused_in_one_line_without_torch_warnings(photo, tmp_path, capsys) -> None:
    import os
    import pickle

    bad = tmp_path / "rp.ckpt"
    bad.write_bytes(pickle.dumps(os.getcwd))
    assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2
    assert_one_line(capsys.readouterr().err, str(bad))


def test_a_pipe_or_device_as_checkpoint_is_named_as_such(photo: Path, tmp_path: Path, capsys) -> None:
    import os

    fifo = tmp_path / "fifo.ckpt"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        assert captioning_main(["caption", str(photo), "--checkpoint", str(path)]) == 2
        assert_one_line(capsys.readouterr().err, str(path), "is not a regular file")


def test_a_checkpoint_without_its_image_size_or_with_a_list_state_dict_is_refused(
    good_checkpoint: Path, photo: Path, tmp_path: Path, capsys
) -> None:
    no_size = mutated(
        good_checkpoint, tmp_path / "nosize.ckpt", lambda c: c[CHECKPOINT_KEY].pop("image_size")
    )
    as_list = mutated(good_checkpoint, tmp_path / "list.ckpt", lambda c: c.__setitem__("state_dict", [1, 2]))
    for bad, culprit in ((no_size, "image_size = None"), (as_list, "'state_dict' is a list")):
        assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2
        assert_one_line(capsys.readouterr().err, str(bad), culprit)


def test_a_decoding_entry_that_is_not_a_mapping_is_named_with_what_was_expected(
    good_checkpoint, photo, tmp_path, capsys
) -> None:
    bad = mutated(
        good_checkpoint, tmp_path / "k03.ckpt", lambda c: c[CHECKPOINT_KEY].__setitem__("decoding", [3, 20])
    )
    assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2
    assert_one_line(
        capsys.readouterr().err, str(bad), "decoding: expected a mapping of decoding options", "got a list"
    )


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_tensors_that_cannot_be_weights_are_refused_by_caption_and_export(
    kind, good_checkpoint, photo, tmp_path, capsys
) -> None:
    mutate, fragment = BROKEN[kind]
    bad = mutated(good_checkpoint, tmp_path / f"{kind}.ckpt", mutate)
    assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2
    assert_one_line(capsys.readouterr().err, str(bad), fragment)
    assert captioning_main(["export", str(bad), str(tmp_path / "out.safetensors")]) == 2
    assert_one_line(capsys.readouterr().err, str(bad), fragment)
    assert not (tmp_path / "out.safetensors").exists()


def test_weights_whose_scores_overflow_caption_nothing(good_checkpoint, photo, tmp_path, capsys) -> None:
    # finite weights (3e38 < float32's max) whose logits overflow to inf: the scores are NaN
    huge = mutated(
        good_checkpoint, tmp_path / "huge.ckpt", set_first("out.weight", lambda t: t.sign() * 3e38)
    )
    assert captioning_main(["caption", str(photo), "--checkpoint", str(huge), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # no caption, and no bare NaN in a JSON line
    assert str(photo) in err and "scores are not finite (NaN/inf)" in err
    from captioning import Captioner

    with pytest.raises(ValueError, match=re.escape("<input 0>: the network's scores are not finite")):
        Captioner.from_checkpoint(huge).caption(torch.rand(3, 16, 16))


def test_a_checkpoint_named_like_an_export_loads_and_an_empty_file_is_named(
    good_checkpoint, photo, tmp_path, capsys
) -> None:
    renamed = tmp_path / "renamed.safetensors"
    renamed.write_bytes(good_checkpoint.read_bytes())
    assert captioning_main(["caption", str(photo), "--checkpoint", str(renamed)]) == 0
    assert capsys.readouterr().out.startswith(f"{photo}\t")
    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    assert captioning_main(["caption", str(photo), "--checkpoint", str(empty)]) == 2
    line = assert_one_line(capsys.readouterr().err, str(empty), "the file is empty (0 bytes)")
    assert "weights_only" not in line


def test_a_broken_overflowing_checkpoint_json_is_never_printed(
    good_checkpoint, photo, tmp_path, capsys
) -> None:
    """--json lines are valid JSON (no bare NaN): every printed line parses."""
    assert captioning_main(["caption", str(photo), "--checkpoint", str(good_checkpoint), "--json"]) == 0
    for line in capsys.readouterr().out.splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"bare {name} in --json output"))


def test_more_broken_checkpoints_are_one_line(good_checkpoint, photo, tmp_path, capsys) -> None:
    nested = "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)) + "  " * 200 + "x: 1\n"
    cases = {
        "deep.ckpt": (
            lambda c: c["captioning"].__setitem__("net_config", nested),
            "nested more than 32 levels",
        ),
        "stray.ckpt": (
            lambda c: c["state_dict"].__setitem__("extra_int", 5),
            "'extra_int' is not part of the network",
        ),
    }
    for name, (mutate, fragment) in cases.items():
        bad = mutated(good_checkpoint, tmp_path / name, mutate)
        assert captioning_main(["caption", str(photo), "--checkpoint", str(bad)]) == 2
        assert_one_line(capsys.readouterr().err, str(bad), fragment)
    zeros = tmp_path / "zeros.ckpt"
    zeros.write_bytes(b"\0" * 64)
    assert captioning_main(["caption", str(photo), "--checkpoint", str(zeros)]) == 2
    line = assert_one_line(capsys.readouterr().err, str(zeros), "not a readable checkpoint")
    assert "trusted source" not in line and "weights_only" not in line
    blocked = tmp_path / "file"
    blocked.write_text("a file")
    assert captioning_main(["export", str(good_checkpoint), str(blocked / "x.safetensors")]) == 2
    assert_one_line(capsys.readouterr().err, f"cannot create its folder {blocked}")


def test_missing_weights_are_counted_not_listed(good_checkpoint, photo, tmp_path, capsys) -> None:
    empty = mutated(good_checkpoint, tmp_path / "empty_sd.ckpt", lambda c: c.__setitem__("state_dict", {}))
    assert captioning_main(["caption", str(photo), "--checkpoint", str(empty)]) == 2
    line = assert_one_line(capsys.readouterr().err, str(empty), "the weights do not fit", "missing (e.g.")
    assert len(line) < 400
