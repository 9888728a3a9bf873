"""Benchmark: training step, decoding and encoder throughput, with straightforward references.

    python scripts/bench.py [--decoders soft,hard_reinforce,hard_gumbel,transformer] [--quick]
                            [--compile] [--device cpu|cuda] [--bf16] [--json bench.json]
                            [--spec-peak-tflops 989] [--no-cpu-rows]
    python scripts/bench.py --data-pipeline [--quick] [--json docs/results/data_pipeline_cpu.json]

Sizes default to the paper's (Xu et al.): grid 14×14 of 2048-d features, embedding / hidden /
attention 512, vocabulary 10,000, captions of 20 tokens, batch 32. The encoder is not part of the
training step (features are given, as with a frozen encoder or cached features).

References measured in the same run, so speed-ups are ratios, not absolute times (the training step
and its reference are timed alternately, and the speed-up is the median of the pairs' ratios):
* soft LSTM training step written the straightforward way (keys W_k·a recomputed at every step,
  embedding gates and output layer one step at a time: experiments/benchmarks/reference.py), same weights,
  same math (its loss is checked equal);
* beam search one image at a time (our beam search with batch 1), captions checked identical.
The FLOPs of the soft training step are counted analytically and divided by the measured peak of a
large matmul on this machine (fp32; bf16 on a GPU with --bf16: 8192³ there, 2048³ on a CPU), to print the
fraction of the roofline reached; ``--spec-peak-tflops`` adds the fraction of a datasheet peak too (an
H100/H200 SXM: 989 TFLOP/s dense bf16).

``--data-pipeline`` measures the input pipeline instead (experiments/benchmarks/data_pipeline.py): images/s
of the datamodule's training loader (JPEG decode, resize, collate into batches of 64) with 0, 1 and 2
workers, feature-cache reads, and the workers per GPU a training step needs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
from pathlib import Path

from captioning.runtime import configure_process

configure_process()  # as training and the CLIs do, before torch is imported

import torch  # noqa: E402

from experiments.benchmarks.decode import bench_decode  # noqa: E402
from experiments.benchmarks.encoders import bench_encoders  # noqa: E402
from experiments.benchmarks.reward import bench_reward, bench_scst_step  # noqa: E402
from experiments.benchmarks.startup import bench_overlay, bench_startup  # noqa: E402
from experiments.benchmarks.timing import matmul_peak  # noqa: E402
from experiments.benchmarks.train_step import bench_train_step, build_decoder  # noqa: E402


def print_table(rows: list[dict]) -> None:
    cols = [
        "decoder",
        "what",
        "seconds",
        "tokens/s",
        "pairs/s",
        "images/s",
        "peak MB",
        "GFLOP",
        "of peak",
        "of spec",
        "speed-up",
        "identical",
    ]
    fmt = {
        "seconds": "{:.3f}",
        "tokens/s": "{:,.0f}",
        "pairs/s": "{:.1f}",
        "images/s": "{:.1f}",
        "peak MB": "{:,.0f}",
        "GFLOP": "{:.1f}",
        "of peak": "{:.1%}",
        "of spec": "{:.1%}",
        "speed-up": "{:.1f}×",
    }
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        cells = [fmt.get(c, "{}").format(r[c]) if c in r else "" for c in cols]
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--decoders", default="soft,hard_reinforce,hard_gumbel,transformer")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=20)
    p.add_argument("--grid", type=int, default=14)
    p.add_argument("--feature-dim", type=int, default=2048)
    p.add_argument("--dim", type=int, default=512, help="embedding = hidden = attention size")
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--per-image", type=int, default=8, help="images for the per-image beam reference")
    p.add_argument("--encoder-batch", type=int, default=8)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (GPU)")
    p.add_argument("--compile", action="store_true", help="torch.compile the decoder step")
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run in seconds")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument(
        "--spec-peak-tflops",
        type=float,
        default=None,
        help="a datasheet peak (TFLOP/s) in the matmuls' dtype: the soft step's fraction of it too "
        "(H100/H200 SXM dense bf16: 989)",
    )
    p.add_argument(
        "--peak-size", type=int, default=None, help="n of the n³ matmul measuring the peak (8192 on a GPU)"
    )
    p.add_argument(
        "--no-cpu-rows",
        action="store_true",
        help="leave out the rows that never touch the device (CLI start-up, overlay, CIDEr-D reward)",
    )
    p.add_argument(
        "--data-pipeline",
        action="store_true",
        help="the input pipeline's rows only: images/s of the training loader with 0/1/2 workers, feature-"
        "cache reads, workers per GPU (experiments/benchmarks/data_pipeline.py)",
    )
    args = p.parse_args()
    if args.data_pipeline:
        return data_pipeline(args)
    if args.quick:
        args.batch, args.grid, args.feature_dim, args.dim, args.vocab, args.length = 8, 4, 64, 64, 200, 8
        args.repeats, args.per_image, args.encoder_batch = 2, 4, 2
    device = torch.device(args.device)
    # The roofline in the dtype autocast gives the matmuls; on a CPU without bf16 units (AVX2 here) a
    # 2048² bf16 matmul takes ~55 s, so there --bf16 is only a smoke test and the fp32 peak is kept.
    matmul_dtype = torch.bfloat16 if args.bf16 and device.type == "cuda" else torch.float32
    if args.peak_size is None:  # a GPU's roofline needs a large product: 2048³ is launch-bound there
        args.peak_size = 8192 if device.type == "cuda" and not args.quick else 2048
    args.peak = matmul_peak(device, matmul_dtype, n=args.peak_size)
    args.spec_peak = args.spec_peak_tflops * 1e12 if args.spec_peak_tflops else None
    args.torch = torch.__version__
    args.gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    print(
        f"device {device}{f' ({args.gpu})' if args.gpu else ''}, torch {torch.__version__}, threads "
        f"{torch.get_num_threads()}, measured {str(matmul_dtype)[6:]} matmul peak ({args.peak_size}³) "
        f"{args.peak / 1e9:,.0f} GFLOP/s"
        + (f" (spec {args.spec_peak_tflops:,.0f} TFLOP/s)" if args.spec_peak else "")
        + f"; batch {args.batch}, grid {args.grid}x{args.grid}x{args.feature_dim}, "
        f"dim {args.dim}, vocab {args.vocab}, length {args.length}",
        flush=True,
    )
    rows: list[dict] = []
    for name in (n.strip() for n in args.decoders.split(",")):
        decoder, train = bench_train_step(name, args, device)
        rows += train + bench_decode(name, decoder, args, device)
        if name == "soft":
            rows += bench_scst_step(decoder, build_decoder(name, args)[1], args, device)
        print(f"  {name}: done", file=sys.stderr, flush=True)
    rows += bench_encoders(args, device)
    if not args.no_cpu_rows:
        rows += bench_startup(repeats=max(3, args.repeats))
        rows += bench_overlay()
        try:
            import pycocoevalcap  # noqa: F401 - the reward rows time ours against its scorer
        except ImportError:
            print("CIDEr-D reward rows skipped: pycocoevalcap is not installed", file=sys.stderr)
        else:
            rows += bench_reward(images=50 if args.quick else 500)
    print_table(rows)
    print(f"max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": {k: v for k, v in vars(args).items() if k != "json"}, "rows": rows},
                indent=2,
                default=str,
            )
        )


def data_pipeline(args: argparse.Namespace) -> None:
    """The ``--data-pipeline`` run: its table, the projection, and ``--json`` (rows + projection)."""
    from experiments.benchmarks.data_pipeline import bench_data_pipeline, summary

    small = dict(images=64, workers=(0, 1), sizes=(224,), cache_rows=256, repeats=1) if args.quick else {}
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, CPUs {len(os.sched_getaffinity(0))}"
    )
    result = bench_data_pipeline(**small)
    print_table(result["rows"])
    print("\n".join(summary(result)))
    if args.json:
        settings = {"torch": torch.__version__, "cpus": len(os.sched_getaffinity(0)), "quick": args.quick}
        args.json.write_text(json.dumps({"args": settings, **result}, indent=2, default=str))


if __name__ == "__main__":
    main()
