"""`captioning caption` with bad arguments, flags and file names: one line, and the good inputs still captioned."""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

import pytest
from PIL import Image

from captioning.cli.main import main
from captioning.cli.main import main as captioning_main
from captioning.data.synthetic import render_scene
from captioning.inference.trained_on import synthetic_note

from support.corpus import (
    BAD_IMAGE_NAMES,
    ODD_BUT_VALID,
    write_checkpoint,
)
from support.hostile import (
    assert_one_line,
    error_lines,
)


def test_an_overlay_never_overwrites_an_input_and_its_format_is_checked_first(
    good_checkpoint, photo, tmp_path, capsys
):
    before = photo.read_bytes()
    argv = ["caption", str(photo), "--checkpoint", str(good_checkpoint)]
    assert captioning_main([*argv, "--overlay", str(photo)]) == 2
    assert_one_line(capsys.readouterr().err, "would overwrite the input image")
    assert photo.read_bytes() == before
    argv2 = ["caption", str(photo), str(photo), "--checkpoint", str(good_checkpoint)]
    assert captioning_main([*argv2, "--overlay", str(tmp_path / "att.txt")]) == 2
    out, err = capsys.readouterr()
    assert_one_line(err, "att.txt", "not an image format")
    assert out == ""


def test_tabs_and_newlines_in_file_names_keep_one_record_per_line(good_checkpoint, photo, tmp_path, capsys):
    odd = [tmp_path / "t\tab.png", tmp_path / "n\nl.png"]
    for path in odd:
        path.write_bytes(photo.read_bytes())
    assert captioning_main(["caption", *map(str, odd), "--checkpoint", str(good_checkpoint)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == [
        str(tmp_path / "t\\tab.png"),
        str(tmp_path / "n\\nl.png"),
    ]


def test_sampling_flags_work_with_a_beam_search_checkpoint(good_checkpoint, photo, capsys) -> None:
    argv = ["caption", str(photo), "--checkpoint", str(good_checkpoint), "--do-sample", "--top-p", "0.9",
            "--num-return-sequences", "3", "--seed", "0", "--json"]  # fmt: skip
    assert captioning_main(argv) == 0
    assert len(json.loads(capsys.readouterr().out)["candidates"]) == 3


@pytest.mark.parametrize(
    "flags,fragment",
    [
        (["--do-sample", "--temperature", "inf"], "temperature=inf"),
        (["--do-sample", "--seed", "99999999999999999999999"], "--seed"),
        (["--device", "meta"], "device='meta'"),
        (["--device", "mps"], "device=mps"),  # not on this machine: one line, not torch's traceback
        (["--device", "cuda:7"], "device=cuda:7"),  # no CUDA, or fewer GPUs than 8
    ],
)
def test_more_bad_flags_are_one_line(flags, fragment, good_checkpoint, photo, capsys) -> None:
    assert captioning_main(["caption", str(photo), "--checkpoint", str(good_checkpoint), *flags]) == 2
    assert_one_line(capsys.readouterr().err, fragment)


def test_a_folder_a_glob_matches_is_read_as_a_folder_given(good_checkpoint, photo, tmp_path, capsys):
    # 'shots/*' matching shots/2020/ reads its images, as the shell's expansion (shots/2020) would.
    (tmp_path / "shots" / "2020").mkdir(parents=True)
    photo.rename(tmp_path / "shots" / "2020" / "photo.png")
    assert (
        captioning_main(["caption", str(tmp_path / "shots" / "*"), "--checkpoint", str(good_checkpoint)]) == 0
    )
    out, err = capsys.readouterr()
    assert str(tmp_path / "shots" / "2020" / "photo.png") in out
    assert err == f"captioning caption: note: {synthetic_note(good_checkpoint)}\n"  # a scene model, a photo


def test_files_a_folder_leaves_out_for_their_suffix_are_named(good_checkpoint, photo, tmp_path, capsys):
    folder = tmp_path / "shots"
    folder.mkdir()
    photo.rename(folder / "photo.png")
    (folder / "notes.txt").write_text("not an image")
    (folder / "raw.cr2").write_bytes(b"\x00" * 16)
    assert captioning_main(["caption", str(folder), "--checkpoint", str(good_checkpoint)]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and str(folder / "photo.png") in out  # the image is captioned
    scene_note = f"captioning caption: note: {synthetic_note(good_checkpoint)}\n"  # a scene model, a photo
    assert scene_note in err
    line = assert_one_line(
        err.replace(scene_note, ""), str(folder), "left out 2 entries", "notes.txt", "raw.cr2"
    )
    assert line.startswith("captioning caption: note: ")


def test_an_empty_image_argument_is_refused_not_read_as_the_current_folder(
    good_checkpoint: Path, photo: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.chdir(photo.parent)  # a folder with an image in it: '' must not caption it
    assert captioning_main(["caption", "", "--checkpoint", str(good_checkpoint)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "image argument 1 is an empty string" in err
    assert captioning_main(["caption", str(photo), "", "--checkpoint", str(good_checkpoint)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{photo}\t") and "image argument 2 is an empty string" in err


def test_a_closed_stdout_and_ctrl_c_end_the_command_quietly(good_checkpoint: Path, photo: Path) -> None:
    import signal
    import subprocess

    # `| head -c 1`: the reader leaves after one byte; no BrokenPipeError traceback, the status of SIGPIPE.
    cmd = [sys.executable, "-m", "captioning.cli.main", "caption", *[str(photo)] * 4,
           "--checkpoint", str(good_checkpoint), "--json"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(1)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, 141) and "Traceback" not in err, err
    # Ctrl-C while the command runs (after its first caption, so inside the command, not in Python's
    # start-up): one line, status 130, or 0 when the remaining captions finished first.
    many = [*cmd[:4], *[str(photo)] * 200, *cmd[8:]]
    proc = subprocess.Popen(many, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    proc.stdout.read()
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert code in (0, 130) and "Traceback" not in err, (code, err)
    if code == 130:
        assert error_lines(err)[-1] == "captioning caption: interrupted"


def test_an_empty_checkpoint_argument_and_an_overlong_image_name_are_named(
    good_checkpoint: Path, photo: Path, capsys
) -> None:
    with pytest.raises(SystemExit) as info:
        captioning_main(["caption", str(photo), "--checkpoint", ""])
    assert info.value.code == 2 and "an empty string is not a file path" in capsys.readouterr().err
    long = photo.parent / ("x" * 300 + ".png")
    assert captioning_main(["caption", str(photo), str(long), "--checkpoint", str(good_checkpoint)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{photo}\t") and "cannot be opened: File name too long" in err


def test_overlays_are_listed_only_once_written(good_checkpoint, photo, tmp_path, monkeypatch, capsys) -> None:
    args = ["caption", str(photo), "--checkpoint", str(good_checkpoint), "--overlay"]
    assert captioning_main([*args, "/proc/nope/o.png"]) == 2  # checked before any image is decoded
    assert_one_line(
        capsys.readouterr().err, "--overlay /proc/nope/o.png", "cannot create the folder /proc/nope"
    )

    def no_space(self, fp, format=None, **params):  # noqa: A002 - Pillow's name
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Image.Image, "save", no_space)
    out_png = tmp_path / "o.png"
    assert captioning_main([*args, str(out_png)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{photo}\t") and "(overlay:" not in out  # the caption, not a file never written
    assert "No space left on device" in err and list(tmp_path.iterdir()) == [photo]  # no 0-byte PNG


def test_caption_cli_captions_every_good_file_and_reports_every_bad_one(bad, tmp_path: Path, capsys) -> None:
    checkpoint = write_checkpoint(tmp_path / "model.ckpt")
    good = []
    for i, name in enumerate(("scene.png", "cmyk.jpg", "exif_rotated_cw.jpg", "gray16.png")):
        path = tmp_path / name
        if name == "scene.png":
            Image.fromarray(render_scene((5, i)).image).save(path)
        else:
            ODD_BUT_VALID[name][0](path)
        good.append(path)
    bad_paths = [bad[name][0] for name in BAD_IMAGE_NAMES]
    mixed = [good[0], *bad_paths[:5], good[1], good[2], *bad_paths[5:], good[3]]
    code = main(["caption", *map(str, mixed), "--checkpoint", str(checkpoint), "--json"])
    out, err = capsys.readouterr()
    assert code == 1
    captioned = [json.loads(line) for line in out.strip().splitlines()]
    assert [c["image"] for c in captioned] == [str(p) for p in good]  # every good one, in order
    assert all(isinstance(c["caption"], str) and c["grid"] == [3, 3] for c in captioned)
    err_lines = err.strip().splitlines()
    for name in BAD_IMAGE_NAMES:
        path, fragment = bad[name]
        assert any(
            line.startswith(f"captioning caption: error: {path}: ") and fragment in line for line in err_lines
        ), name
    assert (
        err_lines[-1]
        == f"captioning caption: {len(BAD_IMAGE_NAMES)} of {len(mixed)} images could not be read"
    )


def test_caption_cli_refuses_beam_zero(tmp_path: Path, capsys, good_checkpoint) -> None:
    image = tmp_path / "scene.png"
    Image.fromarray(render_scene((5, 0)).image).save(image)
    code = main(["caption", str(image), "--checkpoint", str(good_checkpoint), "--num-beams", "0"])
    assert code == 2 and "num_beams=0: expected an integer in [1, 64]" in capsys.readouterr().err


def test_the_plain_output_shows_the_n_best_list_when_asked(good_checkpoint, photo, capsys) -> None:
    argv = ["caption", str(photo), "--checkpoint", str(good_checkpoint), "--num-beams", "3"]
    assert captioning_main([*argv, "--num-return-sequences", "3", "--json"]) == 0
    candidates = json.loads(capsys.readouterr().out)["candidates"]
    assert captioning_main([*argv, "--num-return-sequences", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t") == [str(photo), candidates[0]["caption"]]
    assert lines[1:] == [
        f"\t{k}. {c['caption']}  (score {c['score']:.3f})" for k, c in enumerate(candidates, 1)
    ]
    assert captioning_main(argv) == 0  # one caption asked for: one line
    assert len(capsys.readouterr().out.splitlines()) == 1
