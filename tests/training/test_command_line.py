"""The command line as Hydra reads it, refused in one line with the fix: an unknown key names its nearest
key (beside flags, in a sweep, and among a ``--config-dir``'s own configs), and a value Hydra's override
grammar cannot read says how to write it (``captioning-train``, and ``evaluate`` through the same check)."""

from __future__ import annotations

import sys

import pytest

from captioning.cli.main import main as captioning_main

from support.hostile import assert_one_line


@pytest.mark.parametrize(
    "argv",
    [["--cfg", "job", "trainer.max_epoch=1"], ["-m", "seed=0,1", "trainer.max_epoch=1"], ["-m", "trainer.max_epoch=1,2"]],
    ids=["print the config", "a sweep", "the misspelt key swept"],
)  # fmt: skip
def test_an_unknown_key_beside_flags_names_the_nearest_key(argv, tmp_path, monkeypatch, capsys):
    """With --cfg or -m the line was Hydra's "Could not override ... use +trainer.max_epoch=1" (advice to
    add a key that nothing reads), where a plain run names the nearest key."""
    from captioning.training.train import cli

    monkeypatch.setattr(sys, "argv", ["captioning-train", *argv, f"hydra.sweep.dir={tmp_path}"])
    with pytest.raises(SystemExit) as info:
        cli()
    assert info.value.code == 2
    assert_one_line(capsys.readouterr().err, "captioning-train: error:", "did you mean trainer.max_epochs?")


@pytest.mark.parametrize(
    ("files", "argv", "fragment"),
    [
        ({"data/my_scenes.yaml": "defaults:\n  - synthetic\n  - _self_\nscene_factor: 3\n"},
         ["data=my_scenes", "data.scene_factr=4"], "data.scene_factr: no such config key; did you mean data.scene_factor?"),
        ({"mine.yaml": "defaults:\n  - train\n  - _self_\nmy_batch_factor: 3\n"},
         ["--config-name", "mine", "my_batch_factr=4"], "my_batch_factr: no such config key; did you mean my_batch_factor?"),
        ({"mine.yaml": "defaults:\n  - train\n  - _self_\n"},
         ["--config-name", "mine", "zzz_qqq=4"], "see `captioning-train --config-dir CONF --config-name mine --cfg job` for the keys"),
        ({"experiment/mine.yaml": "# @package _global_\ndefaults:\n  - override /model/decoder: sofft\n"},
         ["experiment=mine"], "model/decoder=sofft (chosen in a config file's defaults list, not on the command line): "
         "no such option; did you mean model/decoder=soft?"),
    ],
    ids=["a group option of the user's", "the user's own config", "no key close", "an option its experiment misspells"],
)  # fmt: skip
def test_a_misspelt_key_of_a_users_config_dir_names_its_nearest_key(
    files, argv, fragment, tmp_path, monkeypatch, capsys
):
    """With ``--config-dir``, the nearest key is looked up in the configs the command line composes: a key
    only the user's folder has (and a config only it has) used to get "see captioning/conf/... for the
    keys", read from the package's own configs."""
    from captioning.training.train import cli

    conf = tmp_path / "conf"
    for name, text in files.items():
        (conf / name).parent.mkdir(parents=True, exist_ok=True)
        (conf / name).write_text(text)
    argv = ["captioning-train", "--config-dir", str(conf), *argv, f"hydra.run.dir={tmp_path / 'run'}"]
    monkeypatch.setattr(sys, "argv", [*argv, "--cfg", "job"])
    with pytest.raises(SystemExit) as info:
        cli()
    assert info.value.code == 2
    assert_one_line(capsys.readouterr().err.replace(str(conf), "CONF"), fragment)


@pytest.mark.parametrize("flags", [[], ["-m"], ["--cfg", "job"]], ids=["run", "sweep", "print"])
@pytest.mark.parametrize(
    ("value", "why", "fix"),
    [("~/f8k", "token recognition error at: '~'", "as $HOME, which the shell expands: paths.flickr8k=$HOME/f8k"),
     ("/data/f8k(1)", "mismatched input '('", """quote it for Hydra inside the shell's quotes: 'paths.flickr8k="/data/f8k(1)"'"""),
     ("/a(1),/b", "mismatched input '('", "quote each value for Hydra inside the shell's quotes"),
     ("rang(0,3)", "HydraException while evaluating 'rang(0,3)': Unknown function 'rang'", "see https://hydra.cc/docs/advanced/override_grammar/basic")],
    ids=["tilde", "parenthesis", "a sweep's values", "a misspelt function"],
)  # fmt: skip
def test_a_value_hydras_grammar_cannot_read_says_how_to_write_it(
    flags, value, why, fix, tmp_path, monkeypatch, capsys
):
    """``paths.flickr8k=~/f8k`` (the shell leaves a ~ after key=) was Hydra's "LexerNoViableAltException"
    and, in a sweep, a traceback; now one line with the fix, in training and evaluate. Quoting is advised
    only where it is the fix: a sweep's values each get their own quotes, a misspelt function none."""
    from captioning.training.train import cli

    override = f"paths.flickr8k={value}"
    fragment = f"{override}: Hydra's override grammar cannot read it ({why}"
    argv = ["captioning-train", *flags, "data=flickr8k", override, f"hydra.sweep.dir={tmp_path}"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as info:
        cli()
    assert info.value.code == 2
    assert_one_line(capsys.readouterr().err, "captioning-train: error:", fragment, fix)
    if not flags:  # evaluate composes through the same check
        assert (
            captioning_main(["evaluate", "--checkpoint", "flickr8k-soft-scst", "data=flickr8k", override])
            == 2
        )
        assert_one_line(capsys.readouterr().err, "captioning evaluate: error:", fragment, fix)
