"""The RNN encoder-decoders through the `tformer` command, on a tiny TSV corpus: a recipe whose preset is of
the rnn family trains, and resumes bitwise where it stopped; its checkpoint translates, evaluates, scores,
draws its attention map (`plot attention`), goes into a report and is served (translations and /attention's
map); a plain RNN's map is refused in one line, as are the Transformer-only exports."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import safetensors.torch
import yaml

from tformer.cli import main

WORDS = "the a house cat dog sees big red".split()
GERMAN = dict(zip(WORDS, "der ein Haus Katze Hund sieht gross rot".split(), strict=True))
STEPS = 4

pytestmark = pytest.mark.usefixtures("one_thread")




def corpus(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    words = [[rng.choice(WORDS) for _ in range(rng.randint(2, 5))] for _ in range(n)]
    path.write_text("".join(" ".join(w) + "\t" + " ".join(GERMAN[x] for x in w) + "\n" for w in words),
                    encoding="utf-8")


def write_recipe(folder: Path, *, match: str) -> Path:
    for split, n in (("train", 60), ("valid", 4), ("test", 4)):
        corpus(folder / f"{split}.tsv", n, seed=len(split))
    data = {
        "task": "translation", "out_dir": str(folder / "run"),
        "data": {"corpus": "files", "train": str(folder / "train.tsv"), "valid": str(folder / "valid.tsv"),
                 "test": str(folder / "test.tsv"), "vocab_size": 280, "max_tokens": 120, "bleu_sentences": 2},
        "model": {"preset": "rnn-attention-small", "overrides": {"d_model": 16, "n_layers": 1, "max_len": 32,
                                                                 "match": match, "dropout": 0.1}},
        "train": {"max_steps": STEPS, "eval_every": 100, "log_every": 1, "threads": 1, "optim": {"lr": 1e-2},
                  "schedule": {"name": "constant", "warmup": 1}},
        "decode": {"beam": 2, "max_len_b": 3},
    }
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recipe and its run, STEPS steps of an attention RNN (dropout on: the resumed run must restore the RNG)."""
    recipe = write_recipe(tmp_path_factory.mktemp("rnn"), match="general")
    assert main(["train", str(recipe), "--no-progress"]) == 0
    return recipe


def weights(run: Path) -> dict:
    return safetensors.torch.load_file(str(run / "last" / "model.safetensors"))


def test_rnn_recipe_trains_and_resumes_bitwise(trained: Path, tmp_path: Path) -> None:
    straight = Path(yaml.safe_load(trained.read_text())["out_dir"])
    saved = yaml.safe_load((straight / "last" / "config.yaml").read_text())
    assert (saved["family"], saved["model"], saved["config"]["match"]) == ("rnn", "RNNEncoderDecoder", "general")
    split = tmp_path / "split"
    assert main(["train", str(trained), f"out_dir={split}", f"train.max_steps={STEPS // 2}", "--no-progress"]) == 0
    resumed = ["train", str(trained), "--resume", f"out_dir={split}", f"train.max_steps={STEPS}", "--no-progress"]
    assert main(resumed) == 0  # the run was made with STEPS // 2: resuming to another length is said
    a, b = weights(straight), weights(split)
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    logged = [yaml.safe_load(line) for line in (split / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if "loss" in r] == list(range(1, STEPS + 1))  # continued, not restarted


def test_translate_evaluate_score_and_plot_attention(trained: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    checkpoint = str(Path(yaml.safe_load(trained.read_text())["out_dir"]) / "last")
    source = tmp_path / "in.txt"
    source.write_text("the cat sees a dog\nthe red house\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["translate", "--checkpoint", checkpoint, "--input", str(source), "--beam", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert main(["evaluate", "--checkpoint", checkpoint, "--split", "test", "--no-progress"]) == 0
    assert "BLEU = " in capsys.readouterr().out
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("the cat\tdie Katze\n", encoding="utf-8")
    assert main(["score", "--checkpoint", checkpoint, "--input", str(pairs)]) == 0
    assert "log p(target | source) = " in capsys.readouterr().out
    out = tmp_path / "map.png"
    assert main(["plot", "attention", "--checkpoint", checkpoint, "--text", "the big dog", "--target", "der Hund",
                 "--out", str(out)]) == 0
    assert out.stat().st_size > 0
    assert main(["report", str(Path(checkpoint).parent)]) == 0
    page = (Path(checkpoint).parent / "report.html").read_text(encoding="utf-8")
    assert "Sample translations" in page and "no attention picture" not in page


def test_the_server_translates_and_draws_its_attention(trained: Path) -> None:
    from tformer.serve.endpoints import attention, load_service, run_batch, translate
    from tformer.serve.limits import Limits

    checkpoint = Path(yaml.safe_load(trained.read_text())["out_dir"]) / "last"
    service = load_service(checkpoint, limits=Limits(), device="cpu")
    info = service.info()
    assert (info["family"], info["kind"], info["attention"]) == ("rnn", "seq2seq", "general")
    assert info["endpoints"] == ["translate", "attention"] and "n_heads" not in info["sizes"]
    job = translate.prepare(service, text="the red dog", texts=None, beam=2, lenpen=None)
    assert len(run_batch(service.loaded, [job.work])) == 1
    (answer,) = run_batch(service.loaded, [attention.prepare(service, text="the dog", target="der Hund").work])
    (alignment,) = answer["maps"]
    weights = alignment["weights"]  # (layers, heads, target tokens and </s>, source tokens), one layer and head
    assert alignment["part"] == "cross" and alignment["queries"][-1] == "</s>"
    assert [len(weights), len(weights[0])] == [1, 1] and len(weights[0][0]) == len(alignment["queries"])
    assert all(len(row) == len(alignment["keys"]) and abs(sum(row) - 1) < 1e-5 for row in weights[0][0])


def test_a_plain_rnn_has_no_map_and_no_export(trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Its decoder reads the source through the encoder's final state only; the exports are Transformers'."""
    recipe = write_recipe(tmp_path, match="none")
    assert main(["train", str(recipe), "train.max_steps=1", "--no-progress"]) == 0
    checkpoint = str(tmp_path / "run" / "last")
    capsys.readouterr()
    assert main(["plot", "attention", "--checkpoint", checkpoint, "--text", "the dog",
                 "--out", str(tmp_path / "a.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "attention maps need attention; this RNN encoder-decoder has match='none'" in err
    from tformer.serve import Limits
    from tformer.serve.endpoints import load_service
    from tformer.serve.errors import InputError

    service = load_service(checkpoint, limits=Limits(), device="cpu")
    assert "attention" not in service.endpoints
    with pytest.raises(InputError, match=r"/attention is not served for this seq2seq checkpoint \(attention maps "
                                         r"need attention; this RNN encoder-decoder has match='none'"):
        service.need("attention")  # the server's 404 says why, in check_exact's words
    for flag in ("--to-hf", "--to-ct2"):
        assert main(["convert", flag, checkpoint, "--out", str(tmp_path / flag.strip("-"))]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "RNNEncoderDecoder" in err, err
    assert not (tmp_path / "a.png").exists()


def test_the_old_key_attention_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`model.overrides.attention` named the MATCH before the key became `match`: a recipe or an override that
    still says it is told the new key, before anything is written."""
    recipe = write_recipe(tmp_path, match="none")
    capsys.readouterr()
    assert main(["train", str(recipe), "model.overrides.attention=dot", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == ("tformer: error: config key 'attention' is now 'match' for family rnn: the decoder's MATCH "
                   "function, one of none, dot, general, additive, cosine\n")
    assert not (tmp_path / "run").exists()
