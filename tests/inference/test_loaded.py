"""`tformer.inference.load`: one loader for trained checkpoints, which names the kind of model a checkpoint
holds and, for a command that cannot use it, which commands can; through `tformer.cli.main` that is one line
`tformer: error: ...` and exit code 2, before anything else is read (a run's recipe.yaml included)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import tformer
from tformer.cli import main
from tformer.decoding import Decoder
from tformer.inference import NEEDS, DecodeConfig, check_kind, load, run_decode
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


def test_load_returns_model_config_tokenizer_kind_and_layout(checkpoints: dict[str, Path]) -> None:
    for kind in KINDS:
        loaded = load(checkpoints[kind])
        assert loaded.model.config == loaded.config and not loaded.model.training
        assert loaded.tokenizer.vocab_size <= loaded.config.vocab_size
        assert loaded.kind == kind and loaded.path == str(checkpoints[kind])
        assert isinstance(loaded.decoder, Decoder) and loaded.decoder.model is loaded.model
        assert loaded.decoder.layout.model is loaded.model and loaded.decoder.graphs.model is loaded.model
    loaded = load(checkpoints["bert classifier"], command="classify")
    assert isinstance(loaded.model, tformer.BertClassifier)


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
    tokenizer = load(checkpoints["seq2seq"]).tokenizer
    config = tformer.preset("transformer-tiny", {**TINY, "vocab_size": tokenizer.vocab_size - 5})
    save_checkpoint(tmp_path / "ckpt", model=tformer.build_model(config), config=config, tokenizer=tokenizer)
    with pytest.raises(ValueError, match=f"checkpoint {tmp_path / 'ckpt'}: the tokenizer has {tokenizer.vocab_size} "
                                         f"tokens but the model's vocab_size={config.vocab_size}"):
        load(tmp_path / "ckpt")


def test_run_decode_reads_the_decode_section_beside_the_checkpoint(checkpoints: dict[str, Path],
                                                                   tmp_path: Path) -> None:
    path = checkpoints["seq2seq"]
    assert run_decode(path) == DecodeConfig()  # a recipe.yaml without a decode: section
    recipe = path.parent / "recipe.yaml"
    saved = recipe.read_text()
    try:
        recipe.write_text(saved + "decode: {beam: 2, lenpen: 0.6}\n")
        assert run_decode(path) == DecodeConfig(beam=2, lenpen=0.6)
        recipe.write_text(saved + "decode: {beam: 0}\n")
        with pytest.raises(ValueError, match=r"is not a valid recipe: decode.beam=0 must be at least 1"):
            run_decode(path)
    finally:
        recipe.write_text(saved)
    config = tformer.preset("transformer-tiny", {**TINY, "vocab_size": 300})
    save_checkpoint(tmp_path / "alone", model=tformer.build_model(config), config=config)
    assert run_decode(tmp_path / "alone") == DecodeConfig()  # no run directory around it: the defaults


def test_load_reads_config_yaml_once(checkpoints: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from tformer.inference import loaded as module

    reads = []
    real = module.load_config
    monkeypatch.setattr(module, "load_config", lambda path: reads.append(path) or real(path))
    assert load(checkpoints["gpt"], command="generate").kind == "gpt"
    assert reads == [checkpoints["gpt"]]
