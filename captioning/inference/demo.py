"""The demo page (Gradio): upload or drop an image (previewed; a new one replaces it), choose decoding
options, see the captions with their scores, the attention overlay of the best one with its caption and
score as visible text above it, each word's map picked by the word itself, download the JSON.

``build_demo(captioner)`` returns the page; ``captioning demo --checkpoint CKPT`` serves it on
127.0.0.1. Bad uploads (not an image, a truncated file, too many pixels, too many bytes) are answered on
the page by the same one-line messages as the CLI's, naming the file and what was wrong; uploads over
``MAX_UPLOAD_BYTES`` are refused by Gradio at upload (``launch(max_file_size=...)``), before they are
stored. The candidates are shown in the Captioner's order (best first) and the overlay is the first's.
"""

from __future__ import annotations

import atexit
import json
import math
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from captioning.data.images import ImageError, load_rgb
from captioning.inference.captioner import Captioner, CaptionResult

MAX_UPLOAD_BYTES = 50 * 2**20  # larger uploads are refused at upload (Gradio) and before decoding
TITLE_MARGIN = 12  # pixels the overlay's title needs beyond its text (render_overlay draws it at x=6)
SAMPLING_NOTE = (
    "**Sampling**: every sequence is one sample; `num_beams` is not used (greyed out). "
    "`temperature`, `top_k`, `top_p` and `seed` apply."
)
BEAMS_NOTE = "**Beam search**: `temperature`, `top_k`, `top_p` and `seed` are not used (greyed out)."


_MARKDOWN_SPECIALS = "\\`*_[]()<>#|~!&"  # what acts mid-line (a leading "1." or "-" never starts here)


def md(text: object) -> str:
    """``text`` as literal Markdown on one line: every character Markdown or HTML would act on is escaped
    (an upload's name comes from the client, through Gradio's API: ``[x](http://...)``, ``<img ...>``)."""
    one_line = " ".join(str(text).split())
    return "".join(f"\\{c}" if c in _MARKDOWN_SPECIALS else c for c in one_line)


def upload_of(value: Any) -> tuple[str | None, str]:
    """(the uploaded file's path on the server, its original name) from Gradio's raw image payload
    (a dict with ``path`` and ``orig_name``) or a plain path."""
    if not value:
        return None, ""
    if isinstance(value, dict):
        path = value.get("path")
        return path, value.get("orig_name") or (Path(path).name if path else "")
    return str(value), Path(str(value)).name


def read_upload(path: str | None, name: str | None = None, limit: int | None = None) -> tuple[Any, str]:
    """(the RGB image, "") or (None, a message for the page naming the upload by ``name``)."""
    if not path:
        return None, "Upload or drop an image first."
    name = name or Path(path).name
    limit = MAX_UPLOAD_BYTES if limit is None else limit
    size = Path(path).stat().st_size
    if size > limit:
        return None, f"**{md(name)}**: {size / 2**20:.0f} MB is more than the {limit / 2**20:.0f} MB allowed."
    try:
        return load_rgb(path), ""
    except ImageError as err:
        return None, f"**Cannot caption this upload**: {md(str(err).replace(str(path), name))}"


def title_of(result: CaptionResult) -> str:
    """The overlay's title as ``render_overlay`` draws it: the caption and its score."""
    return f"{result.caption}   (score {result.score:.3f})"


def captions_markdown(result: CaptionResult) -> str:
    """The candidates in the order the Captioner returns them (best first), numbered."""
    lines = [
        f"{k}. **{md(c.caption) or '(empty caption)'}**  (score {c.score:.3f})"
        for k, c in enumerate(result.candidates or [result], 1)
    ]
    if result.domain_notice is not None:  # class names from the classifier's closed list: plain text
        lines.append(f"\n> **Unlike the training photos**: {result.domain_notice}")
    return "\n".join(lines)


def overlay_title_markdown(result: CaptionResult) -> str:
    caption = md(result.caption) or "(empty caption)"
    return f"Attention of the best caption: **{caption}**  (score {result.score:.3f})"


def fitting_panel(title: str, columns: int, panel: int = 160) -> int:
    """The panel size at which ``columns`` panels are wide enough for ``title`` (not cropped)."""
    from PIL import Image, ImageDraw

    from captioning.inference.viz import _font

    width = ImageDraw.Draw(Image.new("RGB", (1, 1))).textlength(title, font=_font(14))
    return max(panel, math.ceil((width + TITLE_MARGIN) / columns))


def overlay_picture(result: CaptionResult, image):
    """The full overlay, its panels widened where the title would not fit."""
    columns = max(1, min(5, len(result.tokens) + 1))
    return result.overlay(image, panel=fitting_panel(title_of(result), columns))


def word_choices(result: CaptionResult | None) -> list[tuple[str, int]]:
    """The caption's words as radio choices: ("1 a", 1), ("2 dog", 2), ..."""
    return [(f"{k} {w}", k) for k, w in enumerate(result.tokens if result else [], 1)]


def word_panel(result: CaptionResult | None, image, index: int | None):
    """The photo and the map of word ``index`` (1-based), on the caption's colour scale; its title (the
    caption and score) fits: the two panels are widened for long captions."""
    from captioning.inference.viz import render_overlay

    if result is None or image is None or not result.tokens:
        return None
    k = min(max(int(index or 1), 1), len(result.tokens)) - 1
    t, h, w = result.attention.shape
    rows = result.attention.reshape(t, h * w)  # (T, H*W)
    return render_overlay(
        image, [result.tokens[k]], rows[[k]], (h, w), caption=result.caption, score=result.score,
        vmax=float(rows.max()),  # the whole caption's scale, as in the full overlay
        panel=fitting_panel(title_of(result), 2),
    )  # fmt: skip


def decoding_options(num_beams, num_return_sequences, do_sample, temperature, top_k, top_p,
                     no_repeat_ngram_size, length_penalty) -> dict[str, Any]:  # fmt: skip
    """The page's controls as ``generate`` options: one beam when sampling (the beams control is
    disabled then), and at least as many beams as sequences asked for in beam search."""
    n = int(num_return_sequences)
    return {
        "num_beams": 1 if do_sample else max(int(num_beams), n),
        "num_return_sequences": n,
        "do_sample": bool(do_sample),
        "temperature": float(temperature),
        "top_k": int(top_k),
        "top_p": float(top_p),
        "no_repeat_ngram_size": int(no_repeat_ngram_size),
        "length_penalty": float(length_penalty),
    }


def decoding_note(do_sample: bool, num_beams: int = 1, num_return_sequences: int = 1) -> str:
    """What the controls do with the current choice: which ones are not used, and any raised beam count."""
    if do_sample:
        return SAMPLING_NOTE
    note = BEAMS_NOTE
    if int(num_return_sequences) > int(num_beams):
        note += f" `num_beams` is raised to {int(num_return_sequences)} to return as many sequences."
    return note


class JsonFiles:
    """The demo's downloadable JSON files, all in one folder of its own (removed at exit); each request's
    file is removed once Gradio has copied it into its cache (``forget``), so nothing is left per request."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="captioning-demo-"))
        atexit.register(shutil.rmtree, self.root, ignore_errors=True)

    def write(self, name: str, record: dict) -> str:
        folder = self.root / uuid.uuid4().hex  # the download keeps the plain name; requests don't collide
        folder.mkdir()
        path = folder / f"{Path(name).stem or 'image'}-caption.json"
        path.write_text(json.dumps(record, indent=1))
        return str(path)

    def forget(self, path: str | None) -> None:
        """Remove a file (and its folder) this object wrote; anything else is left alone."""
        if not path:
            return
        folder = Path(path).parent
        if folder.parent == self.root:
            shutil.rmtree(folder, ignore_errors=True)


def answer(captioner: Captioner, upload: Any, options: dict[str, Any], seed: Any, files: JsonFiles,
           limit: int | None = None) -> dict[str, Any]:  # fmt: skip
    """One press of Caption: a dict with ``status`` (always), and when captioned ``result`` (the best,
    its ``candidates`` in the Captioner's order), ``image``, ``record`` (the JSON) and ``json_path``."""
    path, name = upload_of(upload)
    image, message = read_upload(path, name, limit)
    if image is None:
        return {"status": message}
    try:
        sampling_seed = int(seed or 0) if options["do_sample"] else None
        (result,) = captioner.caption(image, seed=sampling_seed, **options)
    except ValueError as err:
        return {"status": f"**Decoding options**: {md(err)}"}
    record = {
        **result.to_json(),
        "image": name,  # the uploaded file's name, not the in-memory "<input 0>"
        "decoding": captioner.generation_config(**options).to_dict(),
    }
    return {
        "status": f"Captioned **{md(name)}** ({image.width}×{image.height}).",
        "result": result,
        "image": image,
        "record": record,
        "json_path": files.write(name, record),
    }


def build_demo(captioner: Captioner, max_upload_bytes: int = MAX_UPLOAD_BYTES):
    """The page. Serve it with ``launch(max_file_size=max_upload_bytes)`` (as ``captioning demo`` does)
    so that larger uploads are refused at upload."""
    import gradio as gr

    files = JsonFiles()

    def caption(upload, num_beams, nrs, do_sample, temperature, top_k, top_p, no_repeat, length_penalty,
                seed):  # fmt: skip
        options = decoding_options(
            num_beams, nrs, do_sample, temperature, top_k, top_p, no_repeat, length_penalty
        )
        out = answer(captioner, upload, options, seed, files, max_upload_bytes)
        result = out.get("result")
        if result is None:
            hidden = gr.update(value="", visible=False)
            return (out["status"], "", hidden, None, gr.update(choices=[], value=None, visible=False),
                    None, None, None, None, None, None)  # fmt: skip
        return (
            out["status"],
            captions_markdown(result),
            gr.update(value=overlay_title_markdown(result), visible=True),
            overlay_picture(result, out["image"]),
            gr.update(choices=word_choices(result), value=1, visible=bool(result.tokens)),
            word_panel(result, out["image"], 1),
            out["record"],
            out["json_path"],
            result,
            out["image"],
            out["json_path"],
        )

    def controls(do_sample, num_beams, nrs):
        sampling = gr.update(interactive=bool(do_sample))
        beams_label = "num_beams (not used when sampling)" if do_sample else "num_beams"
        return (
            gr.update(interactive=not do_sample, label=beams_label),
            sampling,
            sampling,
            sampling,
            sampling,
            decoding_note(bool(do_sample), num_beams, nrs),
        )

    with gr.Blocks(title="captioning: Show, Attend and Tell", delete_cache=(3600, 3600)) as demo:
        gr.Markdown(
            "## Show, Attend and Tell\n"
            f"Checkpoint {md(Path(str(captioner.path)).name)}; grid {captioner.grid[0]}×{captioner.grid[1]}. "
            "Upload or drop an image, choose how to decode, press **Caption**."
        )
        state, picture, written = gr.State(None), gr.State(None), gr.State(None)
        beam_search = not captioner.decoding.do_sample
        with gr.Row():
            with gr.Column(scale=1):
                upload = gr.Image(label="image (drop or click; a new upload replaces it)", type="filepath",
                                  sources=["upload", "clipboard"], elem_id="upload")  # fmt: skip
                with gr.Accordion("decoding", open=True):
                    num_beams = gr.Slider(
                        1, 10, value=captioner.decoding.num_beams, step=1, label="num_beams",
                        elem_id="num-beams", interactive=beam_search,
                    )  # fmt: skip
                    nrs = gr.Slider(
                        1,
                        5,
                        value=1,
                        step=1,
                        label="num_return_sequences (n-best / samples)",
                        elem_id="num-return",
                    )
                    do_sample = gr.Checkbox(value=not beam_search, label="do_sample", elem_id="do-sample")
                    note = gr.Markdown(decoding_note(not beam_search), elem_id="decoding-note")
                    temperature = gr.Slider(
                        0.1, 2.0, value=1.0, label="temperature", interactive=not beam_search
                    )
                    top_k = gr.Slider(
                        0, 100, value=0, step=1, label="top_k (0 = off)", interactive=not beam_search
                    )
                    top_p = gr.Slider(0.05, 1.0, value=1.0, label="top_p", interactive=not beam_search)
                    no_repeat = gr.Slider(
                        0,
                        4,
                        value=captioner.decoding.no_repeat_ngram_size,
                        step=1,
                        label="no_repeat_ngram_size",
                    )
                    length_penalty = gr.Slider(
                        -1.0, 2.0, value=captioner.decoding.length_penalty, label="length_penalty"
                    )
                    seed = gr.Number(
                        value=0, precision=0, label="seed (sampling)", interactive=not beam_search
                    )
                button = gr.Button("Caption", variant="primary", elem_id="caption-button")
            with gr.Column(scale=2):
                status = gr.Markdown(elem_id="status")
                captions = gr.Markdown(elem_id="captions")
                # the title as page text, and no label chip or buttons over the image's own title
                title = gr.Markdown(visible=False, elem_id="overlay-title")
                overlay = gr.Image(label="attention overlay (one colour scale for the caption)", type="pil",
                                   elem_id="overlay", interactive=False, show_label=False, buttons=[])  # fmt: skip
                word = gr.Radio([], label="word (its attention below)", visible=False, elem_id="word")
                panel = gr.Image(label="the selected word's attention", type="pil", interactive=False,
                                 show_label=False, buttons=[], elem_id="word-panel")  # fmt: skip
                record = gr.JSON(label="JSON")
                download = gr.File(label="download the JSON", interactive=False, elem_id="download")
        inputs = [upload, num_beams, nrs, do_sample, temperature, top_k, top_p, no_repeat, length_penalty,
                  seed]  # fmt: skip
        outputs = [status, captions, title, overlay, word, panel, record, download, state, picture, written]
        # preprocess=False: the upload arrives as Gradio's payload (the cached path and the original file
        # name), undecoded, so that a bad file is answered by read_upload's one line, not a Gradio error;
        # then the JSON file written for the download is removed: Gradio has served it from its cache
        button.click(caption, inputs=inputs, outputs=outputs, preprocess=False).then(
            files.forget, inputs=written, outputs=None
        )
        for control, event in ((do_sample, "change"), (num_beams, "input"), (nrs, "input")):
            getattr(control, event)(
                controls,
                inputs=[do_sample, num_beams, nrs],
                outputs=[num_beams, temperature, top_k, top_p, seed, note],
            )
        word.change(word_panel, inputs=[state, picture, word], outputs=panel)
    demo.json_files = files  # for tests and callers that clean up early
    return demo
