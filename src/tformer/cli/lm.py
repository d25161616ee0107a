"""Commands over a trained language model:

    tformer generate --checkpoint DIR --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K]
                     [--top-p P] [--seed S] [--no-stop]
    tformer score --checkpoint DIR FILE [--per-token]

`generate` streams the continuation to stdout as it is sampled (`tasks.lm.continue_prompt`); `score` prints
a table of each line's scores (`tasks.scoring`), or log p(target | source) under an encoder-decoder.
"""

from __future__ import annotations

import argparse
import math
import sys

from tformer.cli import options


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="continue a prompt with a decoder-only model, streaming tokens")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--prompt", required=True, type=options.text)
    p.add_argument("--max-new-tokens", type=options.integer(), default=200)
    p.add_argument("--temperature", type=options.real(), default=1.0, help="0 = greedy")
    p.add_argument("--top-k", type=options.integer(), default=None)
    p.add_argument("--top-p", type=options.real(), default=None)
    p.add_argument("--seed", type=options.SEED, default=None, help="makes sampling reproducible (0 .. 2**64 - 1)")
    p.add_argument("--no-stop", action="store_true", help="do not stop at the end-of-text token")
    p.add_argument("--int8", action="store_true", help=options.INT8_HELP)
    p.set_defaults(run=cmd_generate)

    p = sub.add_parser("score", help="log-likelihood, perplexity and bits per character of each line")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("file", help="text file: one sequence a line (encoder-decoder: source<TAB>target)")
    p.add_argument("--per-token", action="store_true", help="also print log p(x_t | x_<t) of every token")
    p.add_argument("--int8", action="store_true", help=options.INT8_HELP)
    p.set_defaults(run=cmd_score)


def cmd_generate(args: argparse.Namespace) -> int:
    from tformer.decoding.sampling import check_sampling
    from tformer.tasks.base import load_checkpoint
    from tformer.tasks.lm import continue_prompt

    if args.max_new_tokens < 0:
        raise ValueError(f"--max-new-tokens={args.max_new_tokens} must be >= 0")
    check_sampling(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)  # before the load
    model, _, tokenizer = load_checkpoint(args.checkpoint, command="generate",
                                          quantization="int8" if args.int8 else None)

    def show(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    continue_prompt(model, tokenizer, args.prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                    top_k=args.top_k, top_p=args.top_p, seed=args.seed, stop_at_eos=not args.no_stop, on_text=show)
    sys.stdout.write("\n")
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from tformer.config import Seq2SeqConfig
    from tformer.tasks.base import load_checkpoint
    from tformer.tasks.scoring import read_scored_lines, score_lines, score_pairs, token_scores

    model, config, tokenizer = load_checkpoint(args.checkpoint, command="score",
                                               quantization="int8" if args.int8 else None)
    numbered = read_scored_lines(args.file)  # {line number in the file: line}, the empty lines left out
    numbers, lines = list(numbered), list(numbered.values())
    if isinstance(config, Seq2SeqConfig):
        for i, value in zip(numbers, score_pairs(model, tokenizer, lines, where=args.file, numbers=numbers),
                            strict=True):
            print(f"{i}\tlog p(target | source) = {value:.4f}")
        return 0
    results = score_lines(model, tokenizer, lines)
    print("line\tlog_likelihood\ttokens\tperplexity\tbits_per_char\tbits_per_byte")
    for i, line, r in zip(numbers, lines, results, strict=True):
        print(f"{i}\t{r.log_prob:.4f}\t{r.n_tokens}\t{r.perplexity:.3f}\t{r.bits_per_char:.4f}\t{r.bits_per_byte:.4f}")
        if args.per_token:
            for token, lp in token_scores(tokenizer, line, r):
                print(f"\t{token!r}\t{lp:.4f}")
    total = sum(r.log_prob for r in results)
    chars = sum(r.n_chars for r in results)
    print(f"all\t{total:.4f}\t{sum(r.n_tokens for r in results)}\t\t{-total / math.log(2) / chars:.4f}")
    return 0
