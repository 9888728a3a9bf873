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
    Path("synthetic-soft").write_text("a file of that name does not shadow the zoo's model")
    assert zoo.checkpoint_path("synthetic-soft") == DOCS_MODELS / "synthetic_soft.safetensors"
    assert zoo.checkpoint_path("./synthetic-soft") == Path("synthetic-soft")
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
    # from_checkpoint takes a name as --checkpoint does (it said "no such checkpoint file")
    assert str(Captioner.from_checkpoint("synthetic-soft").path) == str(model.path)
    with pytest.raises(zoo.ZooError, match="no file 'synthtic-soft'.*did you mean synthetic-soft"):
        Captioner.from_checkpoint("synthtic-soft")


def test_cli_models_lists_and_checkpoint_takes_a_name(capsys, photo) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name in zoo.MODELS:
        assert name in out
    assert "MiB" in out and "searched:" in out
    assert main(["caption", str(photo), "--checkpoint", "flickr8k-soft-sct"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("captioning caption: error: no file 'flickr8k-soft-sct'")
    assert "did you mean flickr8k-soft-scst" in err[0]  # one line, no usage block before it
    assert main(["caption", str(photo), "--checkpoint", "synthetic-soft", "--json"]) == 0
    assert '"caption"' in capsys.readouterr().out


def test_version_is_the_installed_metadata(capsys) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"captioning {version('captioning')}"


def _zoo_copy(tmp_path, monkeypatch) -> Path:
    """synthetic-soft's file, copied into a folder of $CAPTIONING_MODELS (the first searched)."""
    folder = tmp_path / "zoo"
    folder.mkdir()
    shutil.copy(DOCS_MODELS / "synthetic_soft.safetensors", folder)
    monkeypatch.setenv(zoo.ENV, str(folder))
    return folder / "synthetic_soft.safetensors"


def test_the_bytes_hashed_are_the_bytes_loaded(tmp_path, monkeypatch) -> None:
    """A file swapped after the SHA-256 check (here: another model's bytes) is not what gets loaded."""
    import torch

    from captioning.checkpoints.load import load_checkpoint

    path = _zoo_copy(tmp_path, monkeypatch)
    original = load_checkpoint(DOCS_MODELS / "synthetic_soft.safetensors")
    assert zoo.resolve("synthetic-soft") == path
    path.write_bytes((DOCS_MODELS / "flickr8k_transformer.safetensors").read_bytes())  # the swap
    loaded = load_checkpoint(path)
    assert loaded.vocab.to_dict() == original.vocab.to_dict()
    reference = original.net.state_dict()
    assert all(torch.equal(v, reference[k]) for k, v in loaded.net.state_dict().items())
    other = tmp_path / "unchecked.safetensors"  # a file the zoo never resolved is read from disk
    other.write_bytes(path.read_bytes())
    assert load_checkpoint(other).vocab.to_dict() != original.vocab.to_dict()


def test_a_file_named_like_a_model_here_does_not_shadow_it(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "synthetic-soft").write_bytes(b"whatever is here")
    assert zoo.checkpoint_path("synthetic-soft") == zoo.resolve("synthetic-soft")
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and "the zoo model" in warning[0] and "./synthetic-soft" in warning[0]
    assert zoo.checkpoint_path("./synthetic-soft") == Path("./synthetic-soft")  # the file, asked for as one


def test_tune_write_refuses_a_zoo_file_before_decoding(tmp_path, monkeypatch, capsys) -> None:
    path = _zoo_copy(tmp_path, monkeypatch)
    before = path.read_bytes()
    for checkpoint in ("synthetic-soft", str(path)):  # by name, and by the path of the file
        code = main(
            [
                "tune",
                "--checkpoint",
                checkpoint,
                "--write",
                "--out",
                str(tmp_path / "t.json"),
                "data=synthetic",
            ]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert code != 0 and len(err) == 1
        assert "is the file of zoo model 'synthetic-soft'" in err[0] and "Copy it first" in err[0]
    assert path.read_bytes() == before and not (tmp_path / "t.json").exists()
    assert zoo.resolve("synthetic-soft") == path  # still passes its own check


def test_storing_decoding_defaults_refuses_a_zoo_file(tmp_path, monkeypatch) -> None:
    from captioning.checkpoints.defaults import write_decoding_defaults

    path = _zoo_copy(tmp_path, monkeypatch)
    link = tmp_path / "link.safetensors"
    link.symlink_to(path)
    for target in (path, link):
        with pytest.raises(zoo.ZooError, match="Copy it first"):
            write_decoding_defaults(target, {"num_beams": 2})
    copy = tmp_path / "mine.safetensors"
    shutil.copy(path, copy)
    assert write_decoding_defaults(copy, {"num_beams": 2})["num_beams"] == 2
