"""Models by name (captioning/zoo.py): the registry matches docs/models, names resolve in the documented
order with their SHA-256 checked, and a wrong name or file is one clear line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from captioning import zoo
from captioning.cli.main import main

from support import REPO

DOCS_MODELS = REPO / "docs" / "models"


def test_every_file_of_docs_models_is_in_the_zoo_with_its_sha256() -> None:
    assert {m.file for m in zoo.MODELS.values()} == {p.name for p in DOCS_MODELS.glob("*.safetensors")}
    for model in zoo.MODELS.values():
        assert zoo.sha256_of(DOCS_MODELS / model.file) == model.sha256, model.name
        assert model.name == model.file.removesuffix(".safetensors").replace("_", "-")


def test_search_order_env_then_clone_then_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(zoo.ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert zoo.model_dirs() == [DOCS_MODELS, tmp_path / "home" / ".cache" / "captioning" / "models"]
    assert zoo.resolve("synthetic-soft") == DOCS_MODELS / "synthetic_soft.safetensors"
    mine = tmp_path / "mine"
    mine.mkdir()
    shutil.copy(DOCS_MODELS / "synthetic_soft.safetensors", mine)
    monkeypatch.setenv(zoo.ENV, str(mine))
    assert zoo.resolve("synthetic-soft") == mine / "synthetic_soft.safetensors"


def test_a_changed_file_is_one_line_naming_the_mismatch(tmp_path, monkeypatch) -> None:
    (tmp_path / "synthetic_soft.safetensors").write_bytes(b"not the model")
    monkeypatch.setenv(zoo.ENV, str(tmp_path))
    with pytest.raises(zoo.ZooError, match="SHA-256") as err:
        zoo.resolve("synthetic-soft")
    assert "\n" not in str(err.value)


def test_a_missing_file_names_the_folders_searched(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(zoo, "clone_models_dir", lambda: None)
    monkeypatch.setenv(zoo.ENV, str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(zoo.ZooError, match=f"in none of {tmp_path}") as err:
        zoo.resolve("flickr8k-soft-scst")
    assert "nothing is downloaded" in str(err.value)
    assert zoo.listing()[0]["file"] is None


def test_an_unknown_name_suggests_the_nearest_and_lists_the_zoo() -> None:
    with pytest.raises(zoo.ZooError, match="did you mean flickr8k-soft-scst") as err:
        zoo.resolve("flickr8k-soft-sct")
    assert "synthetic-soft" in str(err.value)


def test_checkpoint_path_keeps_files_and_resolves_names(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert zoo.checkpoint_path("run/best.ckpt") == Path("run/best.ckpt")
    assert zoo.checkpoint_path("missing.safetensors") == Path("missing.safetensors")
    assert zoo.checkpoint_path("synthetic-soft") == DOCS_MODELS / "synthetic_soft.safetensors"
    Path("synthetic-soft").write_text("a file of that name wins")
    assert zoo.checkpoint_path("synthetic-soft") == Path("synthetic-soft")
    with pytest.raises(zoo.ZooError, match="no file 'synthtic-soft'.*did you mean synthetic-soft"):
        zoo.checkpoint_path("synthtic-soft")


@pytest.mark.parametrize("spelling", ["flickr8k-soft-scst", "flickr8k_soft_scst", "Flickr8k-Soft-SCST"])
def test_a_name_resolves_with_hyphens_or_underscores(spelling, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # no file of that name here
    assert zoo.lookup(spelling) is zoo.MODELS["flickr8k-soft-scst"]
    assert zoo.checkpoint_path(spelling) == DOCS_MODELS / "flickr8k_soft_scst.safetensors"


def test_a_misspelt_underscore_name_still_gets_the_nearest_names() -> None:
    with pytest.raises(zoo.ZooError, match="did you mean flickr8k-soft-scst"):
        zoo.resolve("flickr8k_soft_sct")


def test_from_pretrained_loads_by_name() -> None:
    from captioning import Captioner

    model = Captioner.from_pretrained("synthetic-soft")
    assert str(model.path).endswith("synthetic_soft.safetensors")


def test_cli_models_lists_and_checkpoint_takes_a_name(capsys, photo) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name in zoo.MODELS:
        assert name in out
    assert "MiB" in out and "searched:" in out
    with pytest.raises(SystemExit) as stop:
        main(["caption", str(photo), "--checkpoint", "flickr8k-soft-sct"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert (
        "did you mean flickr8k-soft-scst" in err.strip().splitlines()[-1]
    )  # argparse's usage, then one line
    assert main(["caption", str(photo), "--checkpoint", "synthetic-soft", "--json"]) == 0
    assert '"caption"' in capsys.readouterr().out


def test_version_is_the_installed_metadata(capsys) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"captioning {version('captioning')}"
