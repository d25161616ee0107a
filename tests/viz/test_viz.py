"""`tformer plot ...` and `tformer report` on tiny models: the pictures have the predicted pixel size and are
not blank, attention rows are distributions, the report is one self-contained, well-formed HTML page, and
bad inputs are one-line errors with exit code 2 that leave no file behind."""

import html
import json
import math
import random
import re
import shutil
from html.parser import HTMLParser

import numpy as np
import pytest
import torch
import yaml
from matplotlib.image import imread

import tformer
from tformer.cli import main
from tformer.inference import load
from tformer.tasks.report import write_report
from tformer.tokenization import CharTokenizer, WordPieceTokenizer
from tformer.training.checkpoint import save_checkpoint
from tformer.viz import attention, curves, figures, positions
from tformer.viz.complexity import complexity_series, fit_slope, plot_complexity

TEXT = ["In the beginning God created the heavens and the earth.", "And the earth was waste and void."]
WORDS = "the a house cat dog sees big small red blue runs sleeps".split()
GERMAN = dict(zip(WORDS, "der ein Haus Katze Hund sieht gross klein rot blau rennt schlaeft".split(), strict=True))
SENTENCE = "the big cat sees a small dog"


def pixels(path, width: float, height: float) -> np.ndarray:  # noqa: ANN001
    """The PNG at `path`, after checking it is (width x height inches) * DPI and not one flat colour."""
    image = imread(path)
    assert image.shape[:2] == (round(height * figures.DPI), round(width * figures.DPI))
    assert image[..., :3].var() > 0
    return image


def one_line_error(capsys, *words: str) -> None:  # noqa: ANN001
    err = capsys.readouterr().err
    assert err.startswith("tformer: error: ") and err.count("\n") == 1, err
    assert all(w in err for w in words), err


# --- fixtures: tiny checkpoints and runs ------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):  # noqa: ANN001, ANN201
    tokenizer = CharTokenizer.train(TEXT)
    config = tformer.preset("gpt-tiny", {"vocab_size": tokenizer.vocab_size, "d_model": 32, "max_len": 64,
                                         "bos_id": tokenizer.eos_id, "eos_id": tokenizer.eos_id})
    path = tmp_path_factory.mktemp("gpt") / "ckpt"
    save_checkpoint(path, model=tformer.build_model(config), config=config, tokenizer=tokenizer)
    return path


@pytest.fixture(scope="module")
def bert(tmp_path_factory):  # noqa: ANN001, ANN201
    tokenizer = WordPieceTokenizer.train(TEXT * 3 + [SENTENCE] * 3, vocab_size=120, min_frequency=1)
    config = tformer.preset("bert-tiny", {"vocab_size": tokenizer.vocab_size, "d_model": 32, "n_layers": 3})
    path = tmp_path_factory.mktemp("bert") / "ckpt"
    save_checkpoint(path, model=tformer.build_model(config), config=config, tokenizer=tokenizer)
    return path


def corpus(path, n: int, seed: int) -> None:  # noqa: ANN001
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
        lines.append(" ".join(words) + "\t" + " ".join(GERMAN[w] for w in words))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def translation_run(tmp_path_factory):  # noqa: ANN001, ANN201
    """A translation run trained for a few steps through `tformer train`, in a directory named with <&>."""
    root = tmp_path_factory.mktemp("translation")
    for name, n, seed in (("train", 100, 0), ("valid", 6, 1), ("test", 6, 2)):
        corpus(root / f"{name}.tsv", n, seed)
    recipe = {
        "task": "translation", "out_dir": str(root / "run<&>"),
        "data": {"corpus": "files", "train": str(root / "train.tsv"), "valid": str(root / "valid.tsv"),
                 "test": str(root / "test.tsv"), "vocab_size": 300, "max_tokens": 400, "bleu_sentences": 2},
        "model": {"preset": "transformer-tiny", "overrides": {"d_model": 32, "d_ff": 64, "n_layers": 2,
                                                              "max_len": 64}},
        "train": {"max_steps": 2, "eval_every": 2, "log_every": 1, "schedule": {"name": "constant", "warmup": 1},
                  "optim": {"lr": 1e-3}},
        "decode": {"beam": 2, "max_len_b": 5},
    }
    (root / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    assert main(["train", str(root / "recipe.yaml"), "--no-progress"]) == 0
    return root / "run<&>"


# --- attention ----------------------------------------------------------------------------------------------


def check_distributions(maps: list[attention.AttentionMap]) -> None:
    for m in maps:
        assert m.weights.shape[2:] == (len(m.queries), len(m.keys))
        assert torch.allclose(m.weights.sum(-1), torch.ones(m.weights.shape[:3]), atol=1e-5)
        assert (m.weights >= 0).all()


def test_gpt_attention_is_causal_and_rows_sum_to_one(gpt) -> None:  # noqa: ANN001
    loaded = load(gpt)
    model, tokenizer = loaded.model, loaded.tokenizer
    maps = attention.attention_maps(model, tokenizer, "And the earth")
    check_distributions(maps)
    (m,) = maps
    assert m.part == "decoder" and m.weights.shape[:2] == (2, 4)
    assert m.queries[0] == "</s>" and m.queries[1:4] == ["A", "n", "d"] and m.queries[4] == "·"  # start, text
    assert m.weights.triu(1).abs().max() == 0  # no query sees a later token
    assert all(not a.record_weights and a.weights is None for a in (x.mixer for x in model.decoder.layers))


def test_bert_attention_has_cls_and_sep(bert) -> None:  # noqa: ANN001
    loaded = load(bert)
    model, tokenizer = loaded.model, loaded.tokenizer
    (m,) = attention.attention_maps(model, tokenizer, SENTENCE)
    check_distributions([m])
    assert m.part == "encoder" and m.weights.shape[0] == 3
    assert m.queries[0] == "[CLS]" and m.queries[-1] == "[SEP]" and "cat" in m.queries
    assert m.weights.triu(1).abs().max() > 0  # bidirectional


def test_translation_attention_parts_and_alignment(translation_run) -> None:  # noqa: ANN001
    loaded = load(translation_run / "best")
    model, tokenizer = loaded.model, loaded.tokenizer
    maps = attention.attention_maps(model, tokenizer, SENTENCE, target="der Hund")
    check_distributions(maps)
    assert [m.part for m in maps] == ["encoder", "decoder", "cross"]
    encoder, decoder, cross = maps
    assert encoder.queries == encoder.keys == cross.keys
    assert "".join(encoder.queries).replace("·", "") == SENTENCE.replace(" ", "")
    assert decoder.queries == ["<s>", *cross.queries[:-1]] and cross.queries[-1] == "</s>"
    assert "".join(cross.queries[:-1]).replace("·", "") == "derHund"
    greedy = attention.attention_maps(model, tokenizer, SENTENCE)  # no target: the model's own translation
    check_distributions(greedy)
    assert greedy[2].keys == cross.keys


def test_plot_attention_grid_and_zoom(gpt, tmp_path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "grid.png"
    assert main(["plot", "attention", "--checkpoint", str(gpt), "--text", "And the earth", "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    a = attention
    pixels(out, a.LABELS + a.COLORBAR + 4 * a.CELL, a.TITLE + a.LABELS + 2 * a.CELL)
    zoom = tmp_path / "zoom.png"
    assert main(["plot", "attention", "--checkpoint", str(gpt), "--text", "And the earth", "--layer", "1",
                 "--head", "3", "--out", str(zoom)]) == 0
    pixels(zoom, a.LABELS + a.COLORBAR + a.ZOOM, a.TITLE + a.LABELS + a.ZOOM)
    svg = tmp_path / "zoom.svg"
    assert main(["plot", "attention", "--checkpoint", str(gpt), "--text", "And", "--layer", "0", "--head", "0",
                 "--out", str(svg)]) == 0
    assert "<svg" in svg.read_text()[:1000]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.png", "zoom.png", "zoom.svg"]  # no temp files


@pytest.mark.parametrize("match", ["additive", "dot"])
def test_an_rnns_attention_is_titled_by_its_match(match: str) -> None:
    """An RNN has one attention, of its decoder over the source: named by its MATCH, not "layer 0, head 0"."""
    tokenizer = CharTokenizer.train([SENTENCE, "der Hund"])
    ids = {"vocab_size": tokenizer.vocab_size, "pad_id": tokenizer.pad_id, "bos_id": tokenizer.bos_id,
           "eos_id": tokenizer.eos_id}
    config = tformer.preset("rnn-attention-small", {"d_model": 16, "n_layers": 1, "max_len": 64, "match": match, **ids})
    maps = attention.attention_maps(tformer.build_model(config).eval(), tokenizer, SENTENCE, target="der Hund")
    figure = attention.plot_attention(maps)
    assert [a.get_title() for a in figure.axes if a.get_title()] == [f"decoder attention ({match})"]
    assert figure.subfigs[0]._suptitle.get_text().startswith(f"decoder attention ({match} match): ")


def test_plot_attention_of_a_translator_has_three_sections(translation_run, tmp_path) -> None:  # noqa: ANN001
    out = tmp_path / "att.png"
    assert main(["plot", "attention", "--checkpoint", str(translation_run / "best"), "--text", SENTENCE,
                 "--target", "der Hund", "--head", "0", "--out", str(out)]) == 0
    a = attention
    pixels(out, a.LABELS + a.COLORBAR + a.CELL, 3 * (a.TITLE + a.LABELS + 2 * a.CELL))


def test_attention_of_an_imported_hugging_face_gpt2(tmp_path) -> None:  # noqa: ANN001
    import transformers  # a test dependency: missing, this fails
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(TEXT * 4, trainer)
    (tmp_path / "hf").mkdir()
    backend.save(str(tmp_path / "hf" / "tokenizer.json"))
    eot = backend.token_to_id("<|endoftext|>")
    config = transformers.GPT2Config(vocab_size=backend.get_vocab_size(), n_embd=32, n_head=4, n_layer=2,
                                     n_positions=64, bos_token_id=eot, eos_token_id=eot)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path / "hf")
    assert main(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ours")]) == 0
    loaded = load(tmp_path / "ours")
    model, tokenizer = loaded.model, loaded.tokenizer
    (m,) = attention.attention_maps(model, tokenizer, "In the beginning God")
    check_distributions([m])
    assert m.queries[0] == "<|endoftext|>" and "God" in m.queries
    out = tmp_path / "hf.png"
    assert main(["plot", "attention", "--checkpoint", str(tmp_path / "ours"), "--text", "In the beginning",
                 "--out", str(out)]) == 0
    pixels(out, attention.LABELS + attention.COLORBAR + 4 * attention.CELL,
           attention.TITLE + attention.LABELS + 2 * attention.CELL)


@pytest.mark.parametrize(("extra", "words"), [
    (["--layer", "2"], ["--layer 2 is out of range", "2 layers (0..1)"]),
    (["--head", "-1"], ["--head -1 is out of range", "(0..3)"]),
    (["--part", "cross"], ["--part 'cross' is not in this model"]),
    (["--target", "x"], ["--target is only for an encoder-decoder"]),
    (["--out", "x.jpg"], ["x.jpg", ".jpg", ".png or .svg"]),
])
def test_attention_bad_values_are_one_line_errors(gpt, tmp_path, capsys, extra, words) -> None:  # noqa: ANN001
    args = ["plot", "attention", "--checkpoint", str(gpt), "--text", "And", "--out", str(tmp_path / "a.png")]
    assert main(args + extra) == 2
    one_line_error(capsys, *words)
    assert list(tmp_path.iterdir()) == []


def test_attention_refuses_non_exact_attention(tmp_path, capsys) -> None:  # noqa: ANN001
    tokenizer = CharTokenizer.train(TEXT)
    config = tformer.preset("gpt-tiny", {"vocab_size": tokenizer.vocab_size, "d_model": 32, "max_len": 64,
                                         "attention": {"kind": "windowed", "window": 4}})
    save_checkpoint(tmp_path / "w", model=tformer.build_model(config), config=config, tokenizer=tokenizer)
    assert main(["plot", "attention", "--checkpoint", str(tmp_path / "w"), "--text", "And",
                 "--out", str(tmp_path / "a.png")]) == 2
    one_line_error(capsys, "exact attention", "windowed")
    assert not (tmp_path / "a.png").exists()
    assert main(["plot", "attention", "--checkpoint", str(tmp_path / "missing"), "--text", "And"]) == 2
    one_line_error(capsys, "missing")


# --- positions ----------------------------------------------------------------------------------------------


def test_position_matrices_closed_form() -> None:
    table, similarity = positions.sinusoid_similarity(16, 8)
    assert torch.allclose(similarity, table @ table.T)
    assert torch.allclose(similarity.diagonal(), torch.full((16,), 4.0), atol=1e-5)  # sin^2 + cos^2, d/2 pairs
    assert table[3, 0].item() == pytest.approx(math.sin(3.0), abs=1e-6)
    rope = positions.rope_scores(12, 8)
    assert torch.allclose(rope.diagonal(), torch.ones(12), atol=1e-5)
    assert torch.allclose(rope[:-1, :-1], rope[1:, 1:], atol=1e-5)  # depends on j - i only
    assert rope[0, 1].item() == pytest.approx(sum(math.cos(10000 ** (-2 * k / 8)) for k in range(4)) / 4, abs=1e-5)
    alibi = positions.alibi_biases(5, 4)
    assert alibi.shape == (4, 5, 5) and torch.isnan(alibi[0, 0, 1])
    assert alibi[0, 4, 1].item() == pytest.approx(-3 * 2**-2)  # head 0 of 4: m = 2^(-8/4)
    assert alibi[3, 4, 0].item() == pytest.approx(-4 * 2**-8)


def test_plot_positions_writes_three_pictures(tmp_path, capsys) -> None:  # noqa: ANN001
    assert main(["plot", "positions", "--max-len", "32", "--d-model", "16", "--heads", "3",
                 "--out-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("wrote") == 3
    pixels(tmp_path / "positions-sinusoidal.png", 12, 5)
    pixels(tmp_path / "positions-rope.png", 12, 5)
    pixels(tmp_path / "positions-alibi.png", 3.0 * 2 + 1.0, 3.0 * 2 + 0.6)  # 3 heads + the curves: 2 x 2
    assert main(["plot", "positions", "--d-model", "15", "--out-dir", str(tmp_path / "x")]) == 2
    one_line_error(capsys, "--d-model 15", "even")
    assert not (tmp_path / "x").exists()


# --- curves ---------------------------------------------------------------------------------------------


def write_metrics(run, records: list[dict]) -> None:  # noqa: ANN001
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_plot_curves_overlays_runs(translation_run, tmp_path, capsys) -> None:  # noqa: ANN001
    other = tmp_path / "other"
    write_metrics(other, [{"step": s, "loss": 5.0 / s, "lr": 1e-3, "tokens_per_s": 100.0 * s, "elapsed_s": s}
                          for s in range(1, 5)] + [{"step": 4, "eval/valid_loss": 2.0, "eval/accuracy": 0.5}])
    records = curves.read_metrics(translation_run)
    shown = curves.panels({"a": records, "b": curves.read_metrics(other)})
    keys = [k for k, _ in shown]
    assert keys[:3] == ["loss", "lr", "tokens_per_s"] and keys[3:6] == ["eval/valid_loss", "eval/valid_ppl",
                                                                          "eval/bleu"]
    assert "eval/accuracy" in keys
    fig = curves.plot_curves({str(translation_run): records, str(other): curves.read_metrics(other)})
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [str(translation_run), str(other)]
    out = tmp_path / "curves.png"
    assert main(["plot", "curves", str(translation_run), str(other), "--out", str(out)]) == 0
    _, _, width, height = curves.layout(len(shown), 2)
    pixels(out, width, height)


def test_curves_bad_inputs_are_one_line_errors(tmp_path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "c.png"
    assert main(["plot", "curves", str(tmp_path / "nope"), "--out", str(out)]) == 2
    one_line_error(capsys, "run directory", "nope", "does not exist")
    (tmp_path / "empty").mkdir()
    assert main(["plot", "curves", str(tmp_path / "empty"), "--out", str(out)]) == 2
    one_line_error(capsys, "metrics.jsonl does not exist")
    write_metrics(tmp_path / "bad", [{"step": 1, "loss": 1.0}])
    with open(tmp_path / "bad" / "metrics.jsonl", "a") as f:
        f.write("{not json\n")
    assert main(["plot", "curves", str(tmp_path / "bad"), "--out", str(out)]) == 2
    one_line_error(capsys, "metrics.jsonl:2")
    assert not out.exists()


# --- complexity -----------------------------------------------------------------------------------------------


def fake_results(path) -> None:  # noqa: ANN001
    def sweep(fn, axis: str) -> dict:
        points = [{axis: x, "time_s": fn(x), "memory_bytes": 8 * x} for x in (64, 128, 256, 512)]
        return {"points": points, "fit": {"fit_over": [128, 256, 512]}}

    results = {"quadratic": {"n": sweep(lambda x: 3e-6 * x**2, "n"), "d": sweep(lambda x: 1e-5 * x, "d")},
               "linear": {"n": sweep(lambda x: 2e-4 * x, "n"), "d": sweep(lambda x: 1e-7 * x**2, "d")}}
    path.write_text(json.dumps({"args": {"d": 128, "d_n": 2048}, "results": results}))


def test_complexity_slopes_and_plots(tmp_path, capsys) -> None:  # noqa: ANN001
    assert fit_slope([1, 2, 4], [5, 20, 80])[0] == pytest.approx(2.0)
    fake_results(tmp_path / "results.json")
    data = json.loads((tmp_path / "results.json").read_text())
    series = {s.kind: s for s in complexity_series(data, "n", "time_s")}
    assert series["quadratic"].slope == pytest.approx(2.0) and series["linear"].slope == pytest.approx(1.0)
    assert series["quadratic"].fit_xs == [128, 256, 512]
    fig = plot_complexity(data, axis="d", key="time_s", what="time", ylabel="s")
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["quadratic: slope 1.00",
                                                                            "linear: slope 2.00"]
    assert main(["plot", "complexity", "--results", str(tmp_path / "results.json"),
                 "--out-dir", str(tmp_path / "out")]) == 0
    for stem in ("time_vs_n", "memory_vs_n", "time_vs_d"):
        pixels(tmp_path / "out" / f"complexity-{stem}.png", 8, 6)
    assert main(["plot", "complexity", "--results", str(tmp_path / "none.json")]) == 2
    one_line_error(capsys, "none.json", "does not exist")


# --- report ---------------------------------------------------------------------------------------------


VOID = {"meta", "img", "br", "hr", "link", "input", "source", "wbr"}


class Checker(HTMLParser):
    """Records tags and attributes, and fails on a closing tag that does not match the open one."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.tags: list[str] = []
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        self.urls += [value for name, value in attrs if name in ("src", "href")]
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack.pop() == tag, f"</{tag}> closes {self.stack}"


def check_html(text: str) -> Checker:
    checker = Checker()
    checker.feed(text)
    checker.close()
    assert checker.stack == [] and text.startswith("<!DOCTYPE html>")
    assert checker.urls and all(u.startswith("data:image/png;base64,") for u in checker.urls)  # nothing to fetch
    rest = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", text)
    assert "<script" not in rest and "http" not in rest and "url(" not in rest
    return checker


def test_report_of_a_translation_run(translation_run, capsys) -> None:  # noqa: ANN001
    assert main(["report", str(translation_run)]) == 0
    path = translation_run / "report.html"
    assert str(path) in capsys.readouterr().out
    text = path.read_text(encoding="utf-8")
    checker = check_html(text)
    assert checker.tags.count("img") == 2  # curves and attention
    assert "run&lt;&amp;&gt;" in text and "run<&>" not in text  # the directory's name, escaped
    assert "Sample translations" in text and "the first 4 sentences of the test split" in text
    last_eval = [r for r in curves.read_metrics(translation_run) if "eval/bleu" in r][-1]
    assert f"last evaluation, step {last_eval['step']}" in text


def test_report_of_a_gpt_run_and_bad_inputs(gpt, tmp_path, capsys) -> None:  # noqa: ANN001
    run = tmp_path / "run"
    write_metrics(run, [{"step": 1, "loss": 3.0, "lr": 1e-3, "tokens_per_s": 10.0},
                        {"step": 1, "eval/valid_loss": 2.5, "eval/bits_per_char": 3.6}])
    shutil.copytree(gpt, run / "last")
    out = write_report(run, tmp_path / "page.html")
    text = out.read_text(encoding="utf-8")
    assert check_html(text).tags.count("img") == 2
    assert "Sample generation" in text and "bits_per_char" in text
    assert main(["report", str(tmp_path / "missing")]) == 2
    one_line_error(capsys, "missing", "does not exist")
    (tmp_path / "bare").mkdir()
    assert main(["report", str(tmp_path / "bare")]) == 2
    one_line_error(capsys, "metrics.jsonl does not exist")
    assert not (tmp_path / "bare" / "report.html").exists()


def test_report_of_a_bert_run_and_of_metrics_alone(bert, tmp_path) -> None:  # noqa: ANN001
    run = tmp_path / "bert"
    write_metrics(run, [{"step": 1, "loss": 7.0}, {"step": 1, "eval/mlm_accuracy": 0.25}])
    text = write_report(run).read_text(encoding="utf-8")
    assert check_html(text).tags.count("img") == 1 and "no checkpoint in" in text
    shutil.copytree(bert, run / "best")
    text = write_report(run).read_text(encoding="utf-8")
    assert check_html(text).tags.count("img") == 2 and "an encoder generates no text" in text
    assert "mlm_accuracy" in text and "BertForPretraining" in text


def test_report_shows_validation_and_test_scores_each_labelled(tmp_path) -> None:  # noqa: ANN001
    """A demo run's page: the last evaluation (greedy BLEU on the first bleu_sentences of Romans) and test.json
    (beam search over Acts), both shown, each saying what it scored; without test.json, only validation."""
    run = tmp_path / "demo"
    write_metrics(run, [{"step": 50, "loss": 3.0, "lr": 1e-3},
                        {"step": 100, "eval/valid_loss": 2.7, "eval/bleu": 13.89, "eval/chrf": 40.6}])
    (run / "recipe.yaml").write_text(yaml.safe_dump({"task": "translation", "out_dir": str(run),
                                                     "data": {"corpus": "bible", "bleu_sentences": 100},
                                                     "decode": {"beam": 4}}))
    (run / "test.json").write_text(json.dumps({"split": "test", "bleu": 18.07, "chrf": 45.1, "degenerate": 0.01,
                                               "sentences": 1004, "steps": 100}))
    text = " ".join(html.unescape(write_report(run).read_text(encoding="utf-8")).split())
    assert ("last evaluation, step 100: validation, on the valid split (Romans): loss and perplexity over all of "
            "it; BLEU and chrF over its first 100 sentences, greedy") in text
    assert "test, on the test split (Acts), 1004 sentences, beam 4, after step 100 (test.json)" in text
    assert "<td>bleu</td><td>13.89</td>" in text and "<td>bleu</td><td>18.07</td>" in text
    (run / "test.json").write_text("[1, 2]")  # not what demo writes: said, not a traceback
    text = html.unescape(write_report(run).read_text(encoding="utf-8"))
    assert "test: test.json cannot be read (it holds a JSON list, not an object)" in text
    (run / "test.json").unlink()
    text = html.unescape(write_report(run).read_text(encoding="utf-8"))
    assert "13.89" in text and "test," not in text and "test.json" not in text


def test_a_failed_write_leaves_nothing_behind(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    def fail(src, dst) -> None:  # noqa: ANN001
        raise OSError("disk full")

    monkeypatch.setattr(figures.os, "replace", fail)
    with pytest.raises(ValueError, match="cannot write .*rope.png: disk full"):
        figures.save_figure(positions.plot_rope(8, 4), tmp_path / "rope.png")
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_output_is_a_one_line_error(tmp_path, capsys) -> None:  # noqa: ANN001
    (tmp_path / "file").write_text("not a directory")
    assert main(["plot", "positions", "--max-len", "8", "--d-model", "4", "--heads", "1",
                 "--out-dir", str(tmp_path / "file" / "sub")]) == 2
    one_line_error(capsys, "cannot write", "file/sub/positions-sinusoidal.png")
