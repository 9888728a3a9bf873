"""The demo page: its pieces without a browser (fast), then in a real headless browser: Debian's Chromium
driven by Playwright (slow).

The browser tests start ``captioning demo`` on 127.0.0.1, upload a synthetic scene, check that the
caption the model gives (computed here through the API) appears on the page with its score as visible
text above the overlay (not under a label chip), that sampling greys out the beams, that the upload is
previewed and a second upload replaces it, that a word is picked by its text, that an upload over the
limit is refused at upload, that the terminal shows our one line and not Gradio's advice; a text file
named .jpg is answered on the page; screenshots are saved, the server stopped."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from captioning import Captioner
from captioning.data.synthetic import render_scene
from captioning.inference import demo
from captioning.inference.captioner import CaptionResult

from support.corpus import write_checkpoint

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
ZOO_MODEL = Path(__file__).resolve().parents[2] / "docs" / "models" / "synthetic_soft.safetensors"
UPLOAD_LIMIT_MB = 1  # the browser tests' server: --max-upload-mb 1

slow = pytest.mark.slow


@pytest.fixture(scope="module")
def zoo_captioner():
    if not ZOO_MODEL.is_file():
        pytest.skip(f"needs the zoo model {ZOO_MODEL}")
    return Captioner.from_checkpoint(ZOO_MODEL)


def scene_file(folder: Path, name: str = "scene.png", objects=(3, 1)) -> Path:
    path = folder / name
    Image.fromarray(render_scene(objects).image).save(path)
    return path


def long_result() -> CaptionResult:
    words = ["a", "big", "blue", "triangle", "on", "the", "left", "of", "a", "small", "red", "circle",
             "above", "a", "green", "square"]  # fmt: skip
    rng = np.random.default_rng(0)
    attention = rng.random((len(words), 6, 6)).astype(np.float32)
    attention /= attention.sum(axis=(1, 2), keepdims=True)
    return CaptionResult(
        caption=" ".join(words), tokens=words, attention=attention,
        token_log_probs=[-0.1] * len(words), score=-1.234, log_prob=-1.5,
    )  # fmt: skip


# -- the page's pieces, without a browser ---------------------------------------------------------------


def test_the_word_panels_title_is_not_cropped():
    """The single-word panel (two 160 px panels) cropped a long caption's title and score: the panels
    are widened until the title fits, with white to the right of its last letter."""
    result = long_result()
    image = Image.new("RGB", (64, 64), "gray")
    for picture in (demo.word_panel(result, image, 3), demo.overlay_picture(result, image)):
        band = np.asarray(picture.convert("L"))[2:24]  # render_overlay's title band
        ink = np.nonzero((band < 128).any(axis=0))[0]
        assert ink.size and ink[-1] < picture.width - 6, (ink[-1], picture.width)  # room after the text


def test_the_words_are_chosen_by_their_text():
    result = long_result()
    choices = demo.word_choices(result)
    assert choices[:3] == [("1 a", 1), ("2 big", 2), ("3 blue", 3)]
    assert len(choices) == len(result.tokens) and demo.word_choices(None) == []


def test_sampling_uses_one_beam_and_says_so():
    options = demo.decoding_options(5, 1, True, 1.0, 0, 1.0, 0, 0.0)
    assert options["num_beams"] == 1 and options["do_sample"]
    assert "num_beams` is not used" in demo.decoding_note(True, 5, 1)
    assert demo.decoding_options(2, 4, False, 1.0, 0, 1.0, 0, 0.0)["num_beams"] == 4
    assert "raised to 4" in demo.decoding_note(False, 2, 4)
    assert "not used" in demo.decoding_note(False, 5, 1) and "temperature" in demo.decoding_note(False)


def test_the_json_names_the_upload_and_no_folder_is_left_per_request(zoo_captioner, tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    scene = scene_file(tmp_path, "cached-name.png")
    files = demo.JsonFiles()
    options = demo.decoding_options(3, 1, False, 1.0, 0, 1.0, 0, 0.0)
    for _ in range(3):
        out = demo.answer(zoo_captioner, {"path": str(scene), "orig_name": "my dog.png"}, options, 0, files)
        assert out["record"]["image"] == "my dog.png" and "my dog.png" in out["status"]
        written = Path(out["json_path"])
        assert written.name == "my dog-caption.json"
        assert json.loads(written.read_text())["image"] == "my dog.png"
        files.forget(out["json_path"])  # what the page does once Gradio has the file
    assert [p.name for p in (tmp_path / "tmp").iterdir()] == [files.root.name]  # one folder for the demo
    assert list(files.root.iterdir()) == []


HOSTILE_NAME = "[click me](http://evil.example) <img src=x onerror=alert(1)> **bold** `code`\n# heading.png"


def test_an_uploads_name_reaches_the_markdown_escaped(zoo_captioner, tmp_path):
    """A client names its upload (Gradio's API sends orig_name as it likes): the page shows it literally."""
    import markdown_it

    scene = scene_file(tmp_path)
    options = demo.decoding_options(1, 1, False, 1.0, 0, 1.0, 0, 0.0)
    out = demo.answer(
        zoo_captioner, {"path": str(scene), "orig_name": HOSTILE_NAME}, options, 0, demo.JsonFiles()
    )
    html = markdown_it.MarkdownIt().render(out["status"])
    assert "<a " not in html and "<img" not in html and "<code>" not in html and "<h1>" not in html
    assert (
        "[click me](http://evil.example) &lt;img src=x onerror=alert(1)&gt; **bold** `code` # heading.png"
        in html
    )
    assert out["record"]["image"] == HOSTILE_NAME  # the JSON keeps the name as given
    too_big = scene_file(tmp_path, "big.png")
    _, message = demo.read_upload(str(too_big), HOSTILE_NAME, limit=1)
    assert "<a " not in markdown_it.MarkdownIt().render(message) and "\n" not in message


def test_sampled_candidates_are_shown_best_first_and_the_overlay_is_the_best(zoo_captioner, tmp_path):
    """The demo shows the Captioner's order; the Captioner returns the candidates best first (sorted by
    score), so the list is sorted and the overlay (title, JSON caption) is the first one's."""
    scene = scene_file(tmp_path)
    options = demo.decoding_options(5, 5, True, 1.5, 0, 1.0, 0, 0.0)
    out = demo.answer(zoo_captioner, str(scene), options, 0, demo.JsonFiles())
    result, record = out["result"], out["record"]
    lines = demo.captions_markdown(result).splitlines()
    shown = [float(line.rsplit("score ", 1)[1].rstrip(")")) for line in lines]
    assert len(shown) == 5
    assert shown == sorted(shown, reverse=True), shown
    assert result is result.candidates[0] or result.caption == result.candidates[0].caption
    assert record["caption"] == record["candidates"][0]["caption"] == result.caption
    assert f"score {result.score:.3f}" in demo.overlay_title_markdown(result)


def test_the_demo_cli_warns_refuses_and_launches_quietly(tmp_path, monkeypatch, capsys):
    from captioning.cli import demo as cli_demo
    from captioning.cli.main import main as captioning_main

    if not ZOO_MODEL.is_file():
        pytest.skip(f"needs the zoo model {ZOO_MODEL}")
    other = tmp_path / "other.safetensors"
    shutil.copy(ZOO_MODEL, other)
    assert captioning_main(["demo", "--checkpoint", str(ZOO_MODEL), "--checkpoint", str(other)]) == 2
    err = capsys.readouterr().err
    assert "--checkpoint given 2 times" in err and "one model" in err

    launched = {}

    class Page:
        def launch(self, **kwargs):
            launched.update(kwargs)

        def block_thread(self):
            launched["blocked"] = True

    monkeypatch.setattr("captioning.inference.demo.build_demo", lambda captioner, **kw: Page())
    args = ["demo", "--checkpoint", str(ZOO_MODEL), "--host", "0.0.0.0", "--port", str(free_port())]
    assert captioning_main([*args, "--max-upload-mb", "2"]) == 0
    out, err = capsys.readouterr()
    assert "warning: --host 0.0.0.0: the page is reachable from the network" in err
    assert launched["quiet"] is True and launched["max_file_size"] == 2 * 2**20 and launched["blocked"]
    assert out.strip().splitlines() == [
        f"captioning demo: serving {ZOO_MODEL.name} on http://127.0.0.1:{args[-1]}/ (Ctrl+C stops)"
    ]
    assert cli_demo.exposure_warning("127.0.0.1") is None and cli_demo.exposure_warning("localhost") is None


# -- in a browser ---------------------------------------------------------------------------------------


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
    ckpt = Path(os.environ.get("CAPTIONING_DEMO_CHECKPOINT") or write_checkpoint(folder / "model.ckpt"))
    port = free_port()
    (folder / "tmp").mkdir()
    env = {
        **os.environ,
        "GRADIO_ANALYTICS_ENABLED": "False",
        "GRADIO_TEMP_DIR": str(folder / "gradio"),  # where Gradio keeps uploads
        "TMPDIR": str(folder / "tmp"),  # where the demo writes its JSON files
    }
    cmd = [sys.executable, "-m", "captioning.cli.main", "demo", "--checkpoint", str(ckpt),
           "--port", str(port), "--max-upload-mb", str(UPLOAD_LIMIT_MB)]  # fmt: skip
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
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
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
    # The answer names the uploaded file; while the request runs Gradio shows its timer ("0.0s") over the
    # previous answer, which must not count as this one's.
    page.wait_for_function(
        "([before, finals, name]) => { const t = document.querySelector('#status').innerText;"
        " return t !== before && t.includes(name) && finals.some(f => t.includes(f))"
        " && !/^\\s*\\d+(\\.\\d+)?s/.test(t); }",
        arg=[before, list(FINAL), path.name],
        timeout=120_000,
    )
    return page.inner_text("#status")


# The overlay's caption and score: visible page text (inside the viewport, the topmost element at its
# centre), and the image's own title band (render_overlay's top 26 px) covered by nothing: at points along
# it the topmost element is the image (Gradio's label chip used to cover the title's start).
TITLE_CHECK = """() => {
  const title = document.querySelector('#overlay-title');
  title.scrollIntoView({block: 'center'});
  const r = title.getBoundingClientRect();
  const hit = document.elementFromPoint(r.left + Math.min(r.width, 200) / 2, r.top + r.height / 2);
  const img = document.querySelector('#overlay img');
  const i = img.getBoundingClientRect();
  const y = i.top + 13 * i.height / img.naturalHeight;
  const covering = [];
  for (let x = i.left + 2; x < i.right - 2; x += 20) {
    const e = document.elementFromPoint(x, y);
    if (e !== img) covering.push([Math.round(x - i.left), e ? e.outerHTML.slice(0, 80) : null]);
  }
  return {text: title.innerText, inViewport: r.top >= 0 && r.bottom <= innerHeight && r.width > 0,
          onTop: !!hit && title.contains(hit), covering: covering, bandInViewport: y > 0 && y < innerHeight};
}"""


@slow
def test_upload_shows_the_models_caption_and_score_visibly(server, page):
    url, ckpt, folder = server
    scene = scene_file(folder)
    (expected,) = Captioner.from_checkpoint(ckpt).caption(scene)
    status = caption_on_page(page, scene)
    assert "Captioned" in status and "scene.png" in status
    page.wait_for_function(f"document.querySelector('#captions').innerText.includes({expected.caption!r})")
    assert f"score {expected.score:.3f}" in page.inner_text("#captions")
    page.wait_for_function(
        "() => { const i = document.querySelector('#overlay img'); return i && i.complete && i.naturalWidth; }",
        timeout=60_000,
    )
    assert page.eval_on_selector("#overlay img", "e => e.naturalWidth") >= 160 * 2
    seen = page.evaluate(TITLE_CHECK)
    assert expected.caption in seen["text"] and f"score {expected.score:.3f}" in seen["text"], seen
    assert seen["inViewport"] and seen["onTop"], seen
    assert seen["bandInViewport"] and seen["covering"] == [], seen  # nothing over the image's title
    assert "scene-caption.json" in page.inner_text("#download").replace("\n", "")  # the upload's name
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(SCREENSHOTS / "demo.png"))
    # the JSON for the download was handed to Gradio and removed: no folder left per request
    page.wait_for_timeout(1000)
    leftovers = [p for root in (folder / "tmp").glob("captioning-demo-*") for p in root.iterdir()]
    assert leftovers == []


@slow
def test_the_upload_is_previewed_and_a_new_one_replaces_it(server, page):
    _, _, folder = server
    first, second = scene_file(folder, "first.png", (0, 2)), scene_file(folder, "second.png", (5, 4))
    assert "first.png" in caption_on_page(page, first)
    assert page.eval_on_selector("#upload img", "e => e.complete && e.naturalWidth") > 0  # the preview
    assert "second.png" in caption_on_page(page, second)  # no clearing in between


@slow
def test_a_word_is_picked_by_its_text(server, page):
    _, ckpt, folder = server
    scene = scene_file(folder)
    (expected,) = Captioner.from_checkpoint(ckpt).caption(scene)
    caption_on_page(page, scene)
    page.wait_for_selector("#word label", timeout=60_000)
    labels = [t.strip() for t in page.locator("#word label").all_inner_texts() if t.strip()]
    assert (
        labels[: len(expected.tokens)]
        == [f"{k} {w}" for k, w in enumerate(expected.tokens, 1)][: len(labels)]
    )
    before = page.eval_on_selector("#word-panel img", "e => e.src")
    page.locator("#word label").nth(1).click()
    page.wait_for_function(
        "before => document.querySelector('#word-panel img')?.src !== before", arg=before, timeout=60_000
    )


@slow
def test_sampling_greys_out_the_beams(server, page):
    beams = page.locator("#num-beams input[type=number]")
    assert beams.is_enabled()
    page.locator("#do-sample input[type=checkbox]").check()
    page.wait_for_function("() => document.querySelector('#num-beams input[type=number]').disabled")
    assert "num_beams is not used" in page.inner_text("#decoding-note")
    page.locator("#do-sample input[type=checkbox]").uncheck()
    page.wait_for_function("() => !document.querySelector('#num-beams input[type=number]').disabled")


@slow
def test_an_upload_over_the_limit_is_refused_at_upload(server):
    url, _, folder = server
    boundary = "captioningboundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="big.png"\r\n'
            "Content-Type: image/png\r\n\r\n"
        ).encode()
        + b"\0" * (UPLOAD_LIMIT_MB * 2**20 + 4096)
        + f"\r\n--{boundary}--\r\n".encode()
    )
    request = urllib.request.Request(
        url + "gradio_api/upload", data=body, method="POST",
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 413
    assert not [p for p in (folder / "gradio").rglob("big.png")]  # not kept in Gradio's folder


@slow
def test_the_terminal_shows_our_line_not_gradios_advice(server):
    url, ckpt, folder = server
    log = (folder / "server.log").read_text()
    assert f"captioning demo: serving {ckpt.name} on {url} (Ctrl+C stops)" in log
    assert "share=True" not in log and "Running on local URL" not in log
    assert "reachable from the network" not in log  # 127.0.0.1: no warning


@slow
def test_a_bad_upload_is_answered_on_the_page(server, page):
    _, _, folder = server
    fake = folder / "notes.jpg"
    fake.write_text("this is a caption, not a JPEG\n")
    status = caption_on_page(page, fake)
    assert (
        "Cannot caption this upload" in status and "notes.jpg" in status and "not a readable image" in status
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "demo_bad_upload.png"), full_page=True)
