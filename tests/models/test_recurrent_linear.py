"""The deferred weight gradient (one GEMM after the loop) equals autograd's step-by-step gradient."""

import torch
import torch.nn.functional as F

from captioning.losses import caption_loss
from captioning.models.recurrent_linear import recurrent_linear
from experiments.benchmarks.reference import ReferenceSoftLSTM

from support.helpers import build_net, random_batch


def unroll(weight: torch.Tensor, x0: torch.Tensor, inputs: torch.Tensor, deferred: bool) -> torch.Tensor:
    """A tanh RNN h_t = tanh(W [x_t; h_{t-1}]) whose loss reads every step."""
    linear = recurrent_linear(weight) if deferred else (lambda x: F.linear(x, weight))
    h, loss = x0, 0.0
    for x in inputs.unbind(0):
        h = torch.tanh(linear(torch.cat([x, h], -1)))  # (B, H)
        loss = loss + (h * torch.arange(h.shape[1], dtype=h.dtype)).sum()
    return loss


def test_weight_and_input_gradients_equal_autograd():
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(5, 3 + 5, generator=g, dtype=torch.float64, requires_grad=True)  # (H, X + H)
    inputs = torch.randn(7, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)  # (T, B, X)
    x0 = torch.randn(4, 5, generator=g, dtype=torch.float64, requires_grad=True)
    grads = {}
    for deferred in (False, True):
        loss = unroll(weight, x0, inputs, deferred)
        grads[deferred] = torch.autograd.grad(loss, (weight, inputs, x0))
    for ours, autograd in zip(grads[True], grads[False]):
        torch.testing.assert_close(ours, autograd, rtol=1e-12, atol=1e-12)


def test_two_backward_passes_accumulate_twice():
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(4, 2 + 4, generator=g, dtype=torch.float64, requires_grad=True)
    inputs, x0 = (
        torch.randn(5, 3, 2, generator=g, dtype=torch.float64),
        torch.zeros(3, 4, dtype=torch.float64),
    )
    (expected,) = torch.autograd.grad(unroll(weight, x0, inputs, deferred=False), weight)
    loss = unroll(weight, x0, inputs, deferred=True)
    loss.backward(retain_graph=True)  # the tape is emptied after each pass, so nothing is counted twice
    loss.backward()
    torch.testing.assert_close(weight.grad, 2 * expected, rtol=1e-12, atol=1e-12)


def test_without_autograd_it_is_plain_linear():
    weight, x = torch.randn(3, 2, requires_grad=True), torch.randn(4, 2)
    with torch.no_grad():
        y = recurrent_linear(weight)(x)
    assert not y.requires_grad and y.grad_fn is None
    torch.testing.assert_close(y, x @ weight.detach().t())


def test_lstm_decoder_gradients_equal_the_straightforward_reference():
    """Every parameter gradient of the fast LSTM (precomputed keys, deferred recurrent weight gradient,
    batched output layer) equals the reference that autograd differentiates step by step."""
    net = build_net("soft", 12, seed=5).train()
    net.decoder.dropout.p = 0.0  # both paths must see the same function
    net.decoder.alpha_c = 1.0  # eq. 14 on (off by default): its gradient through α is compared too
    features, tokens = random_batch(net, batch=3, steps=6, vocab_size=12)
    targets = torch.roll(tokens, -1, dims=1)
    grads = []
    for decoder in (net.decoder, ReferenceSoftLSTM(net.decoder)):
        net.zero_grad(set_to_none=True)
        caption_loss(decoder(features, tokens), targets, net.decoder).loss.backward()
        grads.append({n: p.grad.clone() for n, p in net.decoder.named_parameters() if p.grad is not None})
    ours, reference = grads
    assert ours.keys() == reference.keys() and "gates_rec.weight" in ours
    for name in ours:
        torch.testing.assert_close(ours[name], reference[name], rtol=1e-4, atol=1e-6, msg=name)


def test_under_bf16_autocast_gradients_match_autograd():
    g = torch.Generator().manual_seed(2)
    weight = torch.randn(6, 3 + 6, generator=g, requires_grad=True)
    inputs, x0 = torch.randn(4, 2, 3, generator=g), torch.zeros(2, 6)
    grads = []
    for deferred in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = unroll(weight, x0, inputs, deferred)
        grads.append(torch.autograd.grad(loss, weight)[0])
    assert grads[1].dtype == torch.float32
    torch.testing.assert_close(grads[1], grads[0], rtol=2e-2, atol=2e-2)  # both in bf16 arithmetic
