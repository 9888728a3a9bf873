"""Benchmark: training step, decoding and encoder throughput, with straightforward references.

    python scripts/bench.py [--decoders soft,hard_reinforce,hard_gumbel,transformer] [--quick]
                            [--compile] [--device cpu|cuda] [--bf16] [--json bench.json]

Sizes default to the paper's (Xu et al.): grid 14×14 of 2048-d features, embedding / hidden /
attention 512, vocabulary 10,000, captions of 20 tokens, batch 32. The encoder is not part of the
training step (features are given, as with a frozen encoder or cached features).

References measured in the same run, so speed-ups are ratios, not absolute times (the training step
and its reference are timed alternately, and the speed-up is the median of the pairs' ratios):
* soft LSTM training step written the straightforward way (keys W_k·a recomputed at every step,
  embedding gates and output layer one step at a time: captioning/bench/reference.py), same weights,
  same math (its loss is checked equal);
* beam search one image at a time (our beam search with batch 1), captions checked identical.
The FLOPs of the soft training step are counted analytically and divided by the measured peak of a
large fp32 matmul on this machine, to print the fraction of the roofline reached.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import hydra
import psutil
import torch
from omegaconf import open_dict

import captioning  # noqa: F401  (first: sets OMP_WAIT_POLICY before torch starts OpenMP)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from captioning.bench.reference import ReferenceSoftLSTM, per_image_beam_search  # noqa: E402
from captioning.decoding import beam_search, greedy  # noqa: E402
from captioning.losses import caption_loss  # noqa: E402
from captioning.models.decoders.base import shift_inputs  # noqa: E402
from captioning.runtime import keep_freed_memory, release_free_heap  # noqa: E402

from conftest import compose_train  # noqa: E402

NO_END = -1  # no token has this id: every caption decodes the full length, so work is comparable


class PeakMemory:
    """Peak memory during a block: CUDA's allocator peak, or sampled process RSS growth on CPU."""

    def __init__(self, device: torch.device):
        self.device, self.peak_mb = device, 0.0

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            return self
        gc.collect()
        release_free_heap()  # else memory freed by an earlier block keeps the baseline high and hides growth
        self.proc, self.base, self.stop = psutil.Process(), psutil.Process().memory_info().rss, False
        self.high = self.base

        def sample():
            while not self.stop:
                self.high = max(self.high, self.proc.memory_info().rss)
                time.sleep(0.002)

        self.thread = threading.Thread(target=sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            self.peak_mb = torch.cuda.max_memory_allocated() / 2**20
        else:
            self.stop = True
            self.thread.join()
            self.peak_mb = (self.high - self.base) / 2**20


def seconds(fn, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def timed(fn, repeats: int, device: torch.device, warmup: int = 1) -> float:
    """Median seconds per call."""
    for _ in range(warmup):
        fn()
    return median([seconds(fn, device) for _ in range(repeats)])


def timed_pairs(fn, reference, repeats: int, device: torch.device) -> tuple[float, float, float]:
    """Median seconds of ``fn`` and of ``reference`` timed alternately (fn, ref, fn, ref, ...), and the
    median of the per-pair ratios ref / fn. A shared machine's speed drifts by ±20% over seconds (other
    processes, clock): alternating puts the drift on both sides of each ratio instead of on one."""
    fn(), reference()  # warm-up
    pairs = [(seconds(fn, device), seconds(reference, device)) for _ in range(repeats)]
    ours, ref = zip(*pairs)
    return median(list(ours)), median(list(ref)), median([r / o for o, r in pairs])


def build_decoder(name: str, args) -> tuple[torch.nn.Module, Callable[..., torch.optim.Optimizer]]:
    """The decoder at the benchmark's sizes, and the training config's optimizer factory."""
    overrides = [f"model/decoder={name}", "model/encoder=resnet101", "model.encoder.pretrained=false"]
    overrides += [f"model.decoder.embed_dim={args.dim}"]
    if name == "transformer":
        overrides += [
            f"model.decoder.hidden_dim={4 * args.dim}",
            f"model.decoder.num_heads={args.dim // 64}",
        ]
    else:
        overrides += [
            f"model.decoder.hidden_dim={args.dim}",
            f"model.decoder.attention.attention_dim={args.dim}",
        ]
    cfg = compose_train(overrides)
    with open_dict(cfg):
        cfg.model.decoder.vocab_size = args.vocab
        cfg.model.decoder.feature_dim = args.feature_dim
    torch.manual_seed(0)
    return hydra.utils.instantiate(cfg.model.decoder), hydra.utils.instantiate(cfg.model.optimizer)


def soft_step_flops(b: int, t: int, n_loc: int, d: int, e: int, h: int, a: int, v: int) -> float:
    """Forward + backward FLOPs of one soft-attention LSTM training step (multiply-add = 2 FLOPs).

    Backward costs twice the forward for every matmul except the key projection, whose input (the
    features) needs no gradient: there only the weight gradient is computed.
    """
    keys = 2 * b * n_loc * d * a
    per_step = (
        2 * b * h * a  # W_q h
        + 4 * b * n_loc * a  # add, tanh, v^T
        + 2 * b * n_loc * d  # context Σ α a
        + 2 * b * h  # gate β
        + 2 * b * (d + h) * 4 * h  # LSTM gates from ẑ and h
        + 2 * b * (h + d) * e  # deep output L_h h + L_z ẑ
    )
    batched = 2 * b * t * e * 4 * h + 2 * b * t * e * v  # embedding gates, output layer
    forward = keys + t * per_step + batched
    return 3 * forward - keys


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int = 2048) -> float:
    """FLOP/s of a large square matmul in the dtype the training step's matmuls run in."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    sec = timed(lambda: a @ b, repeats=5, device=device)
    return 2 * n**3 / sec


def bench_decoder(name: str, args, device: torch.device, rows: list[dict]) -> None:
    decoder, optimizer = build_decoder(name, args)
    decoder = decoder.to(device)
    b, t, n_loc = args.batch, args.length, args.grid**2  # n_loc = L grid locations
    g = torch.Generator().manual_seed(0)
    features = torch.randn(b, n_loc, args.feature_dim, generator=g).to(device)  # (B, L, D)
    tokens = torch.randint(4, args.vocab, (b, t + 1), generator=g).to(device)  # (B, T+1)
    tokens[:, 0] = 1
    inputs, targets = shift_inputs(tokens)
    opt = optimizer([p for p in decoder.parameters() if p.requires_grad])  # as training's (fused AdamW)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16)

    def train_step(module):
        with autocast:
            out = module(features, inputs)
            loss = caption_loss(out, targets, decoder, alpha_c=1.0).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    reference = ReferenceSoftLSTM(decoder) if name == "soft" else None
    if reference is not None:
        decoder.eval()
        with torch.no_grad():
            a = caption_loss(decoder(features, inputs), targets, decoder).loss
            r = caption_loss(reference(features, inputs), targets, decoder).loss
        assert torch.allclose(a, r, atol=1e-4, rtol=1e-4), f"reference differs: {a} vs {r}"

    def train_row(what: str, sec: float, **extra) -> None:
        row = {"decoder": name, "what": f"train step ({what})", "seconds": sec}
        rows.append({**row, "tokens/s": b * t / sec, "pairs/s": b / sec, **extra})

    def measure_train_step(label: str) -> None:
        decoder.train()
        with PeakMemory(device) as mem:  # ours alone: the reference's tensors must not count
            sec = timed(lambda: train_step(decoder), repeats=args.repeats, device=device)
        if reference is None:
            train_row(label, sec, **{"peak MB": mem.peak_mb})
            return
        # Timed again, alternating with the reference (the time above only went with the memory):
        # the speed-up is the median of the pairs' ratios.
        sec, sec_ref, ratio = timed_pairs(
            lambda: train_step(decoder), lambda: train_step(reference), args.repeats, device
        )
        flops = soft_step_flops(b, t, n_loc, decoder.grid_dim, args.dim, args.dim, args.dim, args.vocab)
        extra = {"peak MB": mem.peak_mb, "GFLOP": flops / 1e9, "of peak": flops / sec / args.peak}
        train_row(label, sec, **extra)
        train_row(f"reference, paired with {label}", sec_ref, **{"speed-up": ratio})

    measure_train_step("ours")
    if args.compile:  # the same decoder with its step compiled (model.compile=true), after the eager runs
        decoder.compile_step()
        measure_train_step("ours+compile")
    decoder.eval()
    for beam in (1, 3, 5):

        def run(k=beam):
            with autocast:
                if k == 1:
                    return greedy(decoder, features, max_length=t, end_id=NO_END)
                return beam_search(decoder, features, beam_size=k, max_length=t, end_id=NO_END)

        sec = timed(run, repeats=args.repeats, device=device)
        rows.append({"decoder": name, "what": f"decode beam {beam}", "seconds": sec, "images/s": b / sec})
        if beam == 5 and name == "soft":
            # The straightforward beam search: one image at a time over the reference decoder (keys
            # recomputed every step). Same algorithm: the captions must be identical.
            n, reference = args.per_image, ReferenceSoftLSTM(decoder)
            with torch.no_grad():
                ours = beam_search(decoder, features[:n], beam_size=5, max_length=t, end_id=NO_END)
            start = time.perf_counter()
            ref = per_image_beam_search(reference, features[:n], beam_size=5, max_length=t, end_id=NO_END)
            per_image = n / (time.perf_counter() - start)
            same = all(torch.equal(ours.tokens[i], r.tokens[0]) for i, r in enumerate(ref))
            rows.append(
                {
                    "decoder": name,
                    "what": "decode beam 5 (per-image reference)",
                    "seconds": b / per_image,
                    "images/s": per_image,
                    "speed-up": (b / sec) / per_image,
                    "identical": same,
                }
            )


def bench_encoders(args, device: torch.device, rows: list[dict]) -> None:
    from captioning.models.encoders import EfficientNetLite0Encoder, TorchvisionEncoder

    encoders = {
        "efficientnet_lite0 (stride16)": lambda: EfficientNetLite0Encoder(pretrained=False, grid_size=14)
    }
    if not args.quick:
        encoders["resnet101"] = lambda: TorchvisionEncoder("resnet101", pretrained=False, grid_size=14)
    images = torch.rand(args.encoder_batch, 3, 224, 224, device=device)
    for name, make in encoders.items():
        enc = make().to(device).eval()
        with torch.no_grad():
            sec = timed(lambda e=enc: e(images), repeats=3, device=device)
        rows.append(
            {"decoder": "-", "what": f"encoder {name} @224", "seconds": sec, "images/s": len(images) / sec}
        )


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
        "of peak": "{:.0%}",
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
    args = p.parse_args()
    keep_freed_memory()  # as training and the CLIs do (captioning/runtime.py)
    if args.quick:
        args.batch, args.grid, args.feature_dim, args.dim, args.vocab, args.length = 8, 4, 64, 64, 200, 8
        args.repeats, args.per_image, args.encoder_batch = 2, 4, 2
    device = torch.device(args.device)
    # The roofline in the dtype autocast gives the matmuls; on a CPU without bf16 units (AVX2 here) a
    # 2048² bf16 matmul takes ~55 s, so there --bf16 is only a smoke test and the fp32 peak is kept.
    matmul_dtype = torch.bfloat16 if args.bf16 and device.type == "cuda" else torch.float32
    args.peak = matmul_peak(device, matmul_dtype)
    print(
        f"device {device}, threads {torch.get_num_threads()}, measured {str(matmul_dtype)[6:]} matmul peak "
        f"{args.peak / 1e9:.0f} GFLOP/s; batch {args.batch}, grid {args.grid}x{args.grid}x{args.feature_dim}, "
        f"dim {args.dim}, vocab {args.vocab}, length {args.length}",
        flush=True,
    )
    rows: list[dict] = []
    for name in args.decoders.split(","):
        bench_decoder(name.strip(), args, device, rows)
        print(f"  {name}: done", file=sys.stderr, flush=True)
    bench_encoders(args, device, rows)
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


if __name__ == "__main__":
    main()
