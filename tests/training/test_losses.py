"""Label-smoothed cross entropy: against a hand computation and against torch's cross_entropy; the distillation
loss against its formula."""

import math

import pytest
import torch
import torch.nn.functional as F

from tformer.training.losses import distillation_loss, label_smoothed_nll, nll_sum, token_losses

PAD = 0


def test_hand_computation_on_three_tokens():
    """V = 3, logits (0, 0, ln 2) -> p = (1/4, 1/4, 1/2); target 2, eps 0.3:
    q = (0.1, 0.1, 0.8), loss = -(0.1 ln 1/4 + 0.1 ln 1/4 + 0.8 ln 1/2) = 0.2 ln 4 + 0.8 ln 2 = 1.2 ln 2."""
    logits = torch.tensor([[[0.0, 0.0, math.log(2.0)]]])
    targets = torch.tensor([[2]])
    loss, n = label_smoothed_nll(logits, targets, smoothing=0.3, ignore_index=-100)
    assert loss.item() == pytest.approx(1.2 * math.log(2.0), rel=1e-6)
    assert n.item() == 1
    nll, _ = nll_sum(logits, targets, ignore_index=-100)
    assert nll.item() == pytest.approx(math.log(2.0), rel=1e-6)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.5])
def test_matches_torch_cross_entropy(smoothing):
    torch.manual_seed(0)
    logits = torch.randn(3, 7, 11)
    targets = torch.randint(1, 11, (3, 7))
    targets[0, 5:] = PAD
    targets[2, 3:] = PAD
    loss, n = label_smoothed_nll(logits, targets, smoothing=smoothing, ignore_index=PAD)
    expected = F.cross_entropy(logits.view(-1, 11), targets.view(-1), label_smoothing=smoothing,
                               ignore_index=PAD, reduction="sum")
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-5)
    assert n.item() == 21 - 2 - 4


def test_gradients_match_torch():
    torch.manual_seed(1)
    logits = torch.randn(2, 5, 9, requires_grad=True)
    targets = torch.randint(0, 9, (2, 5))
    targets[1, 2:] = -100
    label_smoothed_nll(logits, targets, smoothing=0.1, ignore_index=-100)[0].backward()
    ours = logits.grad.clone()
    logits.grad = None
    F.cross_entropy(logits.transpose(1, 2), targets, label_smoothing=0.1, reduction="sum").backward()
    torch.testing.assert_close(ours, logits.grad, rtol=1e-5, atol=1e-6)
    assert ours[1, 2:].abs().max() == 0  # ignored positions get no gradient


def test_sums_add_up_for_gradient_accumulation():
    """Two half-batches' sums and counts give the full batch's mean."""
    torch.manual_seed(2)
    logits, targets = torch.randn(4, 6, 13), torch.randint(0, 13, (4, 6))
    targets[1, 4:] = PAD
    full, n_full = label_smoothed_nll(logits, targets, smoothing=0.1, ignore_index=PAD)
    a, n_a = label_smoothed_nll(logits[:2], targets[:2], smoothing=0.1, ignore_index=PAD)
    b, n_b = label_smoothed_nll(logits[2:], targets[2:], smoothing=0.1, ignore_index=PAD)
    assert n_a + n_b == n_full
    torch.testing.assert_close((a + b) / (n_a + n_b), full / n_full)


def test_one_pass_gives_both_and_nll_is_perplexity_ready():
    torch.manual_seed(3)
    logits, targets = torch.randn(2, 4, 10), torch.randint(1, 10, (2, 4))
    out = token_losses(logits, targets, smoothing=0.1, ignore_index=PAD)
    plain = F.cross_entropy(logits.view(-1, 10), targets.view(-1), reduction="sum")
    torch.testing.assert_close(out.nll, plain)
    uniform = -F.log_softmax(logits, dim=-1).mean(dim=-1).sum()  # cross entropy to the uniform part
    torch.testing.assert_close(out.loss, 0.9 * out.nll + 0.1 * uniform)
    assert out.n_tokens.dtype == torch.int64 and out.n_tokens.item() == 8


def test_half_precision_logits_are_upcast():
    torch.manual_seed(4)
    logits, targets = torch.randn(2, 3, 8), torch.randint(0, 8, (2, 3))
    low, _ = label_smoothed_nll(logits.bfloat16(), targets, smoothing=0.1, ignore_index=-1)
    high, _ = label_smoothed_nll(logits.bfloat16().float(), targets, smoothing=0.1, ignore_index=-1)
    assert low.dtype == torch.float32 and torch.equal(low, high)


def test_bad_smoothing():
    with pytest.raises(ValueError, match="smoothing=1.0"):
        label_smoothed_nll(torch.zeros(1, 1, 3), torch.zeros(1, 1, dtype=torch.long), smoothing=1.0,
                           ignore_index=-100)


def test_distillation_loss_is_the_formula():
    """w * tau^2 * KL(softmax(z_t / tau) || softmax(z_s / tau)) + (1 - w) * cross entropy (label-smoothed or
    not), over the counted tokens only."""
    torch.manual_seed(0)
    student, teacher = torch.randn(2, 5, 7), torch.randn(2, 5, 7)
    targets = torch.randint(1, 7, (2, 5))
    targets[1, 3:] = PAD
    counted = targets != PAD
    for weight, tau, eps in [(1.0, 1.0, 0.0), (0.5, 2.0, 0.0), (0.0, 1.0, 0.0), (0.3, 1.5, 0.1)]:
        kl = F.kl_div(F.log_softmax(student / tau, -1), F.log_softmax(teacher / tau, -1), log_target=True,
                      reduction="none").sum(-1)  # (B, T)
        ce = F.cross_entropy(student.transpose(1, 2), targets, reduction="none", label_smoothing=eps)  # (B, T)
        want = (weight * tau**2 * kl + (1 - weight) * ce)[counted].sum()
        got = distillation_loss(student, teacher, targets, weight=weight, temperature=tau, ignore_index=PAD,
                                smoothing=eps)
        assert got.item() == pytest.approx(want.item(), rel=1e-5)


def test_distillation_loss_is_zero_at_the_teacher_and_pulls_towards_it():
    torch.manual_seed(0)
    teacher = torch.randn(1, 4, 9)
    targets = torch.randint(1, 9, (1, 4))
    at_teacher = distillation_loss(teacher.clone(), teacher, targets, weight=1.0, temperature=1.0, ignore_index=PAD)
    assert at_teacher.item() == pytest.approx(0.0, abs=1e-6)
    student = torch.zeros(1, 4, 9, requires_grad=True)
    distillation_loss(student, teacher, targets, weight=1.0, temperature=1.0, ignore_index=PAD).backward()
    # d KL / d z_s = softmax(z_s) - softmax(z_t): the step -grad moves the student's probabilities to the teacher's
    assert torch.allclose(student.grad, torch.softmax(student.detach(), -1) - torch.softmax(teacher, -1), atol=1e-6)
