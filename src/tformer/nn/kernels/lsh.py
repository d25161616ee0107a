"""LSH attention (Reformer): each query attends only to the keys that fall in its hash bucket, so the cost
per hashing round is O(S log S) for a sort plus O(S * 2C * D) for attention, and no S x S matrix is built.

Kitaev, Kaiser and Levskaya, "Reformer: The Efficient Transformer", 2020, https://arxiv.org/abs/2001.04451

Notation: B batch, H heads, T queries (the last T of the S positions), S keys, D head width, N buckets,
R hashing rounds, C chunk length, K = ceil(S / C) chunks.

The algorithm, next to the paper (Section 2, "Locality-sensitive hashing attention"):
1. Shared QK ("Hashing attention"). The keys are the queries normalised to unit length, so a query
   and its own key sit in the same place; the attention layer passes them as `k`.
2. Hashing ("Locality sensitive hashing", Figure 1). Angular LSH by a random rotation R (D, N/2):
   h(x) = argmax([xR ; -xR]). Vectors at a small angle land in the same bucket with high probability. We
   hash the keys; a query's bucket is its key's bucket (the hash ignores length). The rotations come from
   a seeded CPU generator on every call, so the kernel has no state and cached decoding sees the same
   buckets as training.
3. Sort and chunk ("LSH attention", Figure 2). Sort positions by (bucket, position), cut them into
   chunks of C and let each chunk attend to itself and to the chunk before it. Within those 2C keys a
   pair counts only if both are in the same bucket, the key is not padding, and, if causal, the key is not
   later than the query. One change from the paper: each bucket is cut into chunks on its own (it starts
   a new chunk), so which chunk a position lands in depends only on the earlier positions of its bucket.
   Cutting the one sorted sequence moves chunk boundaries whenever later tokens hash into lower buckets,
   which would let a causal model see (through its chunk's keys) a trace of the future; with our layout
   causal LSH is exactly causal and cached decoding equals recomputation. Padding sorts after the real
   positions of its bucket, so a padded row (on either side) gives its real tokens the chunks, hence the
   outputs, that the row alone would.
4. No attending to oneself ("Causal masking for shared-QK attention"). With shared QK a query's own
   key always scores highest, so its self score gets a large finite penalty: it is used only when the
   query has no other key (the first position of a causal sequence).
5. Several rounds ("Multi-round LSH attention", Appendix A). Each round uses its own rotation and gives
   an output normalised over the keys it found, with their log-sum-exp; rounds are combined weighted by
   exp(lse_r - logsumexp_r(lse_r)), which is the softmax over the union of the keys found.

Decoding with a cache: the T queries are placed in a full-length (B, H, S, D) query tensor at their own
key slots (the rest are zeros and never read), sorted with their keys, and only the last T rows are kept.
So a cached step gives exactly what recomputing the whole prefix would give for those rows.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tformer.errors import UserError
from tformer.nn.kernels.base import Kernel, key_valid, merge_partials, repeat_kv, softmax_partial

SELF_PENALTY = 1e5  # subtracted from a query's score with its own key (the paper's value, Appendix A)


def random_rotations(d: int, *, buckets: int, rounds: int, seed: int) -> Tensor:
    """(D, R, N/2) standard normal, the same for a given seed on every device: drawn on the CPU."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(d, rounds, buckets // 2, generator=gen)


def hash_buckets(x: Tensor, *, buckets: int, rounds: int, seed: int) -> Tensor:
    """x (B, H, S, D) -> bucket ids (R, B, H, S) in [0, N): argmax over [xR ; -xR], or all 0 when N = 1."""
    b, h, s, d = x.shape
    if buckets == 1:
        return torch.zeros(rounds, b, h, s, dtype=torch.long, device=x.device)
    dtype = torch.promote_types(x.dtype, torch.float32)  # half precision would flip near-ties between calls
    rot = random_rotations(d, buckets=buckets, rounds=rounds, seed=seed).to(x.device, dtype)
    proj = torch.einsum("bhsd,drn->rbhsn", x.to(dtype), rot)  # (R, B, H, S, N/2)
    return torch.cat([proj, -proj], dim=-1).argmax(dim=-1)  # (R, B, H, S)


def gather_rows(x: Tensor, index: Tensor) -> Tensor:
    """x (B, H, S, ...) and index (B, H, S') -> (B, H, S', ...): rows of x picked along dim 2."""
    index = index.view(*index.shape, *([1] * (x.dim() - 3))).expand(*index.shape, *x.shape[3:])
    return x.gather(2, index)


def to_chunks(x: Tensor, *, chunk: int, fill: float | bool) -> Tensor:
    """(B, H, S, ...) -> (B, H, K, C, ...), padding the end with `fill` up to a multiple of C."""
    b, h, s = x.shape[:3]
    pad = -s % chunk
    if pad:
        x = torch.cat([x, x.new_full((b, h, pad, *x.shape[3:]), fill)], dim=2)
    return x.view(b, h, (s + pad) // chunk, chunk, *x.shape[3:])  # (B, H, K, C, ...)


def look_one_back(x: Tensor, *, fill: float | bool) -> Tensor:
    """(B, H, K, C, ...) -> (B, H, K, 2C, ...): each chunk preceded by the one before it. The first chunk's
    predecessor is `fill` (no wrap-around to the last chunk)."""
    first = torch.full_like(x[:, :, :1], fill)  # (B, H, 1, C, ...)
    prev = torch.cat([first, x[:, :, :-1]], dim=2)  # (B, H, K, C, ...)
    return torch.cat([prev, x], dim=3)  # (B, H, K, 2C, ...)


def bucket_layout(bucket: Tensor, valid: Tensor, *, buckets: int, chunk: int) -> tuple[Tensor, Tensor, int]:
    """Where each position goes in a layout where every bucket starts on a chunk boundary.

    bucket (B, H, S), valid (B, H, S) -> (order (B, H, S): positions sorted by (bucket, padding last,
    position); slot (B, H, S): the layout index of order's i-th position; L: the layout length, a multiple
    of C fixed by S, N and C). A bucket's positions fill whole chunks of its own, so a position's chunk
    depends only on the positions before it in its bucket; this keeps the causal form exactly causal
    (cutting one sorted sequence into chunks, as the paper does, moves a chunk's boundary whenever later
    tokens land in lower buckets). Padding goes after the real positions of its bucket, so that padding on
    either side (left padding comes first by position) never moves a real position's chunk."""
    b, h, s = bucket.shape
    _, order = torch.sort(2 * bucket + (~valid).long(), dim=-1, stable=True)  # (B, H, S)
    sorted_bucket = bucket.gather(-1, order)  # (B, H, S)
    counts = torch.zeros(b, h, buckets, dtype=torch.long, device=bucket.device)
    counts.scatter_add_(-1, bucket, torch.ones_like(bucket))  # (B, H, N)
    padded = (counts + chunk - 1) // chunk * chunk  # (B, H, N): whole chunks per bucket
    start = counts.cumsum(-1) - counts  # (B, H, N): first sorted index of each bucket
    padded_start = padded.cumsum(-1) - padded  # (B, H, N): its first layout index
    rank = torch.arange(s, device=bucket.device) - start.gather(-1, sorted_bucket)  # (B, H, S): within bucket
    slot = padded_start.gather(-1, sorted_bucket) + rank  # (B, H, S)
    length = -(-(s + buckets * (chunk - 1)) // chunk) * chunk  # an upper bound on sum(padded)
    return order, slot, length


def to_layout(x: Tensor, slot: Tensor, length: int, *, fill: float | bool) -> Tensor:
    """x (B, H, S, ...) in sorted order -> (B, H, L, ...) with row i at slot[i] and `fill` elsewhere."""
    out = x.new_full((*x.shape[:2], length, *x.shape[3:]), fill)
    index = slot.view(*slot.shape, *([1] * (x.dim() - 3))).expand_as(x)
    return out.scatter(2, index, x)


def attend_round(q: Tensor, k: Tensor, v: Tensor, bucket: Tensor, valid: Tensor, *, buckets: int, last: int,
                 chunk: int, causal: bool, scale: float, dropout: float) -> tuple[Tensor, Tensor]:
    """One hashing round. q, k, v (B, H, S, D), bucket (B, H, S), valid (B, H, S) -> (out (B, H, T, D),
    lse (B, H, T)) for the last T = `last` positions, each normalised over the keys it found this round."""
    order, slot, length = bucket_layout(bucket, valid, buckets=buckets, chunk=chunk)

    def layout(x: Tensor, fill: float | bool) -> Tensor:  # (B, H, S, ...) -> (B, H, K, C, ...)
        return to_chunks(to_layout(gather_rows(x, order), slot, length, fill=fill), chunk=chunk, fill=fill)

    positions = torch.arange(q.shape[2], device=q.device).expand_as(bucket)  # (B, H, S)
    qc = layout(q, 0.0)  # (B, H, K, C, D)
    kc, vc = look_one_back(layout(k, 0.0), fill=0.0), look_one_back(layout(v, 0.0), fill=0.0)  # (B, H, K, 2C, D)
    pos_q = layout(positions, -1)  # (B, H, K, C)
    pos_k = look_one_back(pos_q, fill=-1)[..., None, :]  # (B, H, K, 1, 2C)
    bucket_q = layout(bucket, -1)  # (B, H, K, C)
    bucket_k = look_one_back(bucket_q, fill=-1)[..., None, :]  # (B, H, K, 1, 2C)
    valid_k = look_one_back(layout(valid, False), fill=False)[..., None, :]

    pos_q, bucket_q = pos_q[..., None], bucket_q[..., None]  # (B, H, K, C, 1)
    allowed = (bucket_q == bucket_k) & valid_k  # (B, H, K, C, 2C)
    if causal:
        allowed = allowed & (pos_k <= pos_q)
    scores = (qc @ kc.transpose(-2, -1)) * scale  # (B, H, K, C, 2C)
    penalty = min(SELF_PENALTY, torch.finfo(scores.dtype).max / 4)  # finite even in float16
    scores = torch.where(pos_q == pos_k, scores - penalty, scores)  # own key: only when nothing else is allowed
    out, lse = softmax_partial(scores, allowed, vc, dropout=dropout)  # (B, H, K, C, D), (B, H, K, C)

    b, h, s, d = q.shape
    out = out.reshape(b, h, length, d)  # (B, H, L, D) in layout order
    lse = lse.reshape(b, h, length)  # (B, H, L)
    where = torch.empty_like(order).scatter_(-1, order, slot)  # (B, H, S): the layout slot of each position
    where = where[:, :, s - last:]  # (B, H, T): those of the last T positions
    return gather_rows(out, where), lse.gather(-1, where)  # (B, H, T, D), (B, H, T)


class LSHAttention(Kernel):
    """Reformer's LSH attention over shared QK: `buckets` hash buckets (1, or even), `rounds` hashing
    rounds, chunks of `chunk` sorted positions, rotations drawn from `seed`. Approximate: a query sees
    only the keys that share its bucket in some round and lie in its chunk or the one before."""

    shared_qk = True

    def __init__(self, *, buckets: int, rounds: int, chunk: int, seed: int) -> None:
        super().__init__()
        if buckets < 1 or (buckets > 1 and buckets % 2):
            raise UserError(f"LSHAttention: buckets must be 1 or an even number >= 2, got {buckets}")
        if rounds < 1:
            raise UserError(f"LSHAttention: rounds must be >= 1, got {rounds}")
        if chunk < 1:
            raise UserError(f"LSHAttention: chunk must be >= 1, got {chunk}")
        self.buckets, self.rounds, self.chunk, self.seed = buckets, rounds, chunk, seed

    def extra_repr(self) -> str:
        return f"buckets={self.buckets}, rounds={self.rounds}, chunk={self.chunk}, seed={self.seed}"

    def attend(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None, causal: bool, scale: float,
               bias: Tensor | None, dropout: float) -> tuple[Tensor, None]:
        if bias is not None:
            raise UserError("LSHAttention takes no bias: the scores of pairs it never compares do not exist")
        b, h, t, d = q.shape
        s = k.shape[2]
        if t > s:
            raise ValueError(f"LSHAttention: {t} queries but only {s} keys; the queries are the last T keys")
        k, v = repeat_kv(k, h), repeat_kv(v, h)  # (B, H, S, D)
        valid = key_valid(mask, b, s, kind="lsh")  # (B, S) or None
        valid = torch.ones(b, h, s, dtype=torch.bool, device=q.device) if valid is None else (
            valid[:, None, :].expand(b, h, s))  # (B, H, S)
        q_full = torch.cat([q.new_zeros(b, h, s - t, d), q], dim=2)  # (B, H, S, D): query i at key slot S-T+i
        buckets = hash_buckets(k, buckets=self.buckets, rounds=self.rounds, seed=self.seed)  # (R, B, H, S)
        parts = [attend_round(q_full, k, v, bucket, valid, buckets=self.buckets, last=t, chunk=self.chunk,
                              causal=causal, scale=scale, dropout=dropout) for bucket in buckets]
        # Rounds merged as if their key sets were disjoint: a key found in several rounds counts once per
        # round, so its weight is multiplied by that count relative to a key found once. The paper removes
        # this by subtracting log(count) from its score (Appendix A); we do not, which biases attention
        # towards the keys hashed most reliably with the query (often the closest ones).
        # Shifting every round's lse by the same per-query constant leaves the merge unchanged, but keeps a
        # query that finds only itself (lse near -SELF_PENALTY in every round) from losing float32 precision
        # in merge_partials (the spacing of floats near 1e5 is 0.008, an error of ~0.4% in the weights).
        top = torch.stack([lse for _, lse in parts]).amax(dim=0).detach()  # (B, H, T)
        out, _ = merge_partials([(o, lse - top) for o, lse in parts])  # (B, H, T, D)
        return out, None


__all__ = ["LSHAttention", "hash_buckets", "random_rotations"]
