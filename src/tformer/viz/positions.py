"""Position schemes as pictures, computed with the library's own modules (`tformer.nn.positions`):

    sinusoidal  the (n, d) table PE (Vaswani et al. 2017, sec. 3.5) and the similarity PE PE^T (n, n): how
                alike two positions' codes are, which falls off with their distance
    RoPE        the score q.k of one fixed query and key vector rotated to positions i and j (Su et al. 2021):
                an (n, n) matrix that depends on j - i only, and its curve over the offset (the long-term
                decay of the RoFormer paper, sec. 3.4.3)
    ALiBi       the per-head score biases -m_h |i - j| for j <= i (Press et al. 2022), future keys blank

n positions, d width (of the table; of the one RoPE head), H heads.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tformer.errors import UserError
from tformer.nn.positions import ALiBi, Rotary, alibi_slopes, sinusoid_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def check_sizes(*, max_len: int, d_model: int, heads: int) -> None:
    """A ValueError naming a size the pictures cannot use."""
    if max_len < 2:
        raise UserError(f"--max-len {max_len} must be at least 2")
    if d_model < 2 or d_model % 2:
        raise UserError(f"--d-model {d_model} must be an even number >= 2 (RoPE rotates pairs of dimensions)")
    if heads < 1:
        raise UserError(f"--heads {heads} must be at least 1")


def sinusoid_similarity(n: int, d: int) -> tuple[Tensor, Tensor]:
    """The sinusoidal table (n, d) and PE PE^T (n, n)."""
    table = sinusoid_table(n, d)  # (n, d)
    return table, table @ table.T


def rope_scores(n: int, head_dim: int, *, theta: float = 10000.0) -> Tensor:
    """(n, n) scores q_i . k_j of the unit vector q = k = 1/sqrt(D) rotated by RoPE to positions i and j:
    1 at i = j, and a function of j - i only."""
    rotary = Rotary(max_len=n, head_dim=head_dim, theta=theta)
    x = torch.full((1, 1, n, head_dim), head_dim**-0.5)  # (B, H, n, D): the same vector at every position
    rotated = rotary(x, torch.arange(n)[None])  # (1, 1, n, D)
    return (rotated @ rotated.transpose(-2, -1))[0, 0]  # (n, n)


def alibi_biases(n: int, heads: int) -> Tensor:
    """(H, n, n) ALiBi biases -m_h |i - j| for keys j <= i, NaN for the future keys a causal model never sees."""
    idx = torch.arange(n)
    bias = ALiBi(n_heads=heads)(idx, idx)[0]  # (H, n, n)
    future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (n, n)
    return bias.masked_fill(future, math.nan)


def plot_sinusoidal(n: int, d: int) -> Figure:
    from tformer.viz.figures import heatmap, new_figure

    table, similarity = sinusoid_similarity(n, d)
    fig = new_figure(12, 5)
    left, right = fig.subplots(1, 2)
    image = heatmap(left, table.numpy(), cmap="RdBu_r", vmin=-1.0, vmax=1.0)
    left.set(title=f"sinusoidal table PE (n={n}, d={d})", xlabel="dimension", ylabel="position")
    fig.colorbar(image, ax=left, shrink=0.8)
    image = heatmap(right, similarity.numpy())
    right.set(title="similarity PE · PEᵀ", xlabel="position j", ylabel="position i")
    fig.colorbar(image, ax=right, shrink=0.8)
    for ax in (left, right):
        ax.tick_params(labelsize=8, length=3)
        ax.locator_params(nbins=8)
    return fig


def plot_rope(n: int, head_dim: int) -> Figure:
    from tformer.viz.figures import heatmap, new_figure

    scores = rope_scores(n, head_dim)
    fig = new_figure(12, 5)
    left, right = fig.subplots(1, 2)
    image = heatmap(left, scores.numpy(), cmap="RdBu_r", vmin=-1.0, vmax=1.0)
    left.set(title=f"RoPE score q_i · k_j (head width {head_dim})", xlabel="key position j",
             ylabel="query position i")
    left.tick_params(labelsize=8, length=3)
    left.locator_params(nbins=8)
    fig.colorbar(image, ax=left, shrink=0.8)
    right.plot(range(n), scores[0].numpy())
    right.axhline(0.0, color="gray", lw=0.8)
    right.set(title="the same score against the offset j - i", xlabel="relative offset j - i", ylabel="q · k")
    right.grid(alpha=0.3)
    return fig


def plot_alibi(n: int, heads: int) -> Figure:
    """One heatmap per head on a shared colour scale, and the biases of every head against the distance."""
    from tformer.viz.figures import heatmap, new_figure

    biases = alibi_biases(n, heads)
    slopes = alibi_slopes(heads).tolist()
    cols = math.ceil(math.sqrt(heads + 1))
    rows = math.ceil((heads + 1) / cols)
    fig = new_figure(3.0 * cols + 1.0, 3.0 * rows + 0.6)
    fig.suptitle(f"ALiBi score biases −m_h·|i − j| (causal, n={n}); blank: future keys")
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    low = float(biases.nan_to_num(0.0).min())
    for h, ax in enumerate(axes[:heads]):
        image = heatmap(ax, biases[h].numpy(), vmin=low, vmax=0.0)
        ax.set_title(f"head {h}: m = {slopes[h]:.4g}", fontsize=9)
        ax.tick_params(labelsize=7, length=3)
        ax.locator_params(nbins=4)
    fig.colorbar(image, ax=axes[:heads], shrink=0.8, label="bias added to the score")
    curve = axes[heads]
    for h in range(heads):
        curve.plot(range(n), biases[h, -1].flip(0).numpy(), linewidth=1, label=f"head {h}")
    curve.set_title("bias against the distance i − j", fontsize=9)
    curve.tick_params(labelsize=7)
    curve.grid(alpha=0.3)
    curve.legend(fontsize=6, ncols=2)
    for ax in axes[heads + 1:]:
        ax.set_axis_off()
    return fig
