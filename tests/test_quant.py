"""`tformer.quant`: int8 weight quantization at load. On tiny seeded models of the three families the int8
model keeps every output shape and agrees with fp32 within the stated tolerance (docs/int8.md): logits within
TOL of the largest fp32 logit, cosine >= COSINE; greedy tokens equal wherever fp32's top two logits differ by
more than twice the largest logit difference. Cached decoding, beam search and generation run on it, the
checkpoint on disk is untouched, and `--int8` runs through `tformer.cli.main`."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

import tformer
from tformer.cli import main
from tformer.decoding import beam_search, generate, greedy
from tformer.inference import load
from tformer.quant import Int8Linear, count_int8, quantize
from tformer.tokenization import BPETokenizer, CharTokenizer, WordPieceTokenizer
from tformer.training.checkpoint import save_checkpoint

TOL = 0.05  # max |int8 - fp32| logit over max |fp32| logit
COSINE = 0.998  # of the flattened logits
SIZES = {"d_model": 64, "d_ff": 256, "n_heads": 4, "n_layers": 2, "max_len": 64}
TEXT = ["the cat sees the dog", "a big red house", "the small blue cat sleeps", "a dog runs to the house"]


def models() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    seq2seq = tformer.build_model(tformer.preset("transformer-tiny", {**SIZES, "vocab_size": 300}))
    gpt = tformer.build_model(tformer.preset("gpt-tiny", {**SIZES, "vocab_size": 300}))
    bert = tformer.BertClassifier(tformer.preset("bert-tiny", {**SIZES, "vocab_size": 300, "n_labels": 3}))
    return {"seq2seq": seq2seq.eval(), "gpt": gpt.eval(), "bert classifier": bert.eval()}


def logits(name: str, model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(ids, ids) if name == "seq2seq" else model(ids)


def agree(ref: torch.Tensor, out: torch.Tensor) -> None:
    assert out.shape == ref.shape and out.dtype == ref.dtype == torch.float32
    assert (out - ref).abs().max() <= TOL * ref.abs().max()
    assert F.cosine_similarity(out.flatten(), ref.flatten(), dim=0) >= COSINE
    top2 = ref.topk(2, dim=-1).values
    sure = top2[..., 0] - top2[..., 1] > 2 * (out - ref).abs().max()  # where fp32's choice is clear
    assert (out.argmax(-1) == ref.argmax(-1))[sure].all()


@pytest.mark.parametrize("name", ["seq2seq", "gpt", "bert classifier"])
def test_logits_keep_their_shape_and_agree_with_fp32(name: str) -> None:
    model = models()[name]
    ids = torch.randint(4, 300, (3, 12))
    ref = logits(name, model, ids)
    int8 = quantize(copy.deepcopy(model), "int8", min_weights=0)
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert count_int8(int8) == linears and not any(isinstance(m, torch.nn.Linear) for m in int8.modules())
    agree(ref, logits(name, int8, ids))


def test_small_layers_stay_fp32_and_embeddings_are_kept() -> None:
    model = models()["gpt"]
    embedding = model.embed.tokens.weight.clone()
    quantize(model, "int8", min_weights=64 * 256)  # the MLP's two layers and the output layer (300 x 64)
    kinds = {name: type(m) for name, m in model.named_modules()}
    assert kinds["decoder.layers.0.mlp.fc_in"] is Int8Linear and kinds["lm_head"] is Int8Linear
    assert kinds["decoder.layers.0.mixer.q_proj"] is torch.nn.Linear  # 64 x 64 < 64 x 256
    assert torch.equal(model.embed.tokens.weight, embedding)


def test_cached_greedy_beam_and_generation_run_and_agree_with_fp32() -> None:
    built = models()
    seq2seq, gpt = built["seq2seq"], built["gpt"]
    src = torch.randint(4, 300, (4, 9))
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12]]
    fp32 = (greedy(seq2seq, src, max_len_b=8), generate(gpt, prompts, max_new_tokens=8, temperature=0))
    q_seq2seq, q_gpt = (quantize(copy.deepcopy(m), "int8", min_weights=0) for m in (seq2seq, gpt))
    tokens = (greedy(q_seq2seq, src, max_len_b=8), generate(q_gpt, prompts, max_new_tokens=8, temperature=0))
    assert tokens == fp32  # these seeded models' choices are clear (trained ones: BLEU in docs/int8.md)
    beams = beam_search(q_seq2seq, src, beam=3, max_len_b=8, n_best=2)
    assert len(beams) == 4 and all(len(b) == 2 for b in beams)
    assert greedy(q_seq2seq, src, max_len_b=8, use_cache=False) == fp32[0]  # the cache changes nothing


def test_an_unknown_mode_is_refused_naming_the_allowed_ones(checkpoints: dict[str, Path],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"^unknown quantization 'int4'; allowed: int8$"):
        quantize(models()["gpt"], "int4")
    monkeypatch.setattr("tformer.inference.loaded.build_saved", lambda *a: pytest.fail("loaded"))
    with pytest.raises(ValueError, match=r"^unknown quantization 'int4'; allowed: int8$"):  # before loading
        load(checkpoints["gpt"], quantization="int4")


def test_a_model_off_the_cpu_or_not_fp32_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^int8 quantization runs on the CPU only; the model is on meta$"):
        quantize(models()["gpt"].to("meta"), "int8")
    with pytest.raises(ValueError, match=r"^int8 quantization starts from an fp32 model; this one holds bfloat16$"):
        quantize(models()["gpt"].to(torch.bfloat16), "int8")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("int8")
    bpe = BPETokenizer.train(TEXT * 3, vocab_size=280)
    chars = CharTokenizer.train(TEXT)
    pieces = WordPieceTokenizer.train(TEXT * 3, vocab_size=100)
    torch.manual_seed(0)
    configs = {"seq2seq": (tformer.preset("transformer-tiny", {**SIZES, "vocab_size": bpe.vocab_size}), bpe),
               "gpt": (tformer.preset("gpt-tiny", {**SIZES, "vocab_size": chars.vocab_size, "bos_id": chars.eos_id,
                                                   "eos_id": chars.eos_id}), chars),
               "classifier": (tformer.preset("bert-tiny", {**SIZES, "vocab_size": pieces.vocab_size, "n_labels": 2}),
                              pieces)}
    out = {}
    for kind, (config, tokenizer) in configs.items():
        model = tformer.BertClassifier(config) if kind == "classifier" else tformer.build_model(config)
        save_checkpoint(root / kind / "best", model=model, config=config, tokenizer=tokenizer)
        out[kind] = root / kind / "best"
    (root / "seq2seq" / "recipe.yaml").write_text(yaml.safe_dump({"task": "translation", "out_dir": "x",
                                                                  "data": {"corpus": "bible"}}))
    return out


def digests(path: Path) -> dict[str, str]:
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(path.rglob("*")) if f.is_file()}


def test_load_quantizes_in_memory_and_leaves_the_files_fp32(checkpoints: dict[str, Path],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tformer.quant.MIN_WEIGHTS", 0)
    before = digests(checkpoints["gpt"])
    model = load(checkpoints["gpt"], command="generate", quantization="int8").model
    assert count_int8(model) > 0
    assert digests(checkpoints["gpt"]) == before
    fp32 = load(checkpoints["gpt"], command="generate").model
    assert count_int8(fp32) == 0 and all(p.dtype == torch.float32 for p in fp32.parameters())


@pytest.mark.parametrize(("kind", "args"), [
    ("seq2seq", ["translate", "--beam", "2"]), ("seq2seq", ["translate", "--beam", "1"]),
    ("gpt", ["generate", "--prompt", "the", "--max-new-tokens", "5", "--temperature", "0"]),
    ("classifier", ["classify", "--top", "2"]), ("gpt", ["score", "LINES"]),
    ("seq2seq", ["evaluate", "--limit", "2", "--beam", "1"])])
def test_int8_through_the_command_line(kind: str, args: list[str], checkpoints: dict[str, Path], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr("tformer.quant.MIN_WEIGHTS", 0)  # every layer, however small
    quantized = []
    monkeypatch.setattr("tformer.inference.loaded.quantize", lambda m, mode: quantized.append(quantize(m, mode)))
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("the cat\na big house\n"))
    before = digests(checkpoints[kind])
    (tmp_path / "lines.txt").write_text("the cat\na big house\n", encoding="utf-8")
    args = [str(tmp_path / "lines.txt") if a == "LINES" else a for a in args]
    assert main([args[0], "--checkpoint", str(checkpoints[kind]), *args[1:], "--int8"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err and out.strip()
    if args[0] in ("translate", "classify"):
        assert len(out.strip().splitlines()) == 2
    if args[0] == "score":  # a header, a line each, the total
        assert len(out.strip().splitlines()) == 4
    assert len(quantized) == 1 and count_int8(quantized[0]) > 0
    assert digests(checkpoints[kind]) == before


def test_serve_quantizes_at_load(checkpoints: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from tformer.serve.endpoints import load_service
    from tformer.serve.limits import Limits

    monkeypatch.setattr("tformer.quant.MIN_WEIGHTS", 0)
    service = load_service(checkpoints["gpt"], limits=Limits(), device="cpu", quantization="int8")
    assert count_int8(service.model) > 0
    plain = load_service(checkpoints["gpt"], limits=Limits(), device="cpu")
    assert count_int8(plain.model) == 0
    info, plain_info = service.info(), plain.info()  # /info says how the model was loaded, and counts it whole
    assert (info["quantization"], info["dtype"], plain_info["quantization"]) == ("int8", "float32", None)
    assert info["sizes"]["parameters"] == plain_info["sizes"]["parameters"] > 0


@pytest.mark.parametrize("command", [["serve"], ["generate", "--prompt", "In"], ["score", "-i", "-"]])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_int8_off_the_cpu_or_in_a_half_type_is_refused_before_loading(
        checkpoints: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
        command: list[str], dtype: str) -> None:
    device = "cuda" if dtype == "float32" else "cpu"
    fake = (lambda name, what, mps=False: torch.device("cuda", 0)) if device == "cuda" else None
    if fake is not None:  # a GPU that this machine does not have
        monkeypatch.setattr("tformer.data.device.resolve_device", fake)
    monkeypatch.setattr("tformer.inference.loaded.build_saved", lambda *a, **k: pytest.fail("loaded"))
    argv = [command[0], "--checkpoint", str(checkpoints["gpt"]), *command[1:], "--device", device, "--dtype", dtype,
            "--int8"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (f"tformer: error: --int8 runs in float32 on the CPU only (got --device {device} "
                                       f"--dtype {dtype}); drop --int8, or use --device cpu --dtype float32\n")
