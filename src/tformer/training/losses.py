"""Token-level losses: label-smoothed cross entropy for training, plain negative log-likelihood for
perplexity.

Label smoothing (Szegedy et al. 2016, https://arxiv.org/abs/1512.00567, sec. 7; the paper uses
eps_ls = 0.1, Vaswani et al. 2017 sec. 5.4) trains against the target distribution

    q = (1 - eps) * onehot(y) + eps / V

so the loss of one token is  -sum_v q_v log p_v = (1 - eps) * (-log p_y) + eps * mean_v(-log p_v).
This is the convention of `torch.nn.functional.cross_entropy(label_smoothing=eps)`. It hurts perplexity
(the model learns to be unsure) but improves accuracy and BLEU.

Knowledge distillation (Hinton et al. 2015, https://arxiv.org/abs/1503.02531) trains a student against a
teacher's next-token distribution p_t as well as the text: with temperature tau and weight w, one token's loss is

    (1 - w) * (-log q_y) + w * tau^2 * KL(softmax(z_t / tau) || softmax(z_s / tau))

(z the logits, q the student's distribution; tau^2 keeps the gradient's scale as tau changes, as in the paper).
A draft for speculative decoding is trained that way: what it must learn is the target's choice, not the text's.

Losses are *summed* over the tokens whose target is not `ignore_index`, and returned with the token count,
so that gradient accumulation can divide by the token count of the whole accumulated batch.

B batch, T length, V vocabulary.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from tformer.errors import UserError


class TokenLosses(NamedTuple):
    loss: Tensor  # () label-smoothed cross entropy, summed over counted tokens
    nll: Tensor  # () plain negative log-likelihood, summed over counted tokens
    n_tokens: Tensor  # () int64, tokens whose target is not ignore_index


def token_losses(logits: Tensor, targets: Tensor, *, smoothing: float, ignore_index: int) -> TokenLosses:
    """Both sums from one log-softmax: logits (B, T, V) (any leading shape), targets (B, T).
    The log-softmax runs in float32 even for half-precision logits."""
    if not 0.0 <= smoothing < 1.0:
        raise UserError(f"smoothing={smoothing!r} must be in [0, 1)")
    lprobs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    counted = targets != ignore_index  # (B, T)
    safe = targets.masked_fill(~counted, 0)  # any valid index; these positions are zeroed below
    nll = -lprobs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)  # (B, T)
    uniform = -lprobs.mean(dim=-1)  # (B, T) cross entropy against the uniform eps / V part
    smoothed = (1.0 - smoothing) * nll + smoothing * uniform
    zero = nll.new_zeros(())
    return TokenLosses(
        loss=smoothed.where(counted, zero).sum(),
        nll=nll.where(counted, zero).sum(),
        n_tokens=counted.sum(),
    )


def distillation_loss(logits: Tensor, teacher_logits: Tensor, targets: Tensor, *, weight: float,
                      temperature: float, ignore_index: int, smoothing: float = 0.0) -> Tensor:
    """The distillation loss above, summed over the tokens whose target is not `ignore_index`: the student's
    logits (B, T, V), the teacher's (B, T, V) for the same inputs, targets (B, T). In float32. `smoothing`:
    the text's term is label-smoothed cross entropy (`token_losses`)."""
    counted = targets != ignore_index  # (B, T)
    zero = logits.new_zeros((), dtype=torch.float32)
    student = F.log_softmax(logits.float() / temperature, dim=-1)  # (B, T, V)
    teacher = F.log_softmax(teacher_logits.float() / temperature, dim=-1)  # (B, T, V)
    kl = (teacher.exp() * (teacher - student)).sum(dim=-1)  # (B, T)
    loss = weight * temperature**2 * kl.where(counted, zero).sum()
    if weight < 1:
        loss = loss + (1 - weight) * token_losses(logits, targets, smoothing=smoothing, ignore_index=ignore_index).loss
    return loss


def label_smoothed_nll(logits: Tensor, targets: Tensor, *, smoothing: float,
                       ignore_index: int) -> tuple[Tensor, Tensor]:
    """(summed label-smoothed cross entropy, number of counted tokens); smoothing 0 is plain NLL."""
    out = token_losses(logits, targets, smoothing=smoothing, ignore_index=ignore_index)
    return out.loss, out.n_tokens


def nll_sum(logits: Tensor, targets: Tensor, *, ignore_index: int) -> tuple[Tensor, Tensor]:
    """(summed negative log-likelihood, number of counted tokens): perplexity is exp(sum / count)."""
    out = token_losses(logits, targets, smoothing=0.0, ignore_index=ignore_index)
    return out.nll, out.n_tokens


__all__ = ["TokenLosses", "distillation_loss", "label_smoothed_nll", "nll_sum", "token_losses"]
