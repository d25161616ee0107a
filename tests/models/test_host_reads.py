"""A training forward and backward never read a device value on the host: on a GPU each read would make the
host wait until the device has run everything queued (docs/training.md, "Keeping the GPU fed"). Run on the
`meta` device, which holds shapes and no values, so that any read fails."""

import pytest
import torch

import tformer
from tformer.training.losses import label_smoothed_nll

SIZES = dict(vocab_size=100, d_model=16, n_heads=2, d_ff=32, n_layers=2, max_len=64,
             dropout={"embed": 0.1, "residual": 0.2})
CONFIGS = {
    "seq2seq": lambda: tformer.Seq2SeqConfig(**SIZES, norm={"placement": "pre"}),
    "gpt": lambda: tformer.GPTConfig(**SIZES),
    "bert": lambda: tformer.BertConfig(**SIZES),
    "llama": lambda: tformer.preset("llama-tiny", {"vocab_size": 100}),
}


def ids(*shape: int) -> torch.Tensor:
    return torch.randint(3, 100, shape).to("meta")


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_a_training_step_reads_nothing_on_the_host(family: str) -> None:
    model = tformer.build_model(CONFIGS[family]()).to("meta").train()
    target = ids(4, 9) if family == "seq2seq" else ids(4, 10)
    out = model(ids(4, 10), target) if family == "seq2seq" else model(ids(4, 10))
    logits, *heads = out if isinstance(out, tuple) else (out,)  # BERT: (MLM logits, NSP logits)
    loss, _ = label_smoothed_nll(logits, target, smoothing=0.1, ignore_index=0)
    (loss + sum(h.sum() for h in heads)).backward()
    assert loss.device.type == "meta"
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_evaluation_still_checks_the_ids() -> None:
    model = tformer.build_model(CONFIGS["gpt"]()).to("meta").eval()
    with pytest.raises((RuntimeError, NotImplementedError)):  # the check reads the ids: meta has none to read
        model(ids(1, 4))
