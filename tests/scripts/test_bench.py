"""The benchmark's references compute the same thing as the fast paths, and the script runs."""

import json
import subprocess
import sys

import torch

from captioning.decoding import beam_search
from experiments.benchmarks.reference import ReferenceSoftLSTM, per_image_beam_search

from support import REPO
from support.helpers import build_net, random_batch

V = 12


def test_reference_lstm_is_the_same_function():
    net = build_net("soft", V, seed=3).eval()
    features, tokens = random_batch(net, batch=3, steps=6, vocab_size=V)
    reference = ReferenceSoftLSTM(net.decoder)
    with torch.no_grad():
        ours, ref = net.decoder(features, tokens), reference(features, tokens)
    torch.testing.assert_close(ref.logits, ours.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ref.alphas, ours.alphas, atol=1e-6, rtol=1e-5)


def test_per_image_reference_beam_search_gives_identical_captions():
    net = build_net("soft", V, seed=4).eval()
    features, _ = random_batch(net, batch=4, vocab_size=V, seed=2)
    batched = beam_search(net.decoder, features, num_beams=3, max_new_tokens=7)
    for i, single in enumerate(per_image_beam_search(ReferenceSoftLSTM(net.decoder), features, 3, 7)):
        n = single.tokens.shape[1]
        assert torch.equal(batched.tokens[i, :n], single.tokens[0])
        torch.testing.assert_close(batched.log_prob[i], single.log_prob[0], atol=1e-5, rtol=0)


def test_bench_script_quick_run_writes_its_table(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(REPO / "scripts" / "bench.py"), "--quick", "--decoders", "soft,hard_gumbel,transformer",
           "--json", str(out)]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    whats = {(r["decoder"], r["what"]) for r in rows}
    for decoder in ("soft", "hard_gumbel", "transformer"):
        assert (decoder, "train step (ours)") in whats and (decoder, "decode beam 5") in whats
    reference = next(r for r in rows if r["what"] == "decode beam 5 (per-image reference)")
    assert reference["identical"] is True
    assert all(r["seconds"] > 0 for r in rows)
    assert {"cli: captioning --help", "cli: captioning caption --help"} <= {r["what"] for r in rows}
    assert any(r["what"].startswith("overlay, 9 words") for r in rows)
    assert "| decoder | what |" in result.stdout


def test_bench_bf16_path_runs_and_pairs_the_reference(tmp_path):
    """--bf16 (the GPU setting) through autocast on CPU: the deferred weight gradient, the fused
    optimizer and decoding all run in bf16, and the soft step is still timed against its reference."""
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(REPO / "scripts" / "bench.py"), "--quick", "--bf16", "--decoders", "soft",
           "--repeats", "3", "--json", str(out)]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = {r["what"]: r for r in json.loads(out.read_text())["rows"]}
    assert json.loads(out.read_text())["args"]["bf16"] is True
    paired = rows["train step (reference, paired with ours)"]
    assert paired["speed-up"] > 0 and rows["train step (ours)"]["tokens/s"] > 0
    assert rows["decode beam 5 (per-image reference)"]["identical"] is True
