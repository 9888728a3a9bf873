"""The package installs anywhere: the built wheel, installed into a fresh virtual environment (which
reuses this environment's dependencies through a .pth file: torch is not installed again), works from
a folder unrelated to the clone: --version, a tiny training run, evaluate, caption with a zoo model,
the demo page, and a user's own config folder."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from support import REPO

pytestmark = pytest.mark.slow


def _run(cmd: list, cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, (
        f"{cmd}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    )
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"  # a copy: building in the clone would leave build/ there
    shutil.copytree(REPO / "captioning", src / "captioning", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    start = time.monotonic()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", tmp / "dist", src], tmp, env
    )
    (wheel,) = (tmp / "dist").glob("captioning-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "captioning/conf/train.yaml" in names and "captioning/conf/debug/tiny.yaml" in names
    assert "captioning/inference/domains/flickr8k.json" in names  # the out-of-domain notice's file
    assert not any(n.startswith(("tests/", "docs/", "scripts/", "experiments/")) for n in names)

    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], tmp, env)
    python = venv / "bin" / "python"
    _run([*pip, "--python", python, "install", "--no-deps", "--no-index", wheel], tmp, env)
    site = Path(
        _run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, env
        ).stdout.strip()
    )
    # after the install (pip would otherwise find this environment's editable captioning installed):
    # this environment's dependencies, torch included, without installing them again
    (site / "_reuse_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    env.update(HF_HUB_OFFLINE="1", CAPTIONING_QUIET="1", HOME=str(tmp / "home"))
    env.pop("CAPTIONING_MODELS", None)
    print(f"wheel built and installed in {time.monotonic() - start:.0f} s")
    return {"venv": venv, "bin": venv / "bin", "cwd": elsewhere, "env": env, "site": site}


def test_imports_the_installed_package_not_the_clone(installed) -> None:
    code = "import captioning, captioning.compose as c; print(captioning.__file__); print(c.CONFIG_DIR)"
    out = _run([installed["bin"] / "python", "-c", code], installed["cwd"], installed["env"]).stdout.split()
    assert all(Path(p).is_relative_to(installed["venv"]) for p in out), out


def test_version_is_the_package_metadata(installed) -> None:
    version = re.search(r'^version = "(.+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    out = _run([installed["bin"] / "captioning", "--version"], installed["cwd"], installed["env"]).stdout
    assert out.strip() == f"captioning {version}"


def test_train_then_evaluate_a_tiny_run(installed) -> None:
    b, cwd, env = installed["bin"], installed["cwd"], installed["env"]
    start = time.monotonic()
    tiny = [
        "debug=tiny",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1",
    ]
    out = _run([b / "captioning-train", *tiny, "hydra.run.dir=run"], cwd, env, timeout=120).stdout
    checkpoint = re.search(r"best checkpoint: (\S+)", out).group(1)
    assert (cwd / checkpoint).is_file() or Path(checkpoint).is_file()
    assert time.monotonic() - start < 120
    evaluate = [b / "captioning", "evaluate", "--checkpoint", checkpoint, "--out-dir", "eval"]
    _run([*evaluate, "data.test.num_images=4", "tokenizer=simple"], cwd, env)
    assert json.loads((cwd / "eval" / "scores.json").read_text())


def test_a_users_config_folder_composes(installed) -> None:
    mine = installed["cwd"] / "my_configs"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "my_scenes.yaml").write_text(
        "defaults:\n  - synthetic\n  - _self_\n\ntrain:\n  num_images: 123\n"
    )
    cmd = [installed["bin"] / "captioning-train", "--config-dir", mine, "data=my_scenes", "--cfg", "job"]
    out = _run(cmd, installed["cwd"], installed["env"]).stdout
    assert "num_images: 123" in out


def test_caption_with_a_zoo_model_by_name(installed, tmp_path) -> None:
    import numpy as np
    from PIL import Image

    image = installed["cwd"] / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(image)
    b, cwd, env = installed["bin"], installed["cwd"], installed["env"]
    missing = _run([b / "captioning", "models"], cwd, env).stdout  # no clone here: nothing found
    assert re.search(r"synthetic-soft\s+synthetic\s+missing", missing), missing
    env = {**env, "CAPTIONING_MODELS": str(REPO / "docs" / "models")}
    out = _run(
        [b / "captioning", "caption", image, "--checkpoint", "synthetic-soft", "--json"], cwd, env
    ).stdout
    assert json.loads(out.splitlines()[0])["caption"]


def test_demo_serves_the_page(installed) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**installed["env"], "CAPTIONING_MODELS": str(REPO / "docs" / "models")}
    cmd = [installed["bin"] / "captioning", "demo", "--checkpoint", "synthetic-soft", "--port", str(port)]
    demo = subprocess.Popen(
        [str(c) for c in cmd], cwd=installed["cwd"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        status = None
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # localhost: never a proxy
        while time.monotonic() < deadline and demo.poll() is None:
            try:
                with opener.open(f"http://127.0.0.1:{port}/", timeout=5) as page:
                    status = page.status
                    break
            except OSError:
                time.sleep(1)
        assert status == 200, f"the demo did not answer (exit {demo.poll()})"
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        try:
            demo.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()


def test_a_users_config_folder_joins_through_hydra_searchpath(installed) -> None:
    mine = installed["cwd"] / "my_search_path"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "my_scenes.yaml").write_text("defaults:\n  - synthetic\n  - _self_\n")
    tiny = [
        "debug=tiny",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=1",
        "trainer.limit_val_batches=1",
    ]
    cmd = [
        installed["bin"] / "captioning-train",
        f"hydra.searchpath=[file://{mine}]",
        "data=my_scenes",
        *tiny,
    ]
    _run([*cmd, "hydra.run.dir=run_mine"], installed["cwd"], installed["env"], timeout=120)


API_SCRIPT = """
import json, sys
import captioning
run = captioning.train(sys.argv[1:], run_dir="api_run")
evaluation = captioning.evaluate(run.best_checkpoint, ["data.test.num_images=4", "tokenizer=simple"])
try:
    captioning.train(["trainer.max_epoch=1"])
except ValueError as err:
    refused = str(err)
print(json.dumps({"run_dir": str(run.run_dir), "best": str(run.best_checkpoint), "metrics": run.metrics,
                  "scores": evaluation.report.to_dict()["scores"], "refused": refused,
                  "module": captioning.__file__}))
"""


def test_train_and_evaluate_from_python(installed) -> None:
    tiny = [
        "debug=tiny",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1",
    ]
    script = installed["cwd"] / "api_script.py"
    script.write_text(API_SCRIPT)
    out = _run([installed["bin"] / "python", script, *tiny], installed["cwd"], installed["env"]).stdout
    record = json.loads(out.strip().splitlines()[-1])
    assert Path(record["module"]).is_relative_to(installed["venv"])
    best = installed["cwd"] / record["best"]
    assert best.is_file() and best.is_relative_to(installed["cwd"] / "api_run" / "checkpoints")
    assert "val/CIDEr" in record["metrics"] and set(record["scores"]) >= {"Bleu_4", "CIDEr", "METEOR"}
    assert record["refused"].startswith(
        "trainer.max_epoch: no such config key; did you mean trainer.max_epochs?"
    )


def test_models_install_gives_a_wheel_its_zoo(installed, tmp_path) -> None:
    release = tmp_path / "release.zip"
    with zipfile.ZipFile(release, "w") as archive:
        for name in ("synthetic_soft.safetensors", "flickr8k_soft_scst.safetensors"):
            archive.write(REPO / "docs" / "models" / name, f"models/{name}")
    b, cwd, env = installed["bin"], installed["cwd"], installed["env"]
    out = _run([b / "captioning", "models", "install", "--from", release], cwd, env).stdout
    cache = Path(env["HOME"]) / ".cache" / "captioning" / "models"
    assert out.splitlines() == [
        f"flickr8k-soft-scst: installed ({cache / 'flickr8k_soft_scst.safetensors'})",
        f"synthetic-soft: installed ({cache / 'synthetic_soft.safetensors'})",
    ]
    listed = _run([b / "captioning", "models"], cwd, env).stdout
    assert re.search(r"synthetic-soft\s+synthetic\s+\d+\.\d MiB\s+" + re.escape(str(cache)), listed), listed
    # the installed Flickr8k model by name, with the out-of-domain notice from the wheel's domain file
    photo = REPO / "examples" / "cameraman.png"
    done = _run([b / "captioning", "caption", photo, "--checkpoint", "flickr8k-soft-scst"], cwd, env)
    assert done.stdout.startswith(f"{photo}\ta man")
    assert done.stderr.startswith(f"captioning caption: note: {photo}: looks like: tripod (0.")
