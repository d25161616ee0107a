"""The `tformer` command.

    tformer train CONFIG.yaml [key=value ...] [--resume]
    tformer translate --checkpoint DIR [--input F] [--output F] [--beam N] [--lenpen X]
    tformer evaluate --checkpoint DIR [--split test] [--beam N] [--lenpen X]
    tformer demo CONFIG.yaml [key=value ...]
    tformer generate --checkpoint DIR --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P]
    tformer score --checkpoint DIR FILE [--per-token]
    tformer classify --checkpoint DIR [--input F] [--top N]
    tformer convert --from-hf DIR --out DIR   |   tformer convert --to-hf CHECKPOINT --out DIR
    tformer plot attention --checkpoint DIR --text TEXT [--target TEXT] [--part P] [--layer L] [--head H] [--out F]
    tformer plot positions [--max-len N] [--d-model D] [--heads H] [--out-dir DIR] [--format png|svg]
    tformer plot curves RUN_DIR [RUN_DIR ...] [--out FILE]
    tformer plot complexity [--results docs/complexity/results.json] [--out-dir DIR] [--format png|svg]
    tformer report RUN_DIR [--out FILE]

A user error (bad config, bad file, bad value) prints one line `tformer: error: ...` and exits with 2.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import NoReturn

import yaml

EXIT_USER_ERROR = 2


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0), or a usage error already printed as one line (2)
        return e.code if isinstance(e.code, int) else EXIT_USER_ERROR
    try:
        return args.run(args)
    except (ValueError, RuntimeError, OSError) as e:
        if isinstance(e, OSError) and e.filename and e.strerror:  # "path: Permission denied", not "[Errno 13] ..."
            message = f"{e.filename}: {e.strerror}"
        else:
            message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"tformer: error: {message}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("tformer: interrupted", file=sys.stderr)
        return 130


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error printed as every other user error is: one line `tformer: error: ...`
    (no usage block), exit code 2. Subcommand parsers inherit it."""

    def error(self, message: str) -> NoReturn:
        print(f"tformer: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USER_ERROR)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tformer", description="The Transformer family end to end.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a model from a YAML recipe")
    p.add_argument("config", help="YAML recipe, e.g. configs/demo.yaml")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.max_steps=100")
    p.add_argument("--resume", action="store_true", help="continue from OUT_DIR/last exactly")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=cmd_train)

    p = sub.add_parser("translate", help="translate lines (stdin to stdout, or files)")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--input", help="file of source sentences, one a line (default: stdin)")
    p.add_argument("--output", help="file for the translations (default: stdout)")
    add_decode_args(p)
    p.set_defaults(run=cmd_translate)

    p = sub.add_parser("evaluate", help="translate a split and print sacrebleu BLEU and chrF")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--split", default="test", choices=("train", "valid", "test"))
    p.add_argument("--limit", type=int, default=None, help="score only the first N sentences")
    add_decode_args(p)
    p.set_defaults(run=cmd_evaluate)

    p = sub.add_parser("demo", help="train a translator, then score it on the test split")
    p.add_argument("config", help="YAML recipe, e.g. configs/demo.yaml")
    p.add_argument("overrides", nargs="*")
    p.set_defaults(run=cmd_demo)

    p = sub.add_parser("generate", help="continue a prompt with a decoder-only model, streaming tokens")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=None, help="makes sampling reproducible")
    p.add_argument("--no-stop", action="store_true", help="do not stop at the end-of-text token")
    p.set_defaults(run=cmd_generate)

    p = sub.add_parser("score", help="log-likelihood, perplexity and bits per character of each line")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("file", help="text file: one sequence a line (encoder-decoder: source<TAB>target)")
    p.add_argument("--per-token", action="store_true", help="also print log p(x_t | x_<t) of every token")
    p.set_defaults(run=cmd_score)

    p = sub.add_parser("classify", help="label lines with a BERT classifier (stdin or a file)")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--input", help="file of texts, one a line (default: stdin)")
    p.add_argument("--top", type=int, default=1, help="print the N most likely labels of each line")
    p.set_defaults(run=cmd_classify)

    p = sub.add_parser("convert", help="Hugging Face checkpoints in and out")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--from-hf", metavar="DIR", help="a local Hugging Face model directory to import")
    group.add_argument("--to-hf", metavar="CHECKPOINT", help="a tformer checkpoint to export")
    p.add_argument("--out", required=True, help="output directory")
    p.set_defaults(run=cmd_convert)

    from tformer.viz.cli import add_commands

    add_commands(sub)
    return parser


def add_decode_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--beam", type=int, default=None, help="beam size (1 = greedy); default: the recipe's")
    p.add_argument("--lenpen", type=float, default=None, help="length penalty exponent")
    p.add_argument("--batch-size", type=int, default=None, help="sentences per decoding batch")


def decode_config(args: argparse.Namespace, checkpoint: Path):  # noqa: ANN201
    from tformer.tasks.translation import DecodeConfig

    recipe = run_recipe(checkpoint)
    base = vars(recipe.decode) if recipe is not None else {}
    given = {"beam": args.beam, "lenpen": args.lenpen, "batch_size": args.batch_size}
    return DecodeConfig(**{**base, **{k: v for k, v in given.items() if v is not None}})


def run_recipe(checkpoint: Path):  # noqa: ANN201
    """The recipe a checkpoint was trained with (RUN_DIR/recipe.yaml beside RUN_DIR/last), if any."""
    from tformer.config import from_dict
    from tformer.tasks.translation import TranslationRecipe

    path = Path(checkpoint).resolve().parent / "recipe.yaml"
    if not path.is_file():
        return None
    try:
        return from_dict(TranslationRecipe, yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    except (yaml.YAMLError, ValueError, TypeError, UnicodeDecodeError) as e:
        reason = " ".join(str(e).split()) or type(e).__name__
        raise ValueError(f"{path} (the run's recipe beside the checkpoint) is not a valid recipe: {reason}") from None


def cmd_train(args: argparse.Namespace) -> int:
    from tformer.tasks import load_recipe, train
    from tformer.training.distributed import launched_world
    from tformer.training.loop import stop_summary

    recipe = load_recipe(args.config, args.overrides)
    state = train(recipe, resume=args.resume, progress=not args.no_progress)
    if state.get("interrupted"):
        import signal

        print(f"tformer: {state['interrupted']} at step {state['step']}: saved {recipe.out_dir}/last; "
              f"continue with --resume", file=sys.stderr)
        return 128 + signal.Signals[state["interrupted"]].value
    if not launched_world().is_main:  # under torchrun, rank 0 reports
        return 0
    print(stop_summary(state))
    metrics = state.get("metrics", {})
    print(f"step {state['step']}: " + ", ".join(f"{k} {v:.3f}" for k, v in metrics.items()))
    print(f"checkpoints in {recipe.out_dir}/last and {recipe.out_dir}/best")
    return 0


def cmd_translate(args: argparse.Namespace) -> int:
    from tformer.tasks.translation import load_translator, translate

    if args.output:  # refuse an output that cannot be written before decoding, not after
        output = Path(args.output)
        nearest = next(p for p in output.parents if p.exists())  # the closest existing ancestor
        if output.is_dir():
            raise ValueError(f"--output {output} is a directory; give a file path")
        if not nearest.is_dir():
            raise ValueError(f"--output {output}: {nearest} is a file; give a file path in a directory")
        if not os.access(nearest, os.W_OK):
            raise ValueError(f"--output {output}: directory {nearest} is not writable")
    decode = decode_config(args, Path(args.checkpoint))
    model, tokenizer = load_translator(args.checkpoint)
    lines = read_lines(args.input)
    hyps = translate(model, tokenizer, lines, decode)
    text = "".join(h + "\n" for h in hyps)
    if args.output:
        from tformer.files import write_atomic

        write_atomic(Path(args.output), text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from tformer.tasks.translation import evaluate_checkpoint

    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit={args.limit} must be a positive integer")
    checkpoint = Path(args.checkpoint)
    recipe = run_recipe(checkpoint)
    if recipe is None:
        raise ValueError(f"no recipe.yaml beside {checkpoint}; evaluate needs the run directory's data settings")
    decode = decode_config(args, checkpoint)
    scores, pairs, hyps = evaluate_checkpoint(checkpoint, recipe.data, args.split, decode, limit=args.limit,
                                              progress=True)
    print(f"{args.split}: {len(pairs)} sentences, beam {decode.beam}, lenpen {decode.lenpen}")
    print(scores)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from tformer.tasks import load_recipe
    from tformer.tasks.translation import evaluate_checkpoint, save_test_results, train_translation
    from tformer.training.loop import stop_summary

    recipe = load_recipe(args.config, args.overrides)
    print(f"training {recipe.model.preset} {recipe.data.src}->{recipe.data.tgt} for up to "
          f"{recipe.train.time_budget_min} min / {recipe.train.max_steps} steps; run directory {recipe.out_dir}")
    start = time.perf_counter()
    state = train_translation(recipe)
    stopped = stop_summary(state)
    print(stopped)
    checkpoint = Path(recipe.out_dir) / "best"
    scores, pairs, hyps = evaluate_checkpoint(checkpoint, recipe.data, "test", recipe.decode, progress=True)
    print(f"\ntest ({len(pairs)} sentences, beam {recipe.decode.beam}):\n{scores}\n")
    for i in range(0, len(pairs), max(1, len(pairs) // 5))[:5]:
        source, reference = pairs[i]
        print(f"source:    {source}\nreference: {reference}\ntformer:   {hyps[i]}\n")
    saved = save_test_results(Path(recipe.out_dir), "test", scores, hyps, state)
    print(f"test {scores.brief()}; training {stopped}; total {(time.perf_counter() - start) / 60:.1f} min; "
          f"results in {saved}")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from tformer.config import GPTConfig
    from tformer.decoding import generate
    from tformer.decoding.sampling import check_sampling
    from tformer.tokenization import check_vocabulary, load_tokenizer
    from tformer.training.checkpoint import load_model

    if args.max_new_tokens < 0:
        raise ValueError(f"--max-new-tokens={args.max_new_tokens} must be >= 0")
    check_sampling(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    model, config = load_model(args.checkpoint)
    if not isinstance(config, GPTConfig):
        raise ValueError(f"checkpoint {args.checkpoint} holds a {type(config).__name__}; generate needs a GPT")
    tokenizer = load_tokenizer(args.checkpoint)
    check_vocabulary(tokenizer, config.vocab_size, where=f"checkpoint {args.checkpoint}")
    start = [] if config.bos_id is None else [config.bos_id]  # the token a document starts after
    prompt = start + tokenizer.encode(args.prompt)
    if not prompt:
        raise ValueError("the prompt is empty and the model has no bos_id to start from")
    if len(prompt) >= config.max_len:
        raise ValueError(f"the prompt is {len(prompt)} tokens{' with the start token' if start else ''}; the "
                         f"model's context max_len={config.max_len} leaves no room to generate (give at most "
                         f"{config.max_len - 1 - len(start)} tokens)")
    budget = min(args.max_new_tokens, config.max_len - len(prompt))
    stop = () if args.no_stop or config.eos_id is None else (config.eos_id,)
    produced: list[int] = []
    shown = ""
    sys.stdout.write(args.prompt)

    def stream(row: int, token: int) -> None:  # print the new text as each token arrives
        nonlocal shown
        produced.append(token)
        text = tokenizer.decode(produced)
        if not text.endswith("\ufffd"):  # wait for the rest of a multi-byte character
            sys.stdout.write(text[len(shown):])
            sys.stdout.flush()
            shown = text

    generate(model, [prompt], max_new_tokens=budget, temperature=args.temperature, top_k=args.top_k,
             top_p=args.top_p, stop_tokens=stop, seed=args.seed, on_token=stream)
    sys.stdout.write("\n")
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from tformer.config import GPTConfig, Seq2SeqConfig
    from tformer.decoding import conditional_log_probs, score_sequences
    from tformer.tokenization import check_vocabulary, load_tokenizer
    from tformer.training.checkpoint import load_model

    model, config = load_model(args.checkpoint)
    if not isinstance(config, GPTConfig | Seq2SeqConfig):
        raise ValueError(f"checkpoint {args.checkpoint} holds a {type(config).__name__}; score needs a GPT or "
                         "an encoder-decoder")
    tokenizer = load_tokenizer(args.checkpoint)
    check_vocabulary(tokenizer, config.vocab_size, where=f"checkpoint {args.checkpoint}")
    lines = [line for line in read_lines(args.file) if line.strip()]
    if not lines:
        raise ValueError(f"{args.file} has no non-empty line to score")
    if isinstance(config, Seq2SeqConfig):
        pairs = [line.split("\t") for line in lines]
        bad = next((i for i, p in enumerate(pairs) if len(p) != 2), None)
        if bad is not None:
            raise ValueError(f"{args.file}:{bad + 1}: expected source<TAB>target for an encoder-decoder")
        sources, targets = [tokenizer.encode(s) for s, _ in pairs], [tokenizer.encode(t) for _, t in pairs]
        for i, (src, tgt) in enumerate(zip(sources, targets, strict=True), 1):  # the target gets an end token
            if len(src) > config.max_len or len(tgt) + 1 > config.max_len:
                side, n = ("source", len(src)) if len(src) > config.max_len else ("target", len(tgt) + 1)
                raise ValueError(f"{args.file}:{i}: the {side} is {n} tokens, longer than the model's context "
                                 f"max_len={config.max_len}")
        scores = conditional_log_probs(model, sources, targets)
        for i, value in enumerate(scores, 1):
            print(f"{i}\tlog p(target | source) = {value:.4f}")
        return 0
    results = score_sequences(model, [tokenizer.encode(line) for line in lines], bos_id=config.bos_id)
    print("line\tlog_likelihood\ttokens\tperplexity\tbits_per_char\tbits_per_byte")
    for i, (line, r) in enumerate(zip(lines, results, strict=True), 1):
        bits = -r.log_prob / math.log(2)
        print(f"{i}\t{r.log_prob:.4f}\t{r.n_tokens}\t{r.perplexity:.3f}\t{bits / len(line):.4f}\t"
              f"{bits / len(line.encode()):.4f}")
        if args.per_token:
            ids = tokenizer.encode(line)  # without a bos_id the first token is context, not scored
            for token, lp in zip(ids[len(ids) - r.n_tokens :], r.token_log_probs.tolist(), strict=True):
                print(f"\t{tokenizer.decode([token])!r}\t{lp:.4f}")
    total = sum(r.log_prob for r in results)
    chars = sum(len(line) for line in lines)
    print(f"all\t{total:.4f}\t{sum(r.n_tokens for r in results)}\t\t{-total / math.log(2) / chars:.4f}")
    return 0


def cmd_classify(args: argparse.Namespace) -> int:
    from tformer.models import BertClassifier
    from tformer.tasks.classify import classify
    from tformer.tokenization import check_vocabulary, load_tokenizer
    from tformer.training.checkpoint import load_model

    if args.top < 1:
        raise ValueError(f"--top={args.top} must be a positive integer")
    model, config = load_model(args.checkpoint)
    if not isinstance(model, BertClassifier):
        raise ValueError(f"checkpoint {args.checkpoint} holds a {type(model).__name__}; classify needs a "
                         f"BertClassifier (train one with task: classify)")
    tokenizer = load_tokenizer(args.checkpoint)
    check_vocabulary(tokenizer, config.vocab_size, where=f"checkpoint {args.checkpoint}")
    names = list(config.label_names) or [f"LABEL_{i}" for i in range(config.n_labels)]
    lines = read_lines(args.input)
    probs = classify(model, tokenizer, lines)  # (N, C)
    top = probs.topk(min(args.top, probs.shape[1]), dim=-1)
    for values, indices in zip(top.values.tolist(), top.indices.tolist(), strict=True):
        print("\t".join(f"{names[i]}\t{p:.4f}" for p, i in zip(values, indices, strict=True)))
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from tformer.interop import checkpoint_to_hf, from_hf
    from tformer.training.checkpoint import save_checkpoint

    if args.from_hf:
        model, config = from_hf(args.from_hf)
        tokenizer = Path(args.from_hf) / "tokenizer.json"  # kept beside the weights, in the same atomic write
        save_checkpoint(Path(args.out), model=model, config=config,
                        tokenizer=CopiedFile(tokenizer) if tokenizer.is_file() else None)
        print(f"imported {type(model).__name__} from {args.from_hf} into {args.out}")
    else:
        model = checkpoint_to_hf(args.to_hf, args.out)  # with its tokenizer, if transformers can read it
        print(f"exported {type(model).__name__} from {args.to_hf} to {args.out}")
    return 0


class CopiedFile:
    """A tokenizer for `save_checkpoint` that is just a file to copy into the checkpoint's tokenizer/."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def save(self, directory: Path) -> None:
        shutil.copy(self.path, directory / self.path.name)


def read_lines(path: str | None) -> list[str]:
    if path is None:
        return [line.rstrip("\n") for line in sys.stdin]
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ValueError(f"input file {path} does not exist") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"input file {path} is not UTF-8 (byte {e.start})") from None


if __name__ == "__main__":
    sys.exit(main())
