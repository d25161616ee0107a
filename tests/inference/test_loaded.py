"""`tformer.tasks.base`: one loader for trained checkpoints, which names the kind of model a checkpoint holds
and, for a command that cannot use it, which commands can; through `tformer.cli.main` that is one line
`tformer: error: ...` and exit code 2, before anything else is read (a run's recipe.yaml included)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import tformer
from tformer.cli import main
from tformer.tasks import load_checkpoint
from tformer.tasks.base import NEEDS, check_kind
from tformer.tasks.translation import training_rates
from tformer.tokenization import BPETokenizer, CharTokenizer, WordPieceTokenizer
from tformer.training.checkpoint import save_checkpoint

TINY = {"d_model": 16, "d_ff": 32, "n_heads": 2, "n_layers": 1, "max_len": 32}
TEXT = ["the cat sees the dog", "a big red house", "the small blue cat sleeps"]
KINDS = ("seq2seq", "gpt", "bert", "bert classifier")
ARGS = {"translate": [], "evaluate": [], "generate": ["--prompt", "the"], "score": ["lines.txt"], "classify": []}
# what each refusal says the checkpoint is for
USE = {"seq2seq": "; a seq2seq checkpoint is for tformer translate / evaluate / score",
       "gpt": "; a gpt checkpoint is for tformer generate / score",
       "bert": "; a bert checkpoint is for fine-tuning a classifier (task: classify, model.init_from)",
       "bert classifier": "; a bert classifier checkpoint is for tformer classify"}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An untrained checkpoint of each kind, each in a run directory (RUN/best) beside a recipe.yaml of its
    task, as `tformer train` leaves it."""
    root = tmp_path_factory.mktemp("kinds")
    bpe = BPETokenizer.train(TEXT * 3, vocab_size=280)
    chars = CharTokenizer.train(TEXT)
    pieces = WordPieceTokenizer.train(TEXT * 3, vocab_size=100)
    seq2seq = tformer.preset("transformer-tiny", {**TINY, "vocab_size": bpe.vocab_size})
    gpt = tformer.preset("gpt-tiny", {**TINY, "vocab_size": chars.vocab_size, "bos_id": chars.eos_id,
                                      "eos_id": chars.eos_id})
    bert = tformer.preset("bert-tiny", {**TINY, "vocab_size": pieces.vocab_size})
    classifier = tformer.preset("bert-tiny", {**TINY, "vocab_size": pieces.vocab_size, "n_labels": 2})
    built = {"seq2seq": (tformer.build_model(seq2seq), seq2seq, bpe, "translation", {"corpus": "bible"}),
             "gpt": (tformer.build_model(gpt), gpt, chars, "lm", {"corpus": "files", "paths": ["t.txt"],
                                                                    "valid_paths": ["t.txt"]}),
             "bert": (tformer.build_model(bert), bert, pieces, "bert", {"corpora": ["bbc"]}),
             "bert classifier": (tformer.BertClassifier(classifier), classifier, pieces, "classify",
                                 {"corpus": "bbc"})}
    out = {}
    for kind, (model, config, tokenizer, task, data) in built.items():
        run = root / kind.replace(" ", "-")
        save_checkpoint(run / "best", model=model, config=config, tokenizer=tokenizer)
        (run / "recipe.yaml").write_text(yaml.safe_dump({"task": task, "out_dir": str(run), "data": data}))
        out[kind] = run / "best"
    return out


def test_load_checkpoint_returns_model_config_and_tokenizer(checkpoints: dict[str, Path]) -> None:
    for kind in KINDS:
        model, config, tokenizer = load_checkpoint(checkpoints[kind])
        assert model.config == config and not model.training
        assert tokenizer.vocab_size <= config.vocab_size
    model, _, _ = load_checkpoint(checkpoints["bert classifier"], command="classify")
    assert isinstance(model, tformer.BertClassifier)


def test_every_command_takes_its_own_kinds(checkpoints: dict[str, Path]) -> None:
    for command, (kinds, _) in NEEDS.items():
        for kind in kinds:
            check_kind(checkpoints[kind], command)  # no error


WRONG = [(kind, command) for command, (kinds, _) in NEEDS.items() for kind in KINDS if kind not in kinds]


@pytest.mark.parametrize(("kind", "command"), WRONG, ids=[f"{c}-a-{k.replace(' ', '-')}" for k, c in WRONG])
def test_a_wrong_kind_is_named_with_the_commands_that_take_it(kind: str, command: str, checkpoints: dict[str, Path],
                                                               tmp_path: Path, capsys: pytest.CaptureFixture,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("lines.txt").write_text("the cat\n", encoding="utf-8")
    path = checkpoints[kind]
    capsys.readouterr()
    assert main([command, "--checkpoint", str(path), *ARGS[command]]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "Traceback" not in out + err, err
    assert err.startswith(f"tformer: error: checkpoint {path} holds a "), err
    assert f"; {command} needs " in err and err.rstrip().endswith(USE[kind]), err
    assert "unknown config key" not in err  # the run's recipe.yaml (of another task) is not read first


def test_the_refusals_read_as_before(checkpoints: dict[str, Path]) -> None:
    """The words of the error catalogue (docs/errors.md), then what the checkpoint is for."""
    cases = {("gpt", "translate"): "holds a GPTConfig, not an encoder-decoder; translate needs a seq2seq checkpoint",
             ("seq2seq", "generate"): "holds a Seq2SeqConfig; generate needs a GPT; ",
             ("gpt", "classify"): "holds a GPT; classify needs a BertClassifier (train one with task: classify); ",
             ("bert classifier", "score"): "holds a BertConfig; score needs a GPT or an encoder-decoder; "}
    for (kind, command), words in cases.items():
        with pytest.raises(ValueError, match="^checkpoint ") as caught:
            check_kind(checkpoints[kind], command)
        assert words in str(caught.value) and str(caught.value).endswith(USE[kind])


def test_a_tokenizer_larger_than_the_model_is_refused(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    _, _, tokenizer = load_checkpoint(checkpoints["seq2seq"])
    config = tformer.preset("transformer-tiny", {**TINY, "vocab_size": tokenizer.vocab_size - 5})
    save_checkpoint(tmp_path / "ckpt", model=tformer.build_model(config), config=config, tokenizer=tokenizer)
    with pytest.raises(ValueError, match=f"checkpoint {tmp_path / 'ckpt'}: the tokenizer has {tokenizer.vocab_size} "
                                         f"tokens but the model's vocab_size={config.vocab_size}"):
        load_checkpoint(tmp_path / "ckpt")


def test_training_rates_median_and_overall() -> None:
    records = [{"step": 50, "tokens_per_s": 1000.0, "elapsed_s": 1.0},  # 1,000 tokens in 1 s
               {"step": 100, "tokens_per_s": 100.0, "elapsed_s": 11.0},  # 1,000 tokens in 10 s: a busy machine
               {"step": 100, "eval/bleu": 3.0},
               {"step": 150, "tokens_per_s": 1000.0, "elapsed_s": 12.0}]  # 1,000 tokens in 1 s
    median, overall = training_rates(records)
    assert median == 1000.0 and overall == 3000.0 / 12.0
    assert training_rates([{"step": 1, "eval/bleu": 1.0}]) == (None, None)
