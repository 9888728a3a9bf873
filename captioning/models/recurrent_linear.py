"""A linear map applied at every step of an unrolled recurrence, its weight gradient one GEMM after the loop.

Autograd differentiates y_t = x_t Wᵀ step by step: at every step t backward computes the input gradient
g_t W (needed at once: it flows on to step t-1) *and* the weight gradient g_tᵀ x_t, a rank-B update
(B = 32 rows) that runs far below the matmul peak, then adds it into a W-sized accumulator. But
∂L/∂W = Σ_t g_tᵀ x_t = Gᵀ X with G, X the (T·B, ·) stacks of every step, one well-shaped GEMM. So each
step's backward here computes only g_t W and records (x_t, g_t); the weight's single shared node runs
after every step's backward (autograd runs a node only once all its consumers are done) and computes
Gᵀ X. For the LSTM's recurrent gates at the paper's sizes (scripts/bench.py) the profile of a ~1 s
training step went from 75 ms of rank-32 updates + 28 ms of accumulation to one 46 ms GEMM. The x_t
recorded are the tensors autograd would have saved anyway.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import Function


class _Tape:
    """(x_t, g_t) of every step, filled by the steps' backward in reverse time order."""

    def __init__(self) -> None:
        self.inputs: list[Tensor] = []
        self.grads: list[Tensor] = []


class _SharedWeight(Function):
    """W -> W (an alias every step reads); its backward is Gᵀ X over all recorded steps."""

    @staticmethod
    def forward(ctx, weight: Tensor, tape: _Tape) -> Tensor:
        ctx.tape, ctx.dtype = tape, weight.dtype
        ctx.set_materialize_grads(False)  # the steps return no weight gradient: do not allocate zeros
        return weight.view_as(weight)

    @staticmethod
    def backward(ctx, _unused: Tensor | None) -> tuple[Tensor | None, None]:
        tape = ctx.tape
        if not tape.grads:
            return None, None
        grads = torch.cat(tape.grads)  # (T·B, out)
        inputs = torch.cat(tape.inputs).to(grads.dtype)  # (T·B, in), rows matching ``grads``
        tape.inputs.clear(), tape.grads.clear()
        return (grads.t() @ inputs).to(ctx.dtype), None  # (out, in) = Σ_t g_tᵀ x_t


class _Step(Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, tape: _Tape) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.tape = tape
        return F.linear(x, weight)  # (B, out)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, None, None]:
        x, weight = ctx.saved_tensors
        ctx.tape.inputs.append(x)
        ctx.tape.grads.append(grad)
        # Under autocast the output, hence ``grad``, is in the autocast dtype (bf16): so is the math here.
        grad_x = (grad @ weight.to(grad.dtype)).to(x.dtype) if ctx.needs_input_grad[0] else None  # (B, in)
        return grad_x, None, None


def recurrent_linear(weight: Tensor) -> Callable[[Tensor], Tensor]:
    """``f`` with ``f(x_t) = x_t Wᵀ`` for one unrolled sequence (create one per forward pass).

    Without autograd (decoding, or a weight that needs no gradient) it is plain ``F.linear``.
    """
    if not (torch.is_grad_enabled() and weight.requires_grad):
        return lambda x: F.linear(x, weight)
    tape = _Tape()
    shared = _SharedWeight.apply(weight, tape)  # (out, in)
    return lambda x: _Step.apply(x, shared, tape)
