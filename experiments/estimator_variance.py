"""Variance of the location-policy gradient per REINFORCE estimator, on a trained hard-attention model.

    python scripts/estimator_variance.py CKPT [CKPT ...] --data-root ../shared/data/flickr8k [--images 32]
        [--repeats 30] [--json out.json]

For each checkpoint (an LSTM with ``ReinforceHardAttention``), a fixed batch of dev images with one
reference caption each is decoded under teacher forcing ``--repeats`` times per estimator; each time the
REINFORCE term alone (entropy bonus off, dropout off, the moving-average baseline frozen at its
equilibrium on the batch: the mean sampled reward, per caption or per token) is differentiated with respect to the attention layer's parameters. Reported per
estimator: the total variance of that gradient (the sum over parameters of the per-parameter variance
across repeats) and the norm of its mean. All estimators are unbiased for the same gradient (derivations
in ``captioning/models/attention/reinforce.py`` and ``estimators.py``), so lower variance is strictly better.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from captioning.checkpoints.load import load_checkpoint
from captioning.data.images import image_to_tensor, load_rgb
from captioning.data.readers import read_flickr8k
from captioning.data.tokenize import tokenize
from captioning.data.vocab import Vocab
from captioning.models.attention.reinforce import ReinforceHardAttention

ESTIMATORS = {  # name -> (credit, baseline, K samples per caption)
    "caption reward, no baseline": ("caption", "none", 1),
    "caption reward, moving average (paper)": ("caption", "moving_average", 1),
    "caption reward, leave-one-out K=4": ("caption", "leave_one_out", 4),
    "remaining words, no baseline": ("remaining", "none", 1),
    "remaining words, moving average": ("remaining", "moving_average", 1),
    "remaining words, leave-one-out K=4": ("remaining", "leave_one_out", 4),
    "exact word t + remaining, leave-one-out K=2": ("exact_step", "leave_one_out", 2),
    "exact word t + remaining, leave-one-out K=4": ("exact_step", "leave_one_out", 4),
}


def batch(model, root: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(features (n, L, D), token ids (n, T) with <start> ... <end>) of the first n dev images."""
    records = read_flickr8k(root, "dev")[:n]
    images = torch.stack([image_to_tensor(load_rgb(r.path), model.image_size) for r in records])
    with torch.no_grad():
        features = model.net.encode(images)  # (n, L, D)
    ids = [model.vocab.encode(tokenize(r.captions[0])) for r in records]  # <start> words <end>
    width = max(map(len, ids))
    tokens = torch.full((n, width), Vocab.pad_id, dtype=torch.long)
    for i, row in enumerate(ids):
        tokens[i, : len(row)] = torch.as_tensor(row)
    return features, tokens


def teacher_forced(decoder, features, tokens):
    """(decoder output, per-token log p(y_t | ...) (n·K, T-1), target mask, targets) of one teacher-forced
    pass; with K attention samples per caption the K copies are adjacent rows."""
    output = decoder(features, tokens[:, :-1])  # (n·K, T-1, V)
    targets = tokens[:, 1:].repeat_interleave(output.logits.shape[0] // tokens.shape[0], dim=0)
    mask = (targets != Vocab.pad_id).float()
    token_logp = F.log_softmax(output.logits.float(), -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return output, token_logp, mask, targets


def gradient(decoder, attention, features, tokens, params) -> torch.Tensor:
    output, token_logp, mask, targets = teacher_forced(decoder, features, tokens)
    loss, _ = decoder.auxiliary_loss(output, token_logp.detach(), mask, targets)
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return torch.cat([(g if g is not None else torch.zeros_like(p)).flatten() for g, p in zip(grads, params)])


@torch.no_grad()
def mean_reward(decoder, features, tokens, per_token: bool, passes: int = 5) -> torch.Tensor:
    """What a moving average converges to: the mean sampled reward log p(y | s, a), per caption or per
    target token (the unit of ``credit="remaining"``'s per-step baseline)."""
    values = []
    for _ in range(passes):
        _, logp, mask, _ = teacher_forced(decoder, features, tokens)
        logp = logp * mask
        values.append(logp.sum() / mask.sum() if per_token else logp.sum(1).mean())
    return torch.stack(values).mean()


def measure(path: str, root: str, n: int, repeats: int) -> dict:
    model = load_checkpoint(path)
    decoder, attention = model.net.decoder, model.net.decoder.attention
    if not isinstance(attention, ReinforceHardAttention):
        raise SystemExit(
            f"{path}: the attention layer is {type(attention).__name__}, not ReinforceHardAttention"
        )
    features, tokens = batch(model, root, n)
    for module in decoder.modules():  # dropout off: only the sampled locations vary between repeats
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    decoder.train()
    attention.entropy_weight, attention.semi_sampling_p, attention.semi_sampling_final = 0.0, 0.0, None
    saved = {k: v.clone() for k, v in attention.state_dict().items() if k in ("baseline", "sampled_batches")}
    params = [p for p in attention.parameters() if p.requires_grad]
    out = {}
    for name, (credit, baseline, k) in ESTIMATORS.items():
        attention.credit, attention.baseline_kind, attention.num_samples = credit, baseline, k
        torch.manual_seed(0)
        state = dict(saved)
        if baseline == "moving_average":  # at its equilibrium on this batch, in this estimator's own unit
            state["baseline"] = mean_reward(decoder, features, tokens, per_token=credit == "remaining")
            state["sampled_batches"] = torch.ones_like(saved["sampled_batches"])
        grads = []
        for _ in range(repeats):
            attention.load_state_dict({**attention.state_dict(), **state})  # the baseline never drifts
            attention.sample_this_batch = True
            grads.append(gradient(decoder, attention, features, tokens, params))
        g = torch.stack(grads)  # (repeats, P)
        out[name] = {"variance": float(g.var(0).sum()), "mean_norm": float(g.mean(0).norm())}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--data-root", required=True, help="the Flickr8k folder (its dev split is used)")
    p.add_argument("--images", type=int, default=32)
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    report = {}
    for path in args.checkpoints:
        report[path] = measure(path, args.data_root, args.images, args.repeats)
        print(path)
        for name, row in report[path].items():
            print(f"  {name:40s} variance {row['variance']:.4g}  |mean| {row['mean_norm']:.4g}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
