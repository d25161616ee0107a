"""`tformer generate` and `tformer score` on a tiny GPT checkpoint with a character tokenizer."""

import math

import pytest

import tformer
from tformer.cli import main
from tformer.tokenization.char import CharTokenizer
from tformer.training.checkpoint import save_checkpoint

TEXT = ["In the beginning God created the heavens and the earth.", "And the earth was waste and void."]


@pytest.fixture
def checkpoint(tmp_path):  # noqa: ANN001, ANN201
    tokenizer = CharTokenizer.train(TEXT)
    config = tformer.preset("gpt-tiny", {"vocab_size": tokenizer.vocab_size, "max_len": 64,
                                         "bos_id": tokenizer.eos_id, "eos_id": tokenizer.eos_id})
    save_checkpoint(tmp_path / "ckpt", model=tformer.build_model(config), config=config, tokenizer=tokenizer)
    return tmp_path / "ckpt"


def test_generate_streams_reproducible_text(checkpoint, capsys) -> None:  # noqa: ANN001
    args = ["generate", "--checkpoint", str(checkpoint), "--prompt", "And the", "--max-new-tokens", "20",
            "--temperature", "0.9", "--top-k", "5", "--seed", "3", "--no-stop"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0
    assert capsys.readouterr().out == first
    assert first.startswith("And the") and len(first.rstrip("\n")) == len("And the") + 20


def test_generate_compile_writes_the_text_of_the_dynamic_steps(checkpoint, capsys) -> None:  # noqa: ANN001
    """--compile: the fixed-shape step through torch.compile, greedy and seeded sampling alike."""
    for settings in (["--temperature", "0"], ["--temperature", "0.9", "--top-k", "5", "--seed", "3"]):
        args = ["generate", "--checkpoint", str(checkpoint), "--prompt", "And the", "--prompt", "In",
                "--max-new-tokens", "12", "--no-stop", *settings]
        assert main(args) == 0
        dynamic = capsys.readouterr().out
        assert main([*args, "--compile"]) == 0
        assert capsys.readouterr().out == dynamic and dynamic.count("\n") >= 2


def test_score_prints_likelihood_and_bits(checkpoint, tmp_path, capsys) -> None:  # noqa: ANN001
    file = tmp_path / "text.txt"
    file.write_text("\n".join(TEXT) + "\n", encoding="utf-8")
    assert main(["score", "--checkpoint", str(checkpoint), str(file), "--per-token"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("line\tlog_likelihood")
    row = lines[1].split("\t")
    log_prob, tokens, ppl, bpc = float(row[1]), int(row[2]), float(row[3]), float(row[4])
    assert tokens == len(TEXT[0])  # every character is scored: the model starts from its bos_id
    assert ppl == pytest.approx(math.exp(-log_prob / tokens), rel=1e-3)
    assert bpc == pytest.approx(-log_prob / math.log(2) / len(TEXT[0]), rel=1e-3)
    per_token = [line for line in lines if line.startswith("\t")]
    assert len(per_token) == len(TEXT[0]) + len(TEXT[1])
    assert sum(float(line.split("\t")[2]) for line in per_token[: len(TEXT[0])]) == pytest.approx(log_prob, abs=1e-2)


def test_generate_refuses_an_encoder_decoder(tmp_path, capsys) -> None:  # noqa: ANN001
    config = tformer.preset("transformer-tiny")
    save_checkpoint(tmp_path / "s2s", model=tformer.build_model(config), config=config)
    assert main(["generate", "--checkpoint", str(tmp_path / "s2s"), "--prompt", "x"]) == 2
    assert "generate needs a GPT" in capsys.readouterr().err


def test_score_all_row_has_every_column(checkpoint, tmp_path, capsys) -> None:  # noqa: ANN001
    """The `all` row is the lines scored together, one text: each column as a line's, perplexity included."""
    file = tmp_path / "text.txt"
    file.write_text("\n".join(TEXT) + "\n", encoding="utf-8")
    assert main(["score", "--checkpoint", str(checkpoint), str(file)]) == 0
    header, *rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [len(r) for r in rows] == [len(header)] * 3 and rows[-1][0] == "all"
    total, tokens, ppl, bpc, bpb = (float(rows[-1][1]), int(rows[-1][2]), *map(float, rows[-1][3:]))
    assert total == pytest.approx(sum(float(r[1]) for r in rows[:-1]), abs=1e-3)
    assert tokens == sum(int(r[2]) for r in rows[:-1]) == len(TEXT[0]) + len(TEXT[1])
    assert ppl == pytest.approx(math.exp(-total / tokens), rel=1e-3)
    assert bpc == pytest.approx(-total / math.log(2) / (len(TEXT[0]) + len(TEXT[1])), rel=1e-3)
    assert bpb == pytest.approx(-total / math.log(2) / len("".join(TEXT).encode()), rel=1e-3)
