"""Commands over a trained language model:

    tformer generate --checkpoint DIR [--prompt TEXT ...] [-i F] [-o F] [-n N] [--json] [--max-new-tokens N]
                     [--temperature T] [--top-k K] [--top-p P] [--seed S] [--no-stop] [--no-repeat-ngram-size N]
                     [--repetition-penalty X] [--draft DIR [--draft-tokens K]] [--compile] [--device D]
                     [--dtype T]
    tformer score --checkpoint DIR [FILE | -i F] [-o F] [--per-token] [--device D] [--dtype T]

`generate` continues each prompt (every --prompt, else each line of --input or stdin) N times
(`inference.sample_prompts`), streaming the text to stdout as it is sampled, or one JSON object a sample;
with --draft, decoded speculatively (`decoding.speculative`), the draft's acceptance rate on stderr (with
--json, in each object); with --compile, by the fixed-shape step through torch.compile (`decoding.Decoder`
with capture and compile: on the CPU about a quarter faster at batch 1, after a first call that compiles);
`score` prints a table of each line's scores (`inference.score`), or log p(target | source) under an
encoder-decoder.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from tformer.cli import options, shared
from tformer.decoding.settings import SampleConfig
from tformer.decoding.speculative import SpeculativeStats
from tformer.errors import UserError

if TYPE_CHECKING:
    from torch import nn

    from tformer.decoding import Decoder, TextScore


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="continue prompts with a decoder-only model, streaming tokens")
    p.add_argument("--checkpoint", required=True, help="a GPT checkpoint directory (trained here or converted)")
    p.add_argument("--prompt", action="append", type=options.text,
                   help="a prompt to continue; repeat it for several (default: the prompts of --input)")
    p.add_argument("-i", "--input", metavar="FILE",
                   help="prompts, one a line; - for stdin (default: stdin when no --prompt is given)")
    shared.add_output(p, "the samples")
    p.add_argument("-n", "--num-samples", type=options.integer(low=1), default=1, help="samples of each prompt")
    p.add_argument("--json", action="store_true",
                   help="one JSON object a line for each sample: prompt, its number, sample number, seed, text")
    p.add_argument("--max-new-tokens", type=options.integer(), default=200, help="tokens written after a prompt")
    shared.add_settings(p, SampleConfig)  # --temperature ... --seed (sample k overall uses SEED + k), --no-stop
    shared.add_draft(p)
    p.add_argument("--compile", action="store_true",
                   help="decode with a fixed-shape step compiled by torch.compile: faster tokens after a first call "
                        "that compiles for several seconds (not with --draft or --int8; default: off)")
    shared.add_placement(p, int8=True)
    p.set_defaults(run=cmd_generate)

    p = sub.add_parser("score", help="log-likelihood, perplexity and bits per character of each line")
    p.add_argument("--checkpoint", required=True, help="a GPT or encoder-decoder checkpoint directory")
    p.add_argument("file", nargs="?", help="text file: one sequence a line (encoder-decoder: source<TAB>target); "
                   "the same as --input")
    shared.add_input(p, "sequences to score (encoder-decoder: source<TAB>target)", positional=True)
    shared.add_output(p, "the table of scores")
    p.add_argument("--per-token", action="store_true", help="also print log p(x_t | x_<t) of every token")
    shared.add_placement(p, int8=True)
    p.set_defaults(run=cmd_score)


def cmd_generate(args: argparse.Namespace) -> int:
    from tformer.data.lines import read_lines
    from tformer.decoding.generate import check_max_new_tokens
    from tformer.inference import load, sample_prompts, with_given

    check_max_new_tokens(args.max_new_tokens, what="--max-new-tokens")
    settings = with_given(SampleConfig(), **shared.settings_given(args, SampleConfig))  # checked before the load
    shared.check_output(args.output, inputs=[args.input])
    shared.check_draft(args)
    check_compile(args)
    prompts = list(args.prompt or [])
    if args.input is not None or not prompts:
        prompts += read_lines(args.input)
    loaded = load(args.checkpoint, command="generate", **shared.placement(args))
    if args.compile:
        loaded.decoder = compiled(loaded.model)
    draft = shared.draft_of(args, loaded)
    stream = not args.json and shared.is_std(args.output)  # text to stdout: each piece as it is sampled
    total, out, drafted = len(prompts) * args.num_samples, [], SpeculativeStats()
    samples = sample_prompts(loaded.decoder, loaded.tokenizer, prompts, settings, num_samples=args.num_samples,
                             max_new_tokens=args.max_new_tokens,
                             on_text=(lambda _prompt, _sample, piece: shared.write_text(shared.STD, piece))
                             if stream else None, draft=draft)
    shared.unknown_warner(loaded.tokenizer)(prompts)  # once every prompt has passed its checks
    for k, s in enumerate(samples):
        if s.stats is not None:
            drafted.add(s.stats)
        if args.json:
            fields = {"prompt": prompts[s.prompt], "prompt_number": s.prompt + 1, "sample": s.sample + 1,
                      "seed": s.seed, "text": s.text}
            if s.stats is not None:
                fields["speculative"] = s.stats.as_dict()
            text = json.dumps(fields, ensure_ascii=False) + "\n"
        else:  # the prompt and its continuation, a blank line between samples
            text = ("" if stream else prompts[s.prompt] + s.text) + "\n" + ("\n" if k < total - 1 else "")
        if shared.is_std(args.output):
            shared.write_text(shared.STD, text)
        out.append(text)
    if not shared.is_std(args.output):
        shared.write_text(args.output, "".join(out))
    if draft is not None and not args.json:
        print(f"tformer generate: {drafted.summary()}", file=sys.stderr)
    return 0


def check_compile(args: argparse.Namespace) -> None:
    """--compile with --draft (speculative decoding runs the dynamic steps) or --int8: refused before the load."""
    if args.compile and args.draft is not None:
        raise UserError("--compile and --draft cannot be combined: speculative decoding runs the dynamic steps; "
                        "drop one")
    if args.compile and args.int8:
        raise UserError("--compile and --int8 cannot be combined: the int8 layers are not compiled; drop one")


def compiled(model: nn.Module) -> Decoder:
    """`model`'s decoder with the fixed-shape step through torch.compile; a UserError for a model whose
    decoding cannot take fixed shapes (`decoding.captured.capture_problem`)."""
    from tformer.decoding import Decoder
    from tformer.decoding.captured import capture_problem

    problem = capture_problem(model)
    if problem is not None:
        raise UserError(f"--compile cannot compile this model's decoding: {problem}; generate without --compile")
    return Decoder(model, capture=True, compile=True)


def cmd_score(args: argparse.Namespace) -> int:
    from tformer.data.lines import source_name
    from tformer.inference import load, read_scored_lines, score_lines, score_pairs, token_scores
    from tformer.inference.score import total_score

    if args.file is not None and not shared.is_std(args.input):
        raise UserError(f"give the file to score once: as FILE ({args.file}) or as --input ({args.input})")
    source = args.file if args.file is not None else args.input
    shared.check_output(args.output, inputs=[source])
    loaded = load(args.checkpoint, command="score", **shared.placement(args))
    model, tokenizer = loaded.model, loaded.tokenizer
    numbered = read_scored_lines(source)  # {line number in the file: line}, the empty lines left out
    numbers, lines = list(numbered), list(numbered.values())
    warn = shared.unknown_warner(tokenizer)  # called once the lines passed their checks: a refusal is one line
    rows = []
    if loaded.kind == "seq2seq":  # an encoder-decoder, a Transformer's or an RNN's
        for i, value in zip(numbers, score_pairs(model, tokenizer, lines, where=source_name(source), numbers=numbers),
                            strict=True):
            rows.append(f"{i}\tlog p(target | source) = {value:.4f}")
        warn([side for line in lines for side in line.split("\t")])
        shared.write_text(args.output, "".join(row + "\n" for row in rows))
        return 0
    results = score_lines(model, tokenizer, lines)
    warn(lines)
    rows.append("line\tlog_likelihood\ttokens\tperplexity\tbits_per_char\tbits_per_byte")
    for i, line, r in zip(numbers, lines, results, strict=True):
        rows.append(score_row(str(i), r))
        if args.per_token:
            rows += [f"\t{token!r}\t{lp:.4f}" for token, lp in token_scores(tokenizer, line, r)]
    rows.append(score_row("all", total_score(results)))  # the lines together: every column, as a line's
    shared.write_text(args.output, "".join(row + "\n" for row in rows))
    return 0


def score_row(name: str, r: TextScore) -> str:
    """One row of `score`'s table: a line's scores (a `TextScore`), or those of all the lines together."""
    return (f"{name}\t{r.log_prob:.4f}\t{r.n_tokens}\t{r.perplexity:.3f}\t{r.bits_per_char:.4f}\t"
            f"{r.bits_per_byte:.4f}")
