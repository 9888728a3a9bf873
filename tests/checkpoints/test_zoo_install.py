"""``captioning models install --from``: the zoo's files from a clone, a folder or an archive into the
user's model folder, each SHA-256 checked; a damaged file is refused and leaves nothing behind."""

from __future__ import annotations

import shutil
import tarfile
import zipfile

import pytest

from captioning import zoo
from captioning.cli.main import main
from captioning.inference.captioner import Captioner

from support import REPO

SYNTHETIC = REPO / "docs" / "models" / "synthetic_soft.safetensors"


@pytest.fixture
def clone(tmp_path):
    """A clone-like folder: docs/models/ with the synthetic model and a damaged Flickr8k one."""
    models = tmp_path / "clone" / "docs" / "models"
    models.mkdir(parents=True)
    shutil.copy(SYNTHETIC, models)
    (models / "flickr8k_soft_xe.safetensors").write_bytes(b"truncated download")
    return tmp_path / "clone"


def test_install_from_a_clone_checks_every_file_and_the_installed_model_loads(
    clone, tmp_path, capsys, monkeypatch
):
    dest = tmp_path / "installed"
    assert main(["models", "install", "--from", str(clone), "--to", str(dest)]) == 1  # one file refused
    out, err = capsys.readouterr()
    assert out == f"synthetic-soft: installed ({dest / 'synthetic_soft.safetensors'})\n"
    assert err.startswith("flickr8k-soft-xe: not installed: its SHA-256 is ")
    assert sorted(p.name for p in dest.iterdir()) == ["synthetic_soft.safetensors"]  # no temp left
    assert zoo.sha256_of(dest / "synthetic_soft.safetensors") == zoo.MODELS["synthetic-soft"].sha256
    monkeypatch.setenv(zoo.ENV, str(dest))
    assert Captioner.from_pretrained("synthetic-soft").path == dest / "synthetic_soft.safetensors"
    assert main(["models", "install", "--from", str(clone / "docs" / "models"), "--to", str(dest)]) == 1
    assert "synthetic-soft: already installed" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_install_from_an_archive_reads_members_by_file_name_only(kind, tmp_path, capsys):
    archive = tmp_path / f"models.{kind}"
    member = "../../escape/synthetic_soft.safetensors"  # a hostile stored path: never used as a path
    if kind == "zip":
        with zipfile.ZipFile(archive, "w") as z:
            z.write(SYNTHETIC, member)
    else:
        with tarfile.open(archive, "w:gz") as t:
            t.add(SYNTHETIC, member)
    dest = tmp_path / "a" / "b"
    assert main(["models", "install", "--from", str(archive), "--to", str(dest)]) == 0
    assert [p.name for p in dest.iterdir()] == ["synthetic_soft.safetensors"]
    assert not (tmp_path / "escape").exists()
    assert zoo.sha256_of(dest / "synthetic_soft.safetensors") == zoo.MODELS["synthetic-soft"].sha256


def test_the_default_folder_is_the_user_cache(clone, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(zoo.ENV, raising=False)
    main(["models", "install", "--from", str(clone)])
    assert (tmp_path / "home" / ".cache" / "captioning" / "models" / "synthetic_soft.safetensors").is_file()


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("missing", "no such file or folder"),
        ("empty", "holds none of the zoo's files"),
        ("notes.txt", "expected a clone, a folder of model files, or a .zip/.tar archive"),
    ],
)
def test_a_source_without_models_is_one_line(source, message, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("hello")
    assert main(["models", "install", "--from", str(tmp_path / source), "--to", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and not (tmp_path / "d").exists()


def test_a_file_damaged_in_the_archive_is_refused(tmp_path, capsys):
    archive = tmp_path / "models.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("synthetic_soft.safetensors", SYNTHETIC.read_bytes()[:-1] + b"\0")
    assert main(["models", "install", "--from", str(archive), "--to", str(tmp_path / "d")]) == 2
    assert list((tmp_path / "d").iterdir()) == []
    assert "not installed" in capsys.readouterr().err
