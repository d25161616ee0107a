"""Issue 32 through the `tformer` command: `translate --n-best` (fairseq-like lines, or `--json`), `translate
--prefix`, `--no-repeat-ngram-size` and `--repetition-penalty` on translate, evaluate and generate (the
library's answers, and its refusals in its own words), and the one-line warning on stderr for input the
model's tokenizer cannot represent (translate, generate, score, classify). Untrained checkpoints with wide
weights, so that what they write depends on their input (and repeats itself)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

import tformer
from tformer.cli import main
from tformer.data.padding import pad
from tformer.decoding import SampleConfig, beam_search, generate, greedy
from tformer.inference import (
    DecodeConfig,
    continue_prompt,
    load,
    prompt_ids,
    repetition_of,
    translate,
    translate_n_best,
)
from tformer.tokenization import BPETokenizer, CharTokenizer, WordPieceTokenizer
from tformer.training.checkpoint import save_checkpoint

TEXT = ["the cat sees the dog", "a big red house", "the small blue cat sleeps", "a dog runs", "the house sleeps"]
TINY = {"d_model": 32, "d_ff": 64, "n_heads": 2, "n_layers": 1, "max_len": 40, "init": {"kind": "normal", "std": 0.5}}
DECODE = {"beam": 2, "max_len_b": 8, "max_len_a": 1.0}  # the runs' recipe.yaml


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A translator with BPE (a run directory whose recipe.yaml has a files corpus and decode beam 2), one with
    characters, a character GPT and a WordPiece classifier."""
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("options")
    (root / "test.tsv").write_text("".join(f"{s}\t{s}\n" for s in TEXT), encoding="utf-8")
    bpe, chars = BPETokenizer.train(TEXT * 3, vocab_size=280), CharTokenizer.train(TEXT)
    pieces = WordPieceTokenizer.train(TEXT * 3, vocab_size=100)
    built = {"mt": (tformer.preset("transformer-tiny", {**TINY, "vocab_size": bpe.vocab_size}), bpe),
             "char mt": (tformer.preset("transformer-tiny", {**TINY, "vocab_size": chars.vocab_size}), chars),
             "gpt": (tformer.preset("gpt-tiny", {**TINY, "vocab_size": chars.vocab_size, "bos_id": chars.eos_id,
                                                 "eos_id": chars.eos_id}), chars),
             "clf": (tformer.preset("bert-tiny", {**TINY, "vocab_size": pieces.vocab_size, "n_labels": 2}), pieces)}
    out = {}
    for name, (config, tokenizer) in built.items():
        model = tformer.BertClassifier(config) if name == "clf" else tformer.build_model(config)
        run = root / name.replace(" ", "-")
        save_checkpoint(run / "best", model=model, config=config, tokenizer=tokenizer)
        out[name] = run / "best"
    data = {"corpus": "files", "train": str(root / "test.tsv"), "valid": str(root / "test.tsv"),
            "test": str(root / "test.tsv")}
    for name in ("mt", "char mt"):
        recipe = {"task": "translation", "out_dir": str(out[name].parent), "data": data, "decode": DECODE}
        (out[name].parent / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    return out


def run(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def lines_file(tmp_path: Path, lines: list[str]) -> str:
    path = tmp_path / "in.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def repeats(tokens: list[int], n: int = 2) -> bool:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) < len(grams)


def test_n_best_prints_each_hypothesis_with_its_score_best_first(ckpt: dict, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    source = lines_file(tmp_path, [TEXT[0], "", TEXT[1]])
    code, out, err = run(["translate", "--checkpoint", str(ckpt["mt"]), "-i", source, "--n-best", "2"], capsys)
    assert code == 0 and err == ""
    loaded = load(ckpt["mt"])
    want = translate_n_best(loaded.model, loaded.tokenizer, [TEXT[0], "", TEXT[1]], DecodeConfig(**DECODE), n_best=2)
    rows = [line.split("\t", 2) for line in out.splitlines()]
    assert [r[0] for r in rows] == ["1", "1", "3", "3"]  # the input's line numbers; the empty line has none
    assert [r[2] for r in rows] == [c.text for hyps in want for c in hyps]
    assert [float(r[1]) for r in rows] == pytest.approx([c.score for hyps in want for c in hyps], abs=1e-4)
    assert float(rows[0][1]) >= float(rows[1][1])
    code, plain, _ = run(["translate", "--checkpoint", str(ckpt["mt"]), "-i", source], capsys)
    assert plain.splitlines() == [rows[0][2], "", rows[2][2]]  # the best hypothesis is the translation


def test_json_gives_one_object_per_line_of_input(ckpt: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = lines_file(tmp_path, [TEXT[0], ""])
    code, out, _ = run(["translate", "--checkpoint", str(ckpt["mt"]), "-i", source, "--json", "--n-best", "2"],
                       capsys)
    objects = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [o["line"] for o in objects] == [1, 2] and objects[1]["hypotheses"] == []
    assert objects[0]["source"] == TEXT[0] and len(objects[0]["hypotheses"]) == 2
    assert set(objects[0]["hypotheses"][0]) == {"text", "score", "log_prob", "eos"}
    code, out, _ = run(["translate", "--checkpoint", str(ckpt["mt"]), "-i", source, "--json"], capsys)
    assert len(json.loads(out.splitlines()[0])["hypotheses"]) == 1  # --n-best 1 by default


@pytest.mark.parametrize("args, message", [
    (["--n-best", "3"], "--n-best=3 is not allowed; give 1 to the beam size (2), or a wider beam for more hypotheses"),
    (["--n-best", "2", "--beam", "1"], "--n-best=2 is not allowed; give 1 to the beam size (1), or a wider beam "
                                        "for more hypotheses"),
    (["--n-best", "0"], "--n-best=0 is not allowed; give 1 to the beam size (2), or a wider beam for more hypotheses"),
    (["--no-repeat-ngram-size", "-1"], "no_repeat_ngram_size=-1 must be an integer >= 0 (0 = off)"),
    (["--repetition-penalty", "0.5"], "repetition_penalty=0.5 must be a finite number >= 1 (1 = off)"),
    (["--repetition-penalty", "nan"], "argument --repetition-penalty: 'nan' is not a finite number"),
], ids=["n-best-over-beam", "n-best-over-beam-1", "n-best-0", "no-repeat-negative", "penalty-below-1", "penalty-nan"])
def test_bad_decoding_options_are_refused_in_one_line_before_anything_is_written(
        args: list[str], message: str, ckpt: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for command in (["translate", "--checkpoint", str(ckpt["mt"]), "-i", lines_file(tmp_path, ["a"]), "-o",
                     str(tmp_path / "out.txt")],
                    ["generate", "--checkpoint", str(ckpt["gpt"]), "--prompt", "a", "-o", str(tmp_path / "out.txt")],
                    ["evaluate", "--checkpoint", str(ckpt["mt"]), "-o", str(tmp_path / "out.txt")]):
        if "--n-best" in args and command[0] != "translate":
            continue
        code, out, err = run([*command, *args], capsys)
        assert (code, out, err) == (2, "", f"tformer: error: {message}\n"), command[0]
        assert not (tmp_path / "out.txt").exists()


def test_a_prefix_starts_the_translation_and_the_models_own_start_changes_nothing(
        ckpt: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    loaded = load(ckpt["mt"])
    bpe = loaded.tokenizer
    plain = translate(loaded.model, bpe, TEXT, DecodeConfig(**{**DECODE, "beam": 1}))
    tokens = greedy(loaded.model, pad(bpe.encode_batch(TEXT), bpe.pad_id), max_len_a=1.0, max_len_b=8)
    own = [bpe.decode(t[:2]) for t in tokens]  # the start of what it wrote, where that text tokenizes back to it
    own = [o if bpe.encode(o) == t[:2] else "" for o, t in zip(own, tokens, strict=True)]
    assert any(own)
    source = lines_file(tmp_path, [f"{s}\t{o}" for s, o in zip(TEXT, own, strict=True)] + ["a dog\tDer Hund"])
    code, out, _ = run(["translate", "--checkpoint", str(ckpt["mt"]), "-i", source, "--prefix", "--beam", "1"], capsys)
    got = out.splitlines()
    assert code == 0 and got[:-1] == plain and got[-1].startswith("Der Hund")
    code, out, _ = run(["translate", "--checkpoint", str(ckpt["mt"]), "-i", source, "--prefix", "--json"], capsys)
    last = json.loads(out.splitlines()[-1])
    assert (last["source"], last["prefix"]) == ("a dog", "Der Hund")
    assert last["hypotheses"][0]["text"].startswith("Der Hund")
    source = lines_file(tmp_path, ["a cat", "a dog\t" + "Hund " * 40])
    code, out, err = run(["translate", "--checkpoint", str(ckpt["mt"]), "-i", source, "--prefix"], capsys)
    assert code == 2 and out == "" and err.startswith(f"tformer: error: {source}:2: the prefix is ")
    assert err.endswith("tokens; the model writes at most max_len=40, so a prefix may hold at most 39\n")


def test_no_repeat_ngram_size_on_translate_and_evaluate_is_the_librarys(ckpt: dict, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    loaded = load(ckpt["char mt"])
    source = lines_file(tmp_path, TEXT)
    code, out, _ = run(["translate", "--checkpoint", str(ckpt["char mt"]), "-i", source,
                        "--no-repeat-ngram-size", "2"], capsys)
    want = translate(loaded.model, loaded.tokenizer, TEXT, DecodeConfig(**DECODE, no_repeat_ngram_size=2))
    assert code == 0 and out.splitlines() == want
    src = pad(loaded.tokenizer.encode_batch(TEXT), loaded.tokenizer.pad_id)
    for rep, repeated in ((repetition_of(2), False), (None, True)):  # the tokens behind the text
        found = beam_search(loaded.model, src, beam=2, max_len_a=1.0, max_len_b=8, repetition=rep)
        assert any(repeats(h[0].tokens) for h in found) == repeated
        if rep is not None:
            assert [loaded.tokenizer.decode(h[0].tokens) for h in found] == want
    hyps = tmp_path / "hyps.txt"
    code, out, _ = run(["evaluate", "--checkpoint", str(ckpt["char mt"]), "--json", "--hyp-out", str(hyps),
                        "--no-repeat-ngram-size", "2", "--repetition-penalty", "1.2"], capsys)
    report = json.loads(out)
    assert code == 0 and (report["decode"]["no_repeat_ngram_size"], report["decode"]["repetition_penalty"]) == (2, 1.2)
    decode = DecodeConfig(**DECODE, no_repeat_ngram_size=2, repetition_penalty=1.2)
    assert hyps.read_text(encoding="utf-8").splitlines() == translate(loaded.model, loaded.tokenizer, TEXT, decode)
    code, out, _ = run(["evaluate", "--checkpoint", str(ckpt["char mt"]), "--no-repeat-ngram-size", "3"], capsys)
    assert out.startswith("test: 5 sentences, beam 2, lenpen 1.0, no repeated 3-grams\n")


def test_generate_with_no_repeat_ngram_size_never_repeats_a_bigram(ckpt: dict, capsys: pytest.CaptureFixture) -> None:
    loaded = load(ckpt["gpt"])
    args = ["generate", "--checkpoint", str(ckpt["gpt"]), "--prompt", "the cat", "--temperature", "0",
            "--max-new-tokens", "30", "--json"]
    code, out, _ = run([*args, "--no-repeat-ngram-size", "2"], capsys)
    text = json.loads(out)["text"]
    assert code == 0 and text == continue_prompt(loaded.model, loaded.tokenizer, "the cat",
                                                 SampleConfig(temperature=0.0, no_repeat_ngram_size=2),
                                                 max_new_tokens=30)
    prompt = prompt_ids(loaded.tokenizer, loaded.config, "the cat")
    for rep, repeated in ((repetition_of(2), False), (None, True)):  # the tokens behind the text
        (new,) = generate(loaded.model, [prompt], max_new_tokens=30, temperature=0.0, repetition=rep,
                          stop_tokens=(loaded.config.eos_id,))
        assert len(new) > 10 and repeats(prompt + new) == repeated  # the prompt counts: the start of the text
        if rep is not None:
            assert loaded.tokenizer.decode(new) == text
    code, out, _ = run([*args, "--repetition-penalty", "1.5"], capsys)
    assert json.loads(out)["text"] == continue_prompt(loaded.model, loaded.tokenizer, "the cat",
                                                      SampleConfig(temperature=0.0, repetition_penalty=1.5),
                                                      max_new_tokens=30)


@pytest.mark.parametrize("name, args, text", [
    ("gpt", ["generate", "--prompt", "the Жук", "--max-new-tokens", "2"], None),
    ("gpt", ["score"], "the Жук\nthe cat\n"),
    ("char mt", ["translate"], "the Жук\n"),
    ("clf", ["classify"], "the 猫 cat\n")], ids=["generate", "score", "translate", "classify"])
def test_input_the_tokenizer_cannot_represent_gets_one_warning(name: str, args: list[str], text: str | None,
                                                               ckpt: dict, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    command, *rest = args
    argv = [command, "--checkpoint", str(ckpt[name]), *rest]
    if text is not None:
        (tmp_path / "in.txt").write_text(text, encoding="utf-8")
        argv += ["-i", str(tmp_path / "in.txt")]
    code, out, err = run(argv, capsys)
    assert code == 0 and out
    assert err.count("\n") == 1 and err.startswith("tformer: warning: ")
    example = "'猫'" if name == "clf" else "'Ж', 'у', 'к'"
    assert err.endswith(f" are unknown to this model's tokenizer (e.g. {example}); its output will be poor\n")
    clean = [a.replace("Жук", "dog") if isinstance(a, str) else a for a in argv]
    if text is not None:
        (tmp_path / "in.txt").write_text(text.replace("Жук", "dog").replace("猫", "dog"), encoding="utf-8")
    assert run(clean, capsys)[2] == ""
