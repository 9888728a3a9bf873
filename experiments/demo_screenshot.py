"""Regenerate docs/images/demo.png: serve ``captioning demo`` with a shipped zoo model, upload a scene in
headless Chromium (Playwright), caption it with three beams returned, screenshot the page.

    python scripts/demo_screenshot.py [--checkpoint docs/models/synthetic_soft.safetensors]
        [--image PHOTO] [--out docs/images/demo.png]

Without ``--image`` a synthetic scene (two objects, upscaled to 288 px) is drawn: the zoo model
``synthetic_soft`` was trained on such scenes. Needs Debian's chromium (``make browser``)."""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip


def scene(path: Path) -> Path:
    from captioning.data.synthetic import render_scene

    for seed in range(100):  # the first scene with two objects
        drawn = render_scene((7, seed))
        if len(drawn.objects) == 2:
            break
    Image.fromarray(drawn.image).resize((288, 288), Image.Resampling.BICUBIC).save(path)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default=str(ROOT / "docs/models/synthetic_soft.safetensors"))
    parser.add_argument("--image", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "docs/images/demo.png")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("error: needs Debian's chromium (make browser)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="demo-screenshot-") as tmp:
        image = args.image or scene(Path(tmp) / "scene.png")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "GRADIO_TEMP_DIR": f"{tmp}/gradio"}
        cmd = [sys.executable, "-m", "captioning.cli.main", "demo", "--checkpoint", args.checkpoint,
               "--port", str(port)]  # fmt: skip
        server = subprocess.Popen(cmd, env=env)
        try:
            url = f"http://127.0.0.1:{port}/"
            for _ in range(180):
                try:
                    urllib.request.urlopen(url, timeout=5)
                    break
                except OSError:
                    if server.poll() is not None:
                        return 1
                    time.sleep(1)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=BROWSER_ARGS)
                page = browser.new_page(viewport={"width": 1300, "height": 1000})
                page.goto(url, wait_until="domcontentloaded", timeout=120_000)
                page.wait_for_selector("#caption-button", timeout=120_000)
                page.locator("#num-beams input[type=number]").fill("3")
                page.locator("#num-return input[type=number]").fill("3")
                page.locator("#num-return input[type=number]").press("Enter")
                page.set_input_files("#upload input[type=file]", str(image))
                page.wait_for_timeout(1000)
                page.click("#caption-button")
                page.wait_for_function("document.querySelector('#status').innerText.includes('Captioned')")
                page.wait_for_function("document.querySelector('#word-panel img')?.complete")
                page.wait_for_timeout(500)
                page.evaluate("window.scrollTo(0, 0)")
                args.out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(args.out))
                print(page.inner_text("#overlay-title"))
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
