"""benchmarks/translate_baseline.py at tiny scale: MarianMTModel gets our model's sizes, its beam search our
length limits, and the script trains it on a tformer run's job and compares both."""

import dataclasses
import json
import math
import random
from pathlib import Path

import pytest
import torch
import transformers
import yaml

import tformer
from benchmarks import translate_baseline as baseline
from tformer.cli import main as tformer_main
from tformer.inference import DecodeConfig, load, translate
from tformer.interop.hf import from_hf

D, MAX_LEN = 32, 64

WORDS = "the a house cat dog sees big small red blue runs sleeps".split()
GERMAN = dict(zip(WORDS, "der ein Haus Katze Hund sieht gross klein rot blau rennt schlaeft".split(), strict=True))


def corpus(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    words = [[rng.choice(WORDS) for _ in range(rng.randint(2, 6))] for _ in range(n)]
    path.write_text("".join(" ".join(w) + "\t" + " ".join(GERMAN[x] for x in w) + "\n" for w in words))


def frozen_and_trained(model: torch.nn.Module) -> tuple[int, int]:
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    return frozen, baseline.n_trainable(model)


def test_marian_has_our_sizes_and_trains_as_many_numbers() -> None:
    config = tformer.Seq2SeqConfig(vocab_size=300, d_model=D, n_heads=4, d_ff=64, n_layers=2, n_decoder_layers=1,
                                   max_len=MAX_LEN)
    marian = transformers.MarianMTModel(baseline.marian_config(config))
    frozen, trained = frozen_and_trained(marian)
    assert trained == baseline.n_trainable(tformer.build_model(config))
    assert frozen == 2 * MAX_LEN * D  # Marian's encoder and decoder sinusoid tables, held as frozen parameters
    assert marian.final_logits_bias.shape == (1, 300) and not marian.final_logits_bias.any()  # a zero buffer
    assert marian.lm_head.weight is marian.model.shared.weight is marian.model.encoder.embed_tokens.weight
    assert marian.model.encoder.embed_scale == math.sqrt(D)


def test_unsupported_parts_are_named() -> None:
    config = tformer.Seq2SeqConfig(vocab_size=50, d_model=D, n_heads=4, activation="swiglu",
                                   positions=tformer.config.PositionConfig(kind="rope"))
    with pytest.raises(ValueError, match="activation='swiglu'.*positions.kind='rope'"):
        baseline.marian_config(config)
    pre_ln = tformer.Seq2SeqConfig(vocab_size=50, d_model=D, n_heads=4, norm={"placement": "pre"})
    assert baseline.marian_config(pre_ln).d_model == D  # Marian stays post-LN, as a user gets it


def test_linear_warmup_then_decay_to_the_end_of_the_run() -> None:
    factor = baseline.linear_warmup_decay(4, lambda step: step / 12)  # the run ends at step 12
    assert [factor(s) for s in (0, 2, 4, 8, 12, 13)] == pytest.approx([0, 0.5, 1, 0.5, 0, 0])


def test_script_trains_marian_and_compares(tmp_path, capsys) -> None:  # noqa: ANN001
    for name, n, seed in (("train", 200, 0), ("valid", 10, 1), ("test", 10, 2)):
        corpus(tmp_path / f"{name}.tsv", n, seed)
    recipe = {
        "task": "translation", "out_dir": str(tmp_path / "run"),
        "data": {"corpus": "files", "train": str(tmp_path / "train.tsv"), "valid": str(tmp_path / "valid.tsv"),
                 "test": str(tmp_path / "test.tsv"), "vocab_size": 300, "max_tokens": 300, "bleu_sentences": 3},
        "model": {"preset": "transformer-tiny", "overrides": {"d_model": D, "d_ff": 64, "n_layers": 1,
                                                              "max_len": MAX_LEN}},
        "train": {"max_steps": 3, "time_budget_min": 5, "eval_every": 3, "log_every": 5,
                  "schedule": {"name": "constant", "warmup": 2}, "optim": {"lr": 1e-3}},
        "decode": {"beam": 2, "max_len_b": 4, "batch_size": 2},
    }
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    assert tformer_main(["train", str(tmp_path / "recipe.yaml"), "--no-progress"]) == 0
    capsys.readouterr()

    args = ["--run", str(tmp_path / "run"), "--max-steps", "100", "--limit", "5", "--no-progress"]
    assert baseline.main(args) == 0
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith("| ") and "parameters" not in line]
    assert [r.split("|")[1].strip() for r in rows] == ["tformer", "MarianMTModel"]
    assert "tformer BLEU / Marian BLEU" in printed

    out_dir = tmp_path / "run-marian"
    result = json.loads((out_dir / "comparison.json").read_text())
    ours, theirs = result["models"]
    assert result["sentences"] == 5 and result["decode"]["beam"] == 2 and result["minutes"] == 5
    assert ours["steps"] == 3 and theirs["steps"] == 100  # --max-steps ended it, long before 5 minutes
    assert theirs["parameters"] == ours["parameters"] and theirs["frozen"] == 2 * MAX_LEN * D
    for m in (ours, theirs):
        assert math.isfinite(m["bleu"]) and 0 <= m["bleu"] <= 100 and 0 <= m["chrf"] <= 100
        assert m["tokens_per_s"] > 0
    curve = [loss for _, loss in theirs["loss_curve"]]
    assert [s for s, _ in theirs["loss_curve"]] == list(range(5, 101, 5))  # the recipe's log_every
    assert curve[0] > curve[-1] + 0.5  # from about ln V = 5.7 nats, smoothed, steadily down (100 steps: 4.7)

    ours_model = load(tmp_path / "run" / "best").model
    saved = transformers.MarianConfig.from_pretrained(out_dir / "model")
    c = ours_model.config
    assert (saved.d_model, saved.encoder_layers, saved.decoder_layers, saved.encoder_attention_heads,
            saved.encoder_ffn_dim, saved.vocab_size, saved.max_position_embeddings) == (
        c.d_model, c.n_layers, c.n_decoder_layers, c.n_heads, c.d_ff, c.vocab_size, c.max_len)
    assert (saved.pad_token_id, saved.eos_token_id, saved.decoder_start_token_id) == (c.pad_id, c.eos_id,
                                                                                     c.decoder_start_id)

    assert baseline.main([*args[:2], "--batches", "user", "--max-steps", "10", "--limit", "2", "--no-progress"]) == 0
    assert "a user's batches of 32 shuffled sentences" in capsys.readouterr().out
    user = json.loads((tmp_path / "run-marian-user" / "comparison.json").read_text())
    assert user["batches"] == "user" and user["models"][1]["steps"] == 10 and result["batches"] == "recipe"


def test_user_batches_shuffle_every_epoch_and_pad_to_the_longest() -> None:
    """--batches user: 32 sentences a batch in a new random order each epoch, every pair once an epoch."""
    rng = random.Random(0)
    examples = [([4 + i] * rng.randint(1, 9), [5 + i] * rng.randint(1, 9)) for i in range(70)]
    tok = type("Tok", (), {"pad_id": 0, "bos_id": 1, "eos_id": 2})()
    task = type("Task", (), {"train_examples": examples, "tokenizer": tok})()
    stream = baseline.user_batches(task, seed=3)
    epochs = [[next(stream) for _ in range(3)] for _ in range(2)]  # 32 + 32 + 6 sentences an epoch
    for batches in epochs:
        assert [len(b) for b in batches] == [32, 32, 6]
        firsts = sorted(int(row[0]) - 4 for b in batches for row in b.src)
        assert firsts == list(range(70))  # every pair once
        for b in batches:
            assert b.src.shape[1] == max(int((row != 0).sum()) for row in b.src)  # padded to its longest
            assert (b.tgt_in[:, 0] == 1).all() and b.n_target_tokens == int((b.tgt_out != 0).sum())
    orders = [[int(row[0]) for b in batches for row in b.src] for batches in epochs]
    assert orders[0] != orders[1] and orders[0] != sorted(orders[0])  # shuffled, and anew each epoch


class Digits:  # ids as text: "5 6 7" <-> [5, 6, 7]
    pad_id, eos_id = 0, 2

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [[int(x) for x in t.split()] for t in texts]

    def decode(self, ids: list[int]) -> str:
        return " ".join(map(str, ids))


@pytest.mark.parametrize(("beam", "stopping"), [(1, "finished"), (4, "finished"), (4, "best")])
def test_marian_decodes_as_our_beam_search_with_the_same_weights(tmp_path, beam: int,  # noqa: ANN001
                                                                  stopping: str) -> None:
    config = tformer.Seq2SeqConfig(vocab_size=60, d_model=D, n_heads=4, d_ff=64, n_layers=1, max_len=MAX_LEN)
    torch.manual_seed(0)
    marian = transformers.MarianMTModel(baseline.marian_config(config)).eval()
    with torch.no_grad():  # peaked distributions, and an end symbol likely enough that some sentences end at once
        for p in marian.parameters():
            p.mul_(4 if p.requires_grad else 1)  # not the sinusoids, which a checkpoint leaves out
        marian.final_logits_bias[0, 2] = 7.0
    marian.save_pretrained(tmp_path)
    ours, _ = from_hf(tmp_path)  # the same weights in our model (split sinusoids, output bias)
    rng = random.Random(1)
    sources = [" ".join(str(rng.randrange(4, 60)) for _ in range(rng.randint(1, 8))) for _ in range(12)]

    decode = DecodeConfig(beam=beam, lenpen=1.0, max_len_a=1.0, max_len_b=3, stopping=stopping, batch_size=1)
    theirs = baseline.marian_translate(marian, Digits(), sources, decode, max_len=MAX_LEN)
    assert theirs == translate(ours, Digits(), sources, decode)
    lengths = [len(t.split()) for t in theirs]
    if beam == 4:  # both kinds of ending: at once by the end symbol, and cut at the length limit a * n + b
        assert 0 in lengths and any(n == len(s.split()) + 3 for n, s in zip(lengths, sources, strict=True))

    batched = baseline.marian_translate(marian, Digits(), ["5 6 7", "", "8 9", "10 11 12 13"],
                                        dataclasses.replace(decode, batch_size=2), max_len=MAX_LEN)
    assert batched[1] == ""
    for hyp, longest in ((batched[2], 3), (batched[0], 3), (batched[3], 4)):  # ["8 9", "5 6 7"], ["10 .. 13"]
        assert len(hyp.split()) <= longest + 3 and "0" not in hyp.split()  # the batch's longest a * n + b
