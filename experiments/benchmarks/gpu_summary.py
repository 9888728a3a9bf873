"""The last step of ``scripts/gpu_check.sh``: gather what the other steps of ``experiments.benchmarks.gpu_check``
wrote (one JSON each in the work folder, the parts' status and times in ``parts.jsonl``) with the machine's
environment into ``summary.json`` and the ``summary.md`` table committed under docs/results/.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
from pathlib import Path


def environment() -> dict:
    import torch

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "gpu": None,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    for name in ("pytorch_lightning", "torchvision", "hydra", "omegaconf", "pycocotools", "nltk", "numpy"):
        try:
            env[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001 - missing or broken: say so
            env[name] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env["gpu"] = torch.cuda.get_device_name(0)
        env["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        env["capability"] = f"{props.major}.{props.minor}"
        env["multiprocessors"] = props.multi_processor_count
        env["tf32_convolutions"] = bool(torch.backends.cudnn.allow_tf32)
        env["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
        try:
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20,
            ).stdout.strip()  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            env["driver"] = None
    return env


def _read(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _bench_rows(bench: dict | None) -> list[dict]:
    keep = (
        "decoder",
        "what",
        "seconds",
        "tokens/s",
        "images/s",
        "peak MB",
        "of peak",
        "of spec",
        "speed-up",
        "identical",
    )
    return [{k: r[k] for k in keep if k in r} for r in (bench or {}).get("rows", [])]


def summary_step(args: argparse.Namespace, tolerance_note: str) -> dict:
    """Gather the steps' JSON files of ``args.work`` (and ``parts.jsonl``) into ``args.out``/summary.json and
    summary.md; ``tolerance_note``: what "identical" meant in the comparisons, printed under them."""
    work, out = args.work, args.out
    parts = (
        [json.loads(line) for line in (work / "parts.jsonl").open()]
        if (work / "parts.jsonl").is_file()
        else []
    )
    summary: dict = {"device": args.device, "quick": args.quick, "environment": environment(), "parts": parts}
    summary["spec_peak_tflops"] = args.spec_peak_tflops
    summary["reference_matmul_tflops"] = args.reference_tflops
    for name in ("bench_paper", "bench_large"):
        bench = _read(work / f"{name}.json")
        if bench:
            peak = bench["args"].get("peak")
            summary[name] = {
                "args": {
                    k: bench["args"].get(k)
                    for k in ("batch", "length", "grid", "feature_dim", "dim", "vocab", "bf16", "device")
                },
                "measured_matmul_tflops": peak / 1e12 if peak else None,
                "matmul_size": bench["args"].get("peak_size"),
                "rows": _bench_rows(bench),
            }
            soft = next(
                (
                    r
                    for r in bench["rows"]
                    if r.get("what") == "train step (ours)" and r.get("decoder") == "soft"
                ),
                None,
            )
            if soft and "GFLOP" in soft:
                achieved = soft["GFLOP"] * 1e9 / soft["seconds"]
                summary[name]["soft_train_tflops"] = achieved / 1e12
                summary[name]["soft_of_spec_peak"] = achieved / (args.spec_peak_tflops * 1e12)
                summary[name]["soft_of_reference_matmul"] = achieved / (args.reference_tflops * 1e12)
                summary[name]["soft_of_measured_matmul"] = achieved / peak if peak else None
    for name in ("train", "cli", "captioner"):
        summary[name] = _read(work / f"{name}.json")
    summary["tolerance_note"] = tolerance_note
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str, allow_nan=True))
    (out / "summary.md").write_text(markdown(summary))
    return summary


def _fmt(value, spec: str = "{:.3g}") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return spec.format(value)
    return str(value)


def markdown(s: dict) -> str:
    env = s["environment"]
    lines = [
        f"# GPU check ({s['device']}{', quick' if s['quick'] else ''})",
        "",
        f"{env.get('gpu') or 'no GPU'}; torch {env['torch']} (CUDA {env['cuda']}, cuDNN {env['cudnn']}), "
        f"Lightning {env['pytorch_lightning']}, Python {env['python']}, {env['cpu_count']} CPUs.",
        "",
        "| part | status | seconds | note |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {p['part']} | {p['status']} | {p['seconds']:.0f} | {p.get('note', '')} |" for p in s["parts"]
    ]
    for name in ("bench_paper", "bench_large"):
        b = s.get(name)
        if not b:
            continue
        a = b["args"]
        lines += [
            "",
            f"## Bench, batch {a['batch']} ({'bf16' if a['bf16'] else 'fp32'}, grid {a['grid']}², dim {a['dim']}, vocab {a['vocab']})",
            "",
        ]
        lines.append(
            f"Measured matmul peak ({b['matmul_size']}³): {_fmt(b['measured_matmul_tflops'], '{:.3g}')} TFLOP/s. "
            f"Soft training step: {_fmt(b.get('soft_train_tflops'), '{:.2f}')} TFLOP/s = "
            f"{_fmt(b.get('soft_of_spec_peak'), '{:.2%}')} of the {s['spec_peak_tflops']:.0f} TFLOP/s spec, "
            f"{_fmt(b.get('soft_of_reference_matmul'), '{:.2%}')} of the {s['reference_matmul_tflops']:.0f} TFLOP/s "
            f"measured matmul, {_fmt(b.get('soft_of_measured_matmul'), '{:.2%}')} of this run's matmul."
        )
        lines += [
            "",
            "| decoder | what | seconds | tokens/s | images/s | of spec | speed-up |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in b["rows"]:
            lines.append(
                f"| {r['decoder']} | {r['what']} | {r['seconds']:.4f} | {_fmt(r.get('tokens/s'), '{:,.0f}')} | "
                f"{_fmt(r.get('images/s'), '{:,.1f}')} | {_fmt(r.get('of spec'), '{:.2%}')} | {_fmt(r.get('speed-up'), '{:.1f}×')} |"
            )
    t = s.get("train")
    if t:
        lines += ["", "## Training (synthetic scenes, bf16-mixed)", ""]
        lines.append(
            f"{t.get('steps')} steps, {t.get('epochs')} epochs, {t.get('validations')} validations; "
            f"train loss {_fmt(t.get('first_train_loss'))} -> {_fmt(t.get('last_train_loss'))}; "
            f"last validation (step {t.get('last_val_step')}): "
            + ", ".join(f"{k[4:]} {v:.4g}" for k, v in (t.get("last_val") or {}).items())
        )
    c = s.get("cli")
    if c:
        lines += ["", f"## `caption` and `evaluate`: {c['device']} against cpu (fp32)", ""]
        for stem, e in c["caption"].items():
            lines.append(_agreement_line(f"caption {stem}", e))
        e = c.get("evaluate")
        if e:
            if "error" in e:
                lines.append(
                    f"- evaluate {Path(e['checkpoint']).stem}: failed: {' / '.join(e['error'].values())}"
                )
            else:
                lines.append(
                    f"- evaluate {Path(e['checkpoint']).stem} on {e['images']} test scenes: {e['identical']:.1%} "
                    f"captions identical, max score difference {e['max_score_diff']:.2g}; CIDEr cpu "
                    f"{e['scores']['cpu'].get('CIDEr', math.nan):.4f}, {c['device']} {e['scores']['device'].get('CIDEr', math.nan):.4f}"
                )
    k = s.get("captioner")
    if k:
        lines += [
            "",
            f"## `Captioner(device={k['device']!r}, bf16=...)` against cpu fp32 ({k['images']} scenes)",
            "",
        ]
        for stem, e in k["checkpoints"].items():
            if "error" in e:
                lines.append(f"- {stem}: failed: {e['error']}")
            for key, v in e.items():
                if isinstance(v, dict) and "identical" in v:
                    lines.append(_agreement_line(f"{stem} {key} ({v['images/s']:,.0f} images/s)", v))
    lines += ["", f"Tolerances: {s['tolerance_note']}", ""]
    return "\n".join(lines)


def _agreement_line(label: str, e: dict) -> str:
    if "error" in e:
        return f"- {label}: failed: {' / '.join(e['error'].values()) if isinstance(e['error'], dict) else e['error']}"
    ok = "within" if e["within_tolerance"] else "OUTSIDE"
    return (
        f"- {label}: {e['identical']:.1%} of {e['images']} captions identical, max |Δ log-prob| "
        f"{e['max_token_logprob_diff']:.2g} a token (mean {e['mean_token_logprob_diff']:.2g})"
        + (
            f", the {e['differing_captions']} others {e['max_differing_score_diff']:.2g} apart in score at most"
            if e["differing_captions"]
            else ""
        )
        + f": {ok} the {e['precision']} tolerance"
    )
