"""Self-critical rows of the benchmark: the CIDEr-D reward against pycocoevalcap's scorer on the same
captions (which recomputes document frequencies at every call), and an SCST step against a
cross-entropy step at the same batch of images (K samples each)."""

from __future__ import annotations

import random
import time

import torch

from captioning.data.vocab import SPECIALS, Vocab
from captioning.metrics.cider import CiderD
from experiments.benchmarks.timing import median, timed

WORDS = [f"w{i}" for i in range(400)]


def _captions(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) for _ in range(n)]


def bench_reward(images: int = 500, samples: int = 5) -> list[dict]:
    from pycocoevalcap.cider.cider import Cider

    rng = random.Random(0)
    refs = [_captions(rng, 5) for _ in range(images)]
    hyps = _captions(rng, images * samples)
    index = [i // samples for i in range(images * samples)]
    reward = CiderD(refs)
    ours = median([_seconds(lambda: reward.scores(hyps, index)) for _ in range(3)])
    gts = {j: refs[i] for j, i in enumerate(index)}
    res = {j: [h] for j, h in enumerate(hyps)}
    theirs = median([_seconds(lambda: Cider().compute_score(gts, res)) for _ in range(3)])
    n = len(hyps)
    return [
        {
            "decoder": "-",
            "what": f"CIDEr-D reward, {n} captions (ours, df once)",
            "seconds": ours,
            "images/s": n / ours,
        },
        {
            "decoder": "-",
            "what": f"CIDEr-D reward, {n} captions (pycocoevalcap)",
            "seconds": theirs,
            "images/s": n / theirs,
            "speed-up": theirs / ours,
        },  # fmt: skip
    ]


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_scst_step(decoder, optimizer, args, device: torch.device, samples: int = 5) -> list[dict]:
    """One self-critical step (sample K per image, reward, teacher-forced policy gradient) against one
    cross-entropy step over the same images with K reference captions each (the same B·K sequences)."""
    from captioning.decoding import generate
    from captioning.losses import caption_loss
    from captioning.models.attention.estimators import leave_one_out_baseline
    from captioning.models.decoders.base import shift_inputs

    b, t = max(args.batch // samples, 1), args.length
    g = torch.Generator().manual_seed(0)
    features = torch.randn(b, args.grid**2, args.feature_dim, generator=g).to(device)  # (B, L, D)
    vocab = Vocab([*SPECIALS, *(f"w{i}" for i in range(args.vocab - len(SPECIALS)))])
    refs = [
        [" ".join(f"w{j}" for j in torch.randint(0, 50, (t,), generator=g).tolist()) for _ in range(5)]
        for _ in range(b)
    ]
    reward = CiderD(refs)
    opt = optimizer([p for p in decoder.parameters() if p.requires_grad])
    tokens = torch.randint(4, args.vocab, (b * samples, t + 1), generator=g).to(device)
    tokens[:, 0] = 1

    def xe_step():
        inputs, targets = shift_inputs(tokens)
        caption_loss(
            decoder(features.repeat_interleave(samples, 0), inputs), targets, decoder
        ).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def scst_step():
        sampled = generate(
            decoder, features, do_sample=True, num_return_sequences=samples, max_new_tokens=t
        ).tokens
        caps = [" ".join(vocab.decode(r.tolist())) for r in sampled]
        r = torch.tensor(reward.scores(caps, [i // samples for i in range(len(caps))]), dtype=torch.float32)
        adv = (r - leave_one_out_baseline(r, samples)).to(device)
        inputs = torch.cat([torch.full_like(sampled[:, :1], 1), sampled[:, :-1]], 1)
        logp = torch.log_softmax(decoder(features.repeat_interleave(samples, 0), inputs).logits, -1)
        logp = logp.gather(-1, sampled.unsqueeze(-1)).squeeze(-1)
        mask = (sampled != 0).float()
        (-(adv.unsqueeze(1) * logp * mask).sum() / mask.sum()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    decoder.eval()
    xe, sc = timed(xe_step, args.repeats, device), timed(scst_step, args.repeats, device)
    what = f"{b} images x {samples}"
    return [
        {"decoder": "soft", "what": f"train step XE ({what} captions)", "seconds": xe},
        {"decoder": "soft", "what": f"train step SCST ({what} samples)", "seconds": sc},
    ]
