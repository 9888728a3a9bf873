"""Training-step rows of the benchmark: ours against the straightforward reference, paired in time.

The soft LSTM's reference (experiments/benchmarks/reference.py: keys W_k·a recomputed at every step,
embedding gates and output layer one step at a time) has the same weights and math; its loss is checked
equal before timing. The FLOPs of the soft step are counted analytically and divided by the measured
matmul peak (and a datasheet peak, when given), to report the fraction of the roofline reached.
"""

from __future__ import annotations

from collections.abc import Callable

import hydra
import torch

from captioning.compose import compose_config
from captioning.losses import caption_loss
from captioning.models.decoders.base import shift_inputs
from captioning.training.build import net_config
from experiments.benchmarks.reference import ReferenceSoftLSTM
from experiments.benchmarks.timing import PeakMemory, timed, timed_pairs


def build_decoder(name: str, args) -> tuple[torch.nn.Module, Callable[..., torch.optim.Optimizer]]:
    """The decoder at the benchmark's sizes, and the training config's optimizer factory."""
    overrides = [f"model/decoder={name}", "model/encoder=resnet101", "model.encoder.pretrained=false"]
    overrides += [f"model.decoder.embed_dim={args.dim}"]
    if name == "transformer":
        overrides += [
            f"model.decoder.ff_dim={4 * args.dim}",
            f"model.decoder.num_heads={args.dim // 64}",
        ]
    else:
        overrides += [
            f"model.decoder.hidden_dim={args.dim}",
            f"model.decoder.attention.attention_dim={args.dim}",
        ]
    if name == "hard_reinforce":  # one attention sample per caption: the same work per step as the others
        overrides += [
            "model.decoder.attention.num_samples=1",
            "model.decoder.attention.baseline=moving_average",
        ]
    cfg, _ = compose_config("train", [*overrides, f"model.decoder.feature_dim={args.feature_dim}"])
    torch.manual_seed(0)
    decoder = hydra.utils.instantiate(net_config(cfg.model, args.vocab).decoder)  # features are given
    return decoder, hydra.utils.instantiate(cfg.model.optimizer)


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


def random_problem(args, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Features (B, L, D), teacher-forcing inputs and targets (B, T) at the benchmark's sizes."""
    g = torch.Generator().manual_seed(0)
    features = torch.randn(args.batch, args.grid**2, args.feature_dim, generator=g).to(device)  # (B, L, D)
    tokens = torch.randint(4, args.vocab, (args.batch, args.length + 1), generator=g).to(device)  # (B, T+1)
    tokens[:, 0] = 1
    inputs, targets = shift_inputs(tokens)
    return features, inputs, targets


class TrainStep:
    """One optimisation step (forward, loss, backward, training's optimizer) of ``module`` on a fixed batch;
    ``module`` is the decoder or its reference, which shares the decoder's parameters."""

    def __init__(self, decoder, optimizer, problem, bf16: bool):
        self.decoder, (self.features, self.inputs, self.targets) = decoder, problem
        self.opt = optimizer([p for p in decoder.parameters() if p.requires_grad])  # fused AdamW
        self.autocast = torch.autocast(self.features.device.type, dtype=torch.bfloat16, enabled=bf16)

    def __call__(self, module) -> None:
        with self.autocast:
            loss = caption_loss(module(self.features, self.inputs), self.targets, self.decoder).loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def check_reference(decoder, reference, problem) -> None:
    """The reference computes the same loss as ours (eval mode: no dropout)."""
    features, inputs, targets = problem
    decoder.eval()
    with torch.no_grad():
        a = caption_loss(decoder(features, inputs), targets, decoder).loss
        r = caption_loss(reference(features, inputs), targets, decoder).loss
    assert torch.allclose(a, r, atol=1e-4, rtol=1e-4), f"reference differs: {a} vs {r}"


def train_rows(name: str, label: str, decoder, step: TrainStep, args, device: torch.device) -> list[dict]:
    """Rows for our step (tokens/s, peak memory) and, for the soft LSTM, the paired reference."""
    b, t = args.batch, args.length
    decoder.train()
    with PeakMemory(device) as mem:  # ours alone: the reference's tensors must not count
        sec = timed(lambda: step(decoder), repeats=args.repeats, device=device)

    def row(what: str, sec: float, **extra) -> dict:
        return {"decoder": name, "what": f"train step ({what})", "seconds": sec,
                "tokens/s": b * t / sec, "pairs/s": b / sec, **extra}  # fmt: skip

    if name != "soft":
        return [row(label, sec, **{"peak MB": mem.peak_mb})]
    reference = ReferenceSoftLSTM(decoder)
    # Timed again, alternating with the reference (the time above only went with the memory): the
    # speed-up is the median of the pairs' ratios.
    sec, sec_ref, ratio = timed_pairs(lambda: step(decoder), lambda: step(reference), args.repeats, device)
    flops = soft_step_flops(b, t, args.grid**2, decoder.grid_dim, args.dim, args.dim, args.dim, args.vocab)
    extra = {"peak MB": mem.peak_mb, "GFLOP": flops / 1e9, "of peak": flops / sec / args.peak}
    if getattr(args, "spec_peak", None):  # a datasheet peak (--spec-peak-tflops)
        extra["of spec"] = flops / sec / args.spec_peak
    ours = row(label, sec, **extra)
    return [ours, row(f"reference, paired with {label}", sec_ref, **{"speed-up": ratio})]


def bench_train_step(name: str, args, device: torch.device) -> tuple[torch.nn.Module, list[dict]]:
    """The decoder's training-step rows (eager, then compiled with ``--compile``); returns the decoder
    (trained for a few steps) for the decoding rows."""
    decoder, optimizer = build_decoder(name, args)
    decoder = decoder.to(device)
    problem = random_problem(args, device)
    if name == "soft":
        check_reference(decoder, ReferenceSoftLSTM(decoder), problem)
    step = TrainStep(decoder, optimizer, problem, args.bf16)
    rows = train_rows(name, "ours", decoder, step, args, device)
    if args.compile:  # the same decoder with its step compiled (model.compile=true), after the eager runs
        decoder.compile_step()
        rows += train_rows(name, "ours+compile", decoder, step, args, device)
    return decoder, rows
