"""docs/design/extending.md: every worked example runs as the page shows it, not a copy.

Each block titled with a path (```python title="captioning/models/attention/cosine.py"```) is written to
that path under a temporary folder: a Python module joins its package's ``__path__`` (the real package
gains no file), a config joins Hydra's search path, and the modules a ``captioning/models/__init__.py``
block names are imported, as its one import line would, which registers their classes (``@register``)
until the test ends (the ``model_registry`` fixture). Then each new
attention layer and the new decoder train the tiny model one step from the composed config, the checkpoint
is loaded back through the closed registry and decoded greedily; the reader reads three records through
``data=tsv``. No section may show more than three files.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import sys
from pathlib import Path

import hydra
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.errors import InstantiationException
from omegaconf import open_dict
from PIL import Image

from captioning.metrics import names

from support import CONF, REPO

PAGE = REPO / "docs" / "design" / "extending.md"
BLOCK = re.compile(r'^```(?:python|yaml) title="([^"]+)"\n(.*?)^```$', re.S | re.M)
MODELS = "captioning/models/__init__.py"  # the package imports every module that registers
NAMES = "captioning/metrics/names.py"  # the metric registries: its new entries are applied, not the file


def page_sections() -> dict[str, list[tuple[str, str]]]:
    """{section heading: [(path, code) of each titled block]}."""
    parts = re.split(r"^## ", PAGE.read_text(encoding="utf-8"), flags=re.M)[1:]
    return {part.splitlines()[0].strip(): BLOCK.findall(part) for part in parts}


SECTIONS = page_sections()
EXAMPLES = {  # section -> what the test runs
    "Adding a soft attention layer": ["model/decoder/attention=cosine"],
    "Adding a stochastic attention layer": ["model/decoder/attention=sampled"],
    "Adding a decoder": ["model/decoder=gru"],
}


@pytest.mark.parametrize("section", [*EXAMPLES, "Adding a dataset reader", "Adding a caption metric"])
def test_each_part_touches_at_most_three_files(section: str) -> None:
    paths = [path for path, _ in SECTIONS[section]]
    assert paths and len(paths) == len(set(paths)) <= 3, paths
    assert f"Files touched: **{len(paths)}**" in "## ".join(
        part for part in PAGE.read_text(encoding="utf-8").split("\n## ") if part.startswith(section)
    ), f"{section}: the page's count is not the number of files it shows ({len(paths)})"


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_registry):
    """``install(section)`` writes the section's files under tmp_path, makes its modules importable and
    imports the ones its ``captioning/models/__init__.py`` line names (their ``@register`` runs); returns
    the folder to add to Hydra's search path."""
    modules: list[str] = []

    def install(section: str) -> Path:
        root = tmp_path / "extension"
        files = dict(SECTIONS[section])
        for path, code in files.items():
            if path in (MODELS, NAMES):
                continue
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(code, encoding="utf-8")
            if target.suffix == ".py":  # the new module, a sibling of its package's own
                package = importlib.import_module(".".join(Path(path).parent.parts))
                monkeypatch.setattr(package, "__path__", [*package.__path__, str(target.parent)])
                modules.append(".".join(Path(path).with_suffix("").parts))
        for node in ast.parse(files.get(MODELS, "")).body:  # its one import line: the new module, imported
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if f"{node.module}.{alias.name}" not in sys.modules:
                        importlib.import_module(f"{node.module}.{alias.name}")
        for node in ast.parse(files.get(NAMES, "")).body:  # its registry lines: the entries the page adds
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
                registry = getattr(names, node.targets[0].id)
                for key, value in zip(node.value.keys, node.value.values):
                    if ast.literal_eval(key) not in registry:
                        monkeypatch.setitem(registry, ast.literal_eval(key), ast.literal_eval(value))
        return root / "captioning" / "conf"

    yield install
    for name in modules:  # the examples leave nothing importable behind
        sys.modules.pop(name, None)


def compose_train(conf: Path, overrides: list[str], out: Path):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"hydra.searchpath=[file://{conf}]", *overrides])
    with open_dict(cfg):
        cfg.output_dir = str(out)
    return cfg


@pytest.mark.parametrize("section", list(EXAMPLES))
def test_the_example_trains_a_step_loads_through_the_registry_and_decodes(section, install, tmp_path):
    from captioning.checkpoints.load import load_checkpoint
    from captioning.decoding import generate
    from captioning.training.train import train

    conf = install(section)
    cfg = compose_train(conf, [*EXAMPLES[section], "debug=tiny", "trainer.max_steps=1"], tmp_path / "run")
    torch.manual_seed(0)
    checkpoint = train(cfg)  # check_config, the model built from the config, one Lightning step, a checkpoint
    loaded = load_checkpoint(checkpoint)  # refuses any class outside the registry
    net = loaded.net.eval()
    new = {path for path, _ in SECTIONS[section] if path.endswith(".py") and path != MODELS}
    built = {f"{type(m).__module__.replace('.', '/')}.py" for m in net.modules()}
    assert new <= built, (new, built)  # the rebuilt network holds the example's class
    images = torch.rand(2, 3, loaded.image_size, loaded.image_size)
    with torch.no_grad():
        features = net.encode(images)  # (B, L, D)
        out = generate(net.decoder, features, num_beams=1, max_new_tokens=5)  # greedy
    assert out.tokens.shape[0] == 2 and torch.isfinite(out.log_prob).all()
    assert torch.allclose(out.attention.sum(-1)[out.tokens != 0], torch.tensor(1.0))
    attention = net.decoder.attention
    if attention.stochastic:  # one cell per word, or the expected context under hard_attention=expected
        with torch.no_grad():
            cell = generate(net.decoder, features, num_beams=1, max_new_tokens=5, hard_attention="cell")
            expected = generate(
                net.decoder, features, num_beams=1, max_new_tokens=5, hard_attention="expected"
            )
        assert (cell.attention[:, 0].max(-1).values == 1).all()
        assert (expected.attention[:, 0].max(-1).values < 1).all()
        tokens = torch.ones(2, 3, dtype=torch.long)
        assert net.decoder.train()(features, tokens).logits.shape[0] == 2 * attention.samples_per_step


def test_the_reader_example_reads_three_records(install, tmp_path, monkeypatch) -> None:
    from captioning.data.readers import DatasetError

    conf = install("Adding a dataset reader")
    root = tmp_path / "tsv"
    (root / "images").mkdir(parents=True)
    colours = {"a.png": (255, 0, 0), "b.png": (0, 0, 255), "c.png": (0, 128, 0)}
    for name, colour in colours.items():
        Image.fromarray(np.full((8, 8, 3), colour, dtype=np.uint8)).save(root / "images" / name)
    lines = "a.png\ta red square\nb.png\ta blue square\na.png\tsomething red\n\nc.png\ta green square\n"
    for split in ("train", "val", "test"):
        (root / f"{split}.tsv").write_text(lines, encoding="utf-8")
    monkeypatch.setenv("CAPTIONS_TSV", str(root))
    cfg = compose_train(conf, ["data=tsv"], tmp_path / "run")
    for split in ("train", "val", "test"):  # val and test follow data.train.records.root
        source = hydra.utils.instantiate(cfg.data[split])
        assert len(source) == 3
        assert [source.image_id(i) for i in range(3)] == ["a.png", "b.png", "c.png"]
        assert source.captions(0) == ("a red square", "something red")
        assert source.image(2).getpixel((4, 4)) == colours["c.png"]
    (root / "train.tsv").write_text("a.png a red square\n", encoding="utf-8")  # a space, not a tab
    with pytest.raises(InstantiationException) as err:
        hydra.utils.instantiate(cfg.data.train)
    assert isinstance(err.value.__cause__, DatasetError)  # one line: the file, the line, what was expected
    assert re.search(r"train\.tsv line 1: got .*; expected '<image>\\t<caption>'", str(err.value.__cause__))


def test_the_caption_metric_example_is_scored_checked_and_logged_by_name(install, tmp_path) -> None:
    from captioning.metrics.coco import evaluate_results, score_captions
    from captioning.training.train import train

    conf = install("Adding a caption metric")
    refs = {1: ["a red circle on the left", "a red circle"], 2: ["a big blue square", "a blue square"]}
    hyps = {1: "a red circle", 2: "a square"}
    scores = score_captions(refs, hyps, metrics=["Bleu_4", "Length"])
    assert list(scores) == ["Bleu_4", "Length"]  # registry order, beside the shipped ones
    # generated: (3 + 2) / 2 = 2.5 tokens; references: (6 + 3 + 4 + 3) / 4 = 4 tokens
    assert scores["Length"] == pytest.approx(2.5 / 4)
    report = evaluate_results(
        [{"image_id": i, "caption": c} for i, c in hyps.items()], refs, tokenizer="simple"
    )
    assert report.scores["Length"] == pytest.approx(2.5 / 4)  # evaluate's default: every registered metric
    run = compose_train(
        conf,
        [
            "debug=tiny",
            "trainer.max_epochs=1",  # 15 steps, then one validation
            "model.val_metrics=[CIDEr,Length]",
            "callbacks.model_checkpoint.monitor=val/Length",
        ],
        tmp_path / "run",
    )
    train(run)  # the config check accepts the name and the monitor; validation logs val/Length
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    assert summary["monitor"] == "val/Length" and summary["best"]["metrics"]["val/Length"] > 0
