"""The demo page in a real headless browser: Debian's Chromium driven by Playwright.

Starts ``captioning demo`` on 127.0.0.1, uploads a synthetic scene, checks that the caption the model
gives (computed here through the API) appears on the page with the overlay image, uploads a text file
named .jpg and checks the page says what is wrong, saves screenshots, stops the server."""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from PIL import Image

from captioning import Captioner
from captioning.data.synthetic import render_scene

from corpus import write_checkpoint

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]  # fmt: skip  (no outside network here: no background calls)
SCREENSHOTS = Path(os.environ.get("CAPTIONING_SCREENSHOTS", "outputs/screenshots"))

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing: `make test` installs it (apt-get install chromium)")
        pytest.skip("needs Debian's chromium (make test installs it)")
    pytest.importorskip("playwright")
    pytest.importorskip("gradio")
    folder = tmp_path_factory.mktemp("demo")
    ckpt = write_checkpoint(folder / "model.ckpt")
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"}
    cmd = [
        sys.executable,
        "-m",
        "captioning.cli.main",
        "demo",
        "--checkpoint",
        str(ckpt),
        "--port",
        str(port),
    ]
    log = open(folder / "server.log", "w")  # noqa: SIM115 - open for the server's whole life
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 180
    while True:
        try:
            urllib.request.urlopen(url, timeout=5)
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                pytest.fail(f"the demo server did not come up: {(folder / 'server.log').read_text()[-2000:]}")
            time.sleep(1)
    yield url, ckpt, folder
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


@pytest.fixture(scope="module")
def browser(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(server, browser):
    """A fresh page per test (an uploaded file replaces the upload field until it is cleared)."""
    page = browser.new_page(viewport={"width": 1300, "height": 1400})
    page.goto(server[0], wait_until="domcontentloaded", timeout=120_000)
    page.wait_for_selector("#caption-button", timeout=120_000)
    yield page
    page.close()


FINAL = ("Captioned", "Cannot caption", "Decoding options", "Upload or drop", "is more than")


def caption_on_page(page, path: Path) -> str:
    """Upload ``path``, press Caption, wait for the answer (not Gradio's progress timer) and return it."""
    before = page.inner_text("#status")
    page.set_input_files("#upload input[type=file]", str(path))
    page.wait_for_timeout(1000)  # the upload lands before the click
    page.click("#caption-button")
    page.wait_for_function(
        "([before, finals]) => { const t = document.querySelector('#status').innerText;"
        " return t !== before && finals.some(f => t.includes(f)); }",
        arg=[before, list(FINAL)],
        timeout=120_000,
    )
    return page.inner_text("#status")


def test_upload_shows_the_models_caption_and_the_overlay(server, page):
    url, ckpt, folder = server
    scene = folder / "scene.png"
    Image.fromarray(render_scene((3, 1)).image).save(scene)
    (expected,) = Captioner.from_checkpoint(ckpt).caption(scene)
    status = caption_on_page(page, scene)
    assert "Captioned" in status and "scene.png" in status
    page.wait_for_function(f"document.querySelector('#captions').innerText.includes({expected.caption!r})")
    assert f"score {expected.score:.3f}" in page.inner_text("#captions")
    page.wait_for_selector("#overlay img", timeout=60_000)
    width = page.eval_on_selector("#overlay img", "e => e.complete ? e.naturalWidth : 0")
    assert width >= 160 * 2  # the image panel and at least one word's panel
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "demo.png"), full_page=True)


def test_a_bad_upload_is_answered_on_the_page(server, page):
    _, _, folder = server
    fake = folder / "notes.jpg"
    fake.write_text("this is a caption, not a JPEG\n")
    status = caption_on_page(page, fake)
    assert (
        "Cannot caption this upload" in status and "notes.jpg" in status and "not a readable image" in status
    )
    page.screenshot(path=str(SCREENSHOTS / "demo_bad_upload.png"), full_page=True)
