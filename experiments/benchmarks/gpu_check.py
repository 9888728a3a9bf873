"""The steps of ``scripts/gpu_check.sh`` that are Python: scenes to caption, the CLIs on two devices and
their comparison, the ``Captioner`` API in bf16, the training run's numbers and the summary.

    python -m experiments.benchmarks.gpu_check render --out DIR --n 64
    python -m experiments.benchmarks.gpu_check cli --device cuda --images DIR --work W --checkpoint A ...
    python -m experiments.benchmarks.gpu_check captioner --device cuda --images DIR --work W --checkpoint A ...
    python -m experiments.benchmarks.gpu_check train --run RUN_DIR --log LOG --json W/train.json
    python -m experiments.benchmarks.gpu_check summary --work W --out OUT

Each step writes one JSON in the work folder; ``summary`` gathers them (and the parts' status and times
that the shell script logged in ``W/parts.jsonl``) into ``OUT/summary.json`` and ``OUT/summary.md``
(``gpu_summary.py``).

What "identical" means here (the tolerances, stated once): captions are compared word for word; where
the words agree, the per-token log-probabilities are compared; where they differ, the two runs' best
scores must be a near-tie (the beams ranked within the tolerance of each other: a rounding flipped them).

* fp32 on the GPU against fp32 on the CPU: the same arithmetic in another order, except that cuDNN runs
  fp32 convolutions in TF32 by default (10-bit mantissa): log-probs within 0.01 nats a token, and a
  caption may differ only where the scores are within 0.02 of each other.
* bf16 autocast against fp32: bf16 keeps 8 bits of mantissa (relative error ~0.4% per rounding): log-probs
  within 0.25 nats a token, and a caption may differ only where the scores are within 0.1. On the CPU,
  flickr8k_soft_scst on 8 synthetic scenes gave 6 of 8 identical, 0.19 nats a token at most, and the 2
  others 0.005 and 0.016 apart in score.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from experiments.benchmarks.gpu_summary import summary_step

TOLERANCES = {
    "fp32": {"max_token_logprob_diff": 0.01, "near_tie_score_diff": 0.02},
    "bf16": {"max_token_logprob_diff": 0.25, "near_tie_score_diff": 0.1},
}
TOLERANCE_NOTE = (
    "captions compared word for word; token log-probs compared where the words agree; where they differ "
    "the two runs' scores must be a near-tie. fp32 device vs fp32 CPU (cuDNN convolutions in TF32 by "
    "default): <= 0.01 nats a token, near-tie <= 0.02 in score. bf16 autocast vs fp32 CPU (8-bit "
    "mantissa): <= 0.25 nats a token, near-tie <= 0.1 in score."
)
CLI = [sys.executable, "-m", "captioning.cli.main"]


def render(out: Path, n: int) -> list[Path]:
    """``n`` synthetic scenes as PNGs, from a seed stream that no training, val or test split draws."""
    from PIL import Image

    from captioning.data.synthetic import render_scene

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = out / f"scene_{i:03d}.png"
        Image.fromarray(render_scene((2015, 8, i)).image).save(path)
        paths.append(path)
    return paths


def compare(reference: list[dict], other: list[dict], precision: str) -> dict:
    """Word-for-word agreement of two runs' captions (same images, same order), their log-probs where
    the words agree and their scores where they do not, against the ``precision``'s tolerance."""
    if [r["image"] for r in reference] != [o["image"] for o in other]:
        raise ValueError("the two runs captioned different images")
    same, token_diffs, score_diffs, differing = 0, [], [], []
    for r, o in zip(reference, other):
        score_diffs.append(abs(r["score"] - o["score"]))
        if r["tokens"] == o["tokens"]:
            same += 1
            token_diffs += [abs(a - b) for a, b in zip(r["token_log_probs"], o["token_log_probs"])]
        else:
            differing.append({"image": Path(r["image"]).name, "reference": r["caption"], "other": o["caption"],
                              "score_diff": abs(r["score"] - o["score"])})  # fmt: skip
    n, tol = len(reference), TOLERANCES[precision]
    out = {
        "images": n,
        "identical": same / n if n else math.nan,
        "max_token_logprob_diff": max(token_diffs, default=0.0),
        "mean_token_logprob_diff": sum(token_diffs) / len(token_diffs) if token_diffs else 0.0,
        "max_score_diff": max(score_diffs, default=0.0),
        "differing_captions": len(differing),
        "near_ties": sum(d["score_diff"] <= tol["near_tie_score_diff"] for d in differing),
        "max_differing_score_diff": max((d["score_diff"] for d in differing), default=0.0),
        "precision": precision,
        "tolerance": tol,
        "differing": differing[:5],
    }
    out["within_tolerance"] = bool(
        n
        and out["max_token_logprob_diff"] <= tol["max_token_logprob_diff"]
        and out["near_ties"] == len(differing)
    )
    return out


def _caption_cmd(checkpoint: str, device: str, images: Path) -> list[str]:
    return [*CLI, "caption", str(images), "--checkpoint", checkpoint, "--device", device, "--json"]


def _eval_cmd(checkpoint: str, device: str, out_dir: Path, n: int) -> list[str]:
    return [*CLI, "evaluate", "--checkpoint", checkpoint, "--out-dir", str(out_dir), "tokenizer=simple",
            "feature_cache=false", f"device={device}", f"data.test.num_images={n}", "batch_size=50"]  # fmt: skip


def run_all(commands: dict[str, list[str]], work: Path, timeout: float) -> dict[str, dict]:
    """Run the commands at once, each with its stdout in ``work/<name>.out``; the CPU's cores are shared
    out between them (OMP_NUM_THREADS), else each would start a thread per core."""
    threads = str(max(1, (os.cpu_count() or 1) // max(1, len(commands))))
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", threads)}
    procs, started = {}, time.perf_counter()
    for name, cmd in commands.items():
        print("$ " + " ".join(cmd), flush=True)
        out = open(work / f"{name}.out", "w")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True, env=env)
        procs[name] = (proc, out)
    results = {}
    for name, (proc, out) in procs.items():
        try:
            _, err = proc.communicate(timeout=max(1.0, timeout - (time.perf_counter() - started)))
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        out.close()
        results[name] = {
            "rc": proc.returncode,
            "seconds": time.perf_counter() - started,
            "stderr": err[-2000:],
        }
        print(f"{name}: exit status {proc.returncode} after {results[name]['seconds']:.1f} s", flush=True)
        if proc.returncode != 0:
            print(err[-2000:], file=sys.stderr, flush=True)
    return results


def cli_step(args: argparse.Namespace) -> dict:
    """``caption`` (each checkpoint) and ``evaluate`` (one) on the CPU and on ``--device``, all at once;
    their captions compared word for word, and the scores."""
    work, dev = args.work, args.device
    report = {"device": dev, "reference_device": "cpu", "caption": {}, "evaluate": None}
    work.mkdir(parents=True, exist_ok=True)
    commands, stems = {}, {}
    for checkpoint in args.checkpoint:
        stems[checkpoint] = stem = Path(checkpoint).stem
        commands[f"caption_{stem}_ref_cpu"] = _caption_cmd(checkpoint, "cpu", args.images)
        commands[f"caption_{stem}_run_{dev}"] = _caption_cmd(checkpoint, dev, args.images)
    evaluated = args.eval_checkpoint if args.eval_images > 0 and args.eval_checkpoint else None
    if evaluated:
        dirs = {"cpu": work / "eval_ref_cpu", "device": work / f"eval_run_{dev}"}
        commands["evaluate_ref_cpu"] = _eval_cmd(evaluated, "cpu", dirs["cpu"], args.eval_images)
        commands[f"evaluate_run_{dev}"] = _eval_cmd(evaluated, dev, dirs["device"], args.eval_images)
    runs = run_all(commands, work, args.timeout)

    def failed(*names: str) -> dict | None:
        bad = {n: runs[n]["stderr"][-500:] for n in names if runs[n]["rc"] != 0}
        return bad or None

    for checkpoint, stem in stems.items():
        names = (f"caption_{stem}_ref_cpu", f"caption_{stem}_run_{dev}")
        entry = {
            "checkpoint": checkpoint,
            "seconds": dict(zip(("cpu", "device"), (runs[n]["seconds"] for n in names))),
        }
        if error := failed(*names):
            entry["error"] = error
        else:
            ref, other = ([json.loads(line) for line in (work / f"{n}.out").open()] for n in names)
            entry.update(compare(ref, other, "fp32"))
        report["caption"][stem] = entry
    if evaluated:
        names = ("evaluate_ref_cpu", f"evaluate_run_{dev}")
        entry = {"checkpoint": evaluated, "images": args.eval_images,
                 "seconds": dict(zip(("cpu", "device"), (runs[n]["seconds"] for n in names)))}  # fmt: skip
        if error := failed(*names):
            entry["error"] = error
        else:
            (ref, other), (s_ref, s_other) = (
                [json.loads((d / f).read_text()) for d in dirs.values()]
                for f in ("results.json", "scores.json")
            )
            entry["identical"] = sum(a["caption"] == b["caption"] for a, b in zip(ref, other)) / len(ref)
            entry["scores"] = {"cpu": s_ref["scores"], "device": s_other["scores"]}
            entry["max_score_diff"] = max(
                abs(v - s_other["scores"].get(k, math.nan)) for k, v in s_ref["scores"].items()
            )
            entry["skipped_metrics"] = s_other.get("skipped", {})
            entry["objects"] = {
                d: s.get("objects", {}).get("object_accuracy")
                for d, s in (("cpu", s_ref), ("device", s_other))
            }
            entry["grounding"] = {
                d: s.get("grounding", {}).get("grounding") for d, s in (("cpu", s_ref), ("device", s_other))
            }
            # results.json holds no scores, so no near-tie test: the captions `caption` compared above
            # with their scores are the evidence; here at most 2% of the captions may differ.
            entry["within_tolerance"] = entry["identical"] >= 0.98
        report["evaluate"] = entry
    report["tolerance_note"] = TOLERANCE_NOTE
    return report


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _captioner_run(
    checkpoint: str, device: str, bf16: bool, pictures: list, names: list[str], batch_size: int
):
    """Seconds to caption ``pictures`` with ``Captioner.from_checkpoint(checkpoint, device, bf16)`` after a
    warm-up batch, and the results as ``caption --json`` writes them."""
    from captioning.inference.captioner import Captioner

    model = Captioner.from_checkpoint(checkpoint, device=device, bf16=bf16)
    model.caption(pictures[:batch_size], batch_size=batch_size)  # warm-up: kernels, cuDNN's choices
    _sync(model.device)
    start = time.perf_counter()
    results = model.caption(pictures, batch_size=batch_size)
    _sync(model.device)
    seconds = time.perf_counter() - start
    return seconds, [{**r.to_json(), "image": name} for name, r in zip(names, results)]


def captioner_step(args: argparse.Namespace) -> dict:
    """``Captioner.from_checkpoint(..., device=D, bf16=True)`` (and bf16=False) on the scenes: images/s
    (decoding from in-memory images, after a warm-up batch) and agreement with fp32 on the CPU."""
    from PIL import Image

    images = sorted(args.images.glob("*.png"))
    pictures = [Image.open(p).convert("RGB") for p in images]
    names = [str(p) for p in images]
    report = {"device": args.device, "images": len(images), "batch_size": args.batch_size, "checkpoints": {}}
    for checkpoint in args.checkpoint:
        stem, entry = Path(checkpoint).stem, {"checkpoint": checkpoint}
        reference_file = args.work / f"caption_{stem}_ref_cpu.out"
        reference = None
        if reference_file.is_file() and reference_file.stat().st_size:
            reference = [json.loads(line) for line in reference_file.open()]
            if len(reference) != len(images):
                reference = None
        runs = [("cpu", False)] if reference is None else []
        runs += [(args.device, False), (args.device, True)]
        try:
            for device, bf16 in runs:
                seconds, rows = _captioner_run(checkpoint, device, bf16, pictures, names, args.batch_size)
                key = f"{device}_{'bf16' if bf16 else 'fp32'}"
                if reference is None:  # the first run (cpu, fp32) is the reference
                    reference, entry["reference"] = rows, "Captioner on cpu, fp32"
                    entry["reference_run"] = {"seconds": seconds, "images/s": len(images) / seconds}
                    continue
                entry.setdefault("reference", f"captioning caption --device cpu ({reference_file.name})")
                entry[key] = {"seconds": seconds, "images/s": len(images) / seconds,
                              **compare(reference, rows, "bf16" if bf16 else "fp32")}  # fmt: skip
        except Exception as err:  # noqa: BLE001 - one checkpoint that cannot load (a missing package) is reported
            entry["error"] = " ".join(f"{type(err).__name__}: {err}".split())[:500]
            print(f"{checkpoint}: {entry['error']}", file=sys.stderr, flush=True)
        report["checkpoints"][stem] = entry
    report["tolerance_note"] = TOLERANCE_NOTE
    return report


def train_step(args: argparse.Namespace) -> dict:
    """The training run's numbers from its metrics.csv (Lightning's CSVLogger) and log."""
    report: dict = {"run": str(args.run)}
    log = args.log.read_text(errors="replace") if args.log and args.log.is_file() else ""
    best = [line.split(":", 1)[1].strip() for line in log.splitlines() if line.startswith("best checkpoint:")]
    report["best_checkpoint"] = best[-1] if best else None
    files = sorted(args.run.glob("csv/*/metrics.csv"))
    if not files:
        report["error"] = "no metrics.csv"
        return report
    report["metrics_csv"] = str(files[-1])
    rows = list(csv.DictReader(files[-1].open()))

    def number(text: str) -> float | None:
        try:
            return float(text)
        except (TypeError, ValueError):
            return None

    steps = [number(r.get("step")) for r in rows]
    report["steps"] = int(max((s for s in steps if s is not None), default=0)) + 1
    report["epochs"] = int(max((number(r.get("epoch")) or 0 for r in rows), default=0)) + 1
    val = [r for r in rows if any(k.startswith("val/") and r[k] not in ("", None) for k in r)]
    report["validations"] = len(val)
    if val:
        last = {k: number(v) for k, v in val[-1].items() if k.startswith("val/") and number(v) is not None}
        report["last_val"] = last
        report["last_val_step"] = int(number(val[-1].get("step")) or 0)
        for key in ("val/scene_score", "val/CIDEr", "val/Bleu_4"):
            values = [number(r.get(key)) for r in val if number(r.get(key)) is not None]
            if values:
                report[f"best_{key[4:]}"] = max(values)
    losses = [number(r.get("train/loss")) for r in rows if number(r.get("train/loss")) is not None]
    if losses:
        report["first_train_loss"], report["last_train_loss"] = losses[0], losses[-1]
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="step", required=True)
    r = sub.add_parser("render")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--n", type=int, default=64)
    for name in ("cli", "captioner"):
        c = sub.add_parser(name)
        c.add_argument("--device", default="cuda")
        c.add_argument("--images", type=Path, required=True)
        c.add_argument("--work", type=Path, required=True)
        c.add_argument("--checkpoint", action="append", default=[])
        c.add_argument("--timeout", type=float, default=300)
        c.add_argument("--eval-images", type=int, default=0)
        c.add_argument("--eval-checkpoint", default=None)
        c.add_argument("--batch-size", type=int, default=32)
    t = sub.add_parser("train")
    t.add_argument("--run", type=Path, required=True)
    t.add_argument("--log", type=Path, default=None)
    t.add_argument("--json", type=Path, required=True)
    s = sub.add_parser("summary")
    s.add_argument("--work", type=Path, required=True)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--device", default="cuda")
    s.add_argument("--quick", action="store_true")
    s.add_argument("--spec-peak-tflops", type=float, default=989.0)
    s.add_argument("--reference-tflops", type=float, default=790.0)
    args = p.parse_args(argv)
    if args.step == "render":
        print(f"rendered {len(render(args.out, args.n))} scenes into {args.out}")
        return 0
    if args.step == "summary":
        summary_step(args, TOLERANCE_NOTE)
        print((args.out / "summary.md").read_text())
        return 0
    report = {"cli": cli_step, "captioner": captioner_step, "train": train_step}[args.step](args)
    target = args.json if args.step == "train" else args.work / f"{args.step}.json"
    target.write_text(json.dumps(report, indent=2, default=str))
    print(json.dumps(report, indent=2, default=str)[:4000])
    ok = all(e.get("within_tolerance", True) and "error" not in e for e in _entries(report))
    return 0 if ok else 1


def _entries(report: dict) -> list[dict]:
    if "caption" in report:
        return [*report["caption"].values(), *([report["evaluate"]] if report.get("evaluate") else [])]
    if "checkpoints" in report:
        return [v for e in report["checkpoints"].values() for v in (e, *e.values()) if isinstance(v, dict)]
    return [report]


if __name__ == "__main__":
    sys.exit(main())
