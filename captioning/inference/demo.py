"""The demo page (Gradio): upload or drop an image, choose decoding options, see the captions with their
scores, the attention overlay of the best one and each word's map on a slider, download the JSON.

``build_demo(captioner)`` returns the page; ``captioning demo --checkpoint CKPT`` serves it on
127.0.0.1. Bad uploads (not an image, a truncated file, too many pixels, too many bytes) are answered on
the page by the same one-line messages as the CLI's, naming the file and what was wrong.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from captioning.data.images import ImageError, load_rgb
from captioning.inference.captioner import Captioner, CaptionResult

MAX_UPLOAD_BYTES = 50 * 2**20  # larger uploads are refused before they are decoded


def read_upload(path: str | None) -> tuple[Any, str]:
    """(the RGB image, "") or (None, a message for the page)."""
    if not path:
        return None, "Upload or drop an image first."
    name = Path(path).name
    size = os.path.getsize(path)
    if size > MAX_UPLOAD_BYTES:
        return (
            None,
            f"**{name}**: {size / 2**20:.0f} MB is more than the {MAX_UPLOAD_BYTES // 2**20} MB allowed.",
        )
    try:
        return load_rgb(path), ""
    except ImageError as err:
        return None, f"**Cannot caption this upload**: {str(err).replace(str(path), name)}"


def captions_markdown(result: CaptionResult) -> str:
    lines = [
        f"{k}. **{c.caption or '(empty caption)'}**  (score {c.score:.3f})"
        for k, c in enumerate(result.candidates, 1)
    ]
    return "\n".join(lines)


def word_panel(result: CaptionResult | None, image, index: int):
    """The photo and the map of word ``index`` (1-based), on the caption's colour scale."""
    from captioning.inference.viz import render_overlay

    if result is None or image is None or not result.tokens:
        return None
    k = min(max(int(index), 1), len(result.tokens)) - 1
    t, h, w = result.attention.shape
    rows = result.attention.reshape(t, h * w)  # (T, H*W)
    return render_overlay(
        image, [result.tokens[k]], rows[[k]], (h, w), caption=result.caption, score=result.score,
        vmax=float(rows.max()),  # the whole caption's scale, as in the full overlay
    )  # fmt: skip


def build_demo(captioner: Captioner):
    import gradio as gr

    def caption(path, num_beams, num_return_sequences, do_sample, temperature, top_k, top_p,
                no_repeat_ngram_size, length_penalty, seed):  # fmt: skip
        empty = (None, "", None, gr.update(visible=False), None, None, None, None, None)
        image, message = read_upload(path)
        if image is None:
            return (message, *empty[1:])
        options = {
            "num_beams": 1 if do_sample else int(num_beams),
            "num_return_sequences": int(num_return_sequences),
            "do_sample": bool(do_sample),
            "temperature": float(temperature),
            "top_k": int(top_k),
            "top_p": float(top_p),
            "no_repeat_ngram_size": int(no_repeat_ngram_size),
            "length_penalty": float(length_penalty),
        }
        if not do_sample:
            options["num_beams"] = max(options["num_beams"], options["num_return_sequences"])
        try:
            (result,) = captioner.caption(image, seed=int(seed) if do_sample else None, **options)
        except ValueError as err:
            return (f"**Decoding options**: {err}", *empty[1:])
        record = {
            "image": Path(path).name,
            **result.to_json(),
            "decoding": captioner.generation_config(**options).to_dict(),
        }
        out = Path(tempfile.mkdtemp(prefix="captioning-demo-")) / f"{Path(path).stem}-caption.json"
        out.write_text(json.dumps(record, indent=1))
        slider = gr.update(
            visible=bool(result.tokens), minimum=1, maximum=max(len(result.tokens), 1), value=1, step=1
        )
        return (
            f"Captioned **{Path(path).name}** ({image.width}×{image.height}).",
            captions_markdown(result),
            result.overlay(image),
            slider,
            word_panel(result, image, 1),
            record,
            str(out),
            result,
            image,
        )

    with gr.Blocks(title="captioning: Show, Attend and Tell") as demo:
        gr.Markdown(
            "## Show, Attend and Tell\n"
            f"Checkpoint `{Path(str(captioner.path)).name}`; grid {captioner.grid[0]}×{captioner.grid[1]}. "
            "Upload or drop an image, choose how to decode, press **Caption**."
        )
        state, picture = gr.State(None), gr.State(None)
        with gr.Row():
            with gr.Column(scale=1):
                upload = gr.File(label="image", file_types=["image"], type="filepath", elem_id="upload")
                with gr.Accordion("decoding", open=True):
                    num_beams = gr.Slider(
                        1, 10, value=captioner.decoding.num_beams, step=1, label="num_beams"
                    )
                    nrs = gr.Slider(1, 5, value=1, step=1, label="num_return_sequences (n-best / samples)")
                    do_sample = gr.Checkbox(value=False, label="do_sample")
                    temperature = gr.Slider(0.1, 2.0, value=1.0, label="temperature")
                    top_k = gr.Slider(0, 100, value=0, step=1, label="top_k (0 = off)")
                    top_p = gr.Slider(0.05, 1.0, value=1.0, label="top_p")
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
                    seed = gr.Number(value=0, precision=0, label="seed (sampling)")
                button = gr.Button("Caption", variant="primary", elem_id="caption-button")
            with gr.Column(scale=2):
                status = gr.Markdown(elem_id="status")
                captions = gr.Markdown(elem_id="captions")
                overlay = gr.Image(label="attention overlay (one colour scale for the caption)", type="pil",
                                   elem_id="overlay", interactive=False)  # fmt: skip
                word = gr.Slider(1, 2, value=1, step=1, label="word", visible=False, elem_id="word")
                panel = gr.Image(label="the selected word's attention", type="pil", interactive=False)
                record = gr.JSON(label="JSON")
                download = gr.File(label="download the JSON", interactive=False)
        inputs = [
            upload,
            num_beams,
            nrs,
            do_sample,
            temperature,
            top_k,
            top_p,
            no_repeat,
            length_penalty,
            seed,
        ]
        outputs = [status, captions, overlay, word, panel, record, download, state, picture]
        button.click(caption, inputs=inputs, outputs=outputs)
        word.change(word_panel, inputs=[state, picture, word], outputs=panel)
    return demo
