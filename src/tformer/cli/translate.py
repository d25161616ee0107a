"""Translation commands:

    tformer translate --checkpoint DIR [-i F] [-o F] [--truncate] [--prefix] [--n-best K] [--json]
                      [decoding settings] [--device D] [--dtype T]
    tformer evaluate --checkpoint DIR [--split test] [--limit N] [--json] [--hyp-out F] [-o F]
                     [decoding settings] [--device D] [--dtype T] [--no-progress]
    tformer demo CONFIG.yaml|NAME [key=value ...] [--overwrite] [--no-progress]

The decoding settings are one flag per field of `decoding.DecodeConfig` (--beam, --lenpen, --stopping,
--batch-size, ...); those not given come from the run's recipe.yaml beside the checkpoint
(`inference.run_decode`), else the defaults. Input is read by `data.lines.line_batches` (one sentence
a line, split at "\n" only; from a pipe, each line as it arrives, translated with those already waiting) and
the translations written one a line: to stdout after each batch, or by `files.write_output`, which writes a
FIFO, a pipe (`--output >(cmd)`) or a symbolic link's target in place and a regular file atomically.
With `--n-best K`, each sentence's K best hypotheses, one a line as `LINE<TAB>SCORE<TAB>TEXT`
(`inference.translate_n_best`); with `--json`, one object a line of input: its source and its hypotheses.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tformer.cli import options, shared
from tformer.errors import UserError


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate lines (stdin to stdout, or files), each as it arrives")
    p.add_argument("--checkpoint", required=True, help="a translator's checkpoint directory, e.g. runs/demo/best")
    shared.add_input(p, "source sentences")
    shared.add_output(p, "translations")
    p.add_argument("--truncate", action="store_true",
                   help="translate the first max_len tokens of a longer sentence (default: refuse it)")
    p.add_argument("--prefix", action="store_true",
                   help="each line is source<TAB>prefix: the translation starts with the prefix, which is forced "
                        "and printed with it (a line without a tab has no prefix)")
    p.add_argument("--n-best", type=options.integer(), default=None, metavar="K",
                   help="print each sentence's K best hypotheses (1 to the beam), one a line as "
                        "LINE<TAB>SCORE<TAB>TEXT, best first (default: the best one's text only)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object a line of input: line, source, and hypotheses (text, score, log_prob, "
                        "eos), --n-best of them (default 1)")
    add_decode_args(p)
    shared.add_placement(p, int8=True)
    p.set_defaults(run=cmd_translate)

    p = sub.add_parser("evaluate", help="translate a split and print sacrebleu BLEU and chrF")
    p.add_argument("--checkpoint", required=True, help="a translator's checkpoint, with recipe.yaml beside it")
    p.add_argument("--split", default="test", choices=("train", "valid", "test"), help="the recipe's split to score")
    p.add_argument("--limit", type=options.integer(), default=None,
                   help="score only the first N sentences (default: all of the split)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object: scores, sacrebleu signatures, sentences, decoding settings")
    p.add_argument("--hyp-out", metavar="FILE",
                   help="also write the translations there, one a line; - for stdout (default: not written)")
    shared.add_output(p, "the report")
    add_decode_args(p)
    shared.add_placement(p, int8=True)
    shared.add_no_progress(p)
    p.set_defaults(run=cmd_evaluate)

    p = sub.add_parser("demo", help="train a translator, then score it on the test split")
    p.add_argument("config", help="YAML recipe file, or a shipped recipe's name (tformer recipes list), e.g. demo")
    p.add_argument("overrides", nargs="*", default=[],  # a default: optional, not in "the arguments are required"
                   help="key=value overrides, e.g. train.max_steps=100, before or after the options")
    p.add_argument("--overwrite", action="store_true", help="replace the run already in OUT_DIR")
    shared.add_no_progress(p, what="no progress bars; print each evaluation's metrics as a line")
    p.set_defaults(run=cmd_demo, unknown_hint=shared.overrides_hint)


def add_decode_args(p: argparse.ArgumentParser) -> None:
    """A flag for each decoding setting (`decoding.DecodeConfig`), over the run's recipe's."""
    from tformer.decoding.settings import DecodeConfig

    shared.add_settings(p, DecodeConfig, default="the recipe's decode: section, else {}")


def decode_args(args: argparse.Namespace) -> dict:
    from tformer.decoding.settings import DecodeConfig

    return shared.settings_given(args, DecodeConfig)


def cmd_translate(args: argparse.Namespace) -> int:
    from tformer.data.lines import source_name
    from tformer.inference import (
        check_n_best,
        load,
        run_decode,
        split_prefixes,
        translate,
        translate_n_best,
        with_given,
    )

    shared.check_output(args.output, inputs=[args.input])  # refused before decoding, not after
    decode = with_given(run_decode(args.checkpoint), **decode_args(args))
    if args.n_best is not None:
        check_n_best(args.n_best, beam=decode.beam, what="--n-best")
    loaded = load(args.checkpoint, command="translate", **shared.placement(args))
    check_unknown = shared.unknown_warner(loaded.tokenizer)

    def answer(lines: list[str], first: int) -> list[str]:
        sources, prefixes = split_prefixes(lines) if args.prefix else (lines, None)
        common = dict(prefixes=prefixes, truncate=args.truncate, where=source_name(args.input), first_line=first)
        if args.n_best is None and not args.json:
            out = translate(loaded.decoder, loaded.tokenizer, sources, decode, **common)
            check_unknown(sources + [p for p in prefixes or [] if p])  # once the batch passed its checks
            return out
        found = translate_n_best(loaded.decoder, loaded.tokenizer, sources, decode, n_best=args.n_best or 1,
                                 **common)
        check_unknown(sources + [p for p in prefixes or [] if p])
        if not args.json:  # fairseq's n-best lists: the line's number, the hypothesis's score, its text
            return [f"{first + k}\t{c.score:.4f}\t{c.text}" for k, hyps in enumerate(found) for c in hyps]
        return [json.dumps({"line": first + k, "source": source, **({"prefix": prefixes[k]} if args.prefix else {}),
                            "hypotheses": [vars(c) for c in hyps]}, ensure_ascii=False)
                for k, (source, hyps) in enumerate(zip(sources, found, strict=True))]

    shared.answer_lines(args, answer, max_batch=decode.batch_size)
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from tformer.data.lines import format_lines
    from tformer.files import write_output
    from tformer.inference import with_given
    from tformer.tasks.translation import evaluate_checkpoint, evaluation_report, run_recipe

    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit={args.limit} must be a positive integer")
    shared.check_output(args.output)
    shared.check_output(args.hyp_out, what="--hyp-out")
    recipe = run_recipe(args.checkpoint, command="evaluate", required=True)
    decode = with_given(recipe.decode, **decode_args(args))
    scores, pairs, hyps = evaluate_checkpoint(args.checkpoint, recipe.data, args.split, decode, limit=args.limit,
                                              progress=shared.progress(args), **shared.placement(args))
    if args.hyp_out is not None:  # "-": the translations, then the report, on stdout
        write_output(args.hyp_out, format_lines(hyps))
    if args.json:
        report = evaluation_report(scores, split=args.split, decode=decode, checkpoint=str(args.checkpoint))
        text = json.dumps(report, indent=1) + "\n"
    else:
        settings = [f"beam {decode.beam}", f"lenpen {decode.lenpen}"]
        if decode.no_repeat_ngram_size:
            settings.append(f"no repeated {decode.no_repeat_ngram_size}-grams")
        if decode.repetition_penalty != 1:
            settings.append(f"repetition penalty {decode.repetition_penalty}")
        text = f"{args.split}: {len(pairs)} sentences, {', '.join(settings)}\n{scores}\n"
    shared.write_text(args.output, text)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from tformer.cli.train import report_interrupt
    from tformer.runs import RunDir
    from tformer.tasks import load_recipe
    from tformer.tasks.translation import evaluate_checkpoint, save_test_results, train_translation
    from tformer.training.loop import stop_summary

    recipe = load_recipe(args.config, args.overrides)
    print(f"training {recipe.model.preset} {recipe.data.src}->{recipe.data.tgt} for up to "
          f"{recipe.train.time_budget_min} min / {recipe.train.max_steps} steps; run directory {recipe.out_dir}")
    start = time.perf_counter()
    state = train_translation(recipe, overwrite=args.overwrite, progress=shared.progress(args), test_split=True)
    if state.get("interrupted"):  # no test decoding of a model the person stopped
        return report_interrupt(state, recipe.out_dir, f"continue with `tformer train {args.config} "
                                f"{' '.join(args.overrides)} --resume`".replace("  ", " "))
    stopped = stop_summary(state)
    print(stopped)
    checkpoint = RunDir(recipe.out_dir).best
    scores, pairs, hyps = evaluate_checkpoint(checkpoint, recipe.data, "test", recipe.decode,
                                              progress=shared.progress(args))
    print(f"\ntest ({len(pairs)} sentences, beam {recipe.decode.beam}):\n{scores}\n")
    for i in range(0, len(pairs), max(1, len(pairs) // 5))[:5]:
        source, reference = pairs[i]
        print(f"source:    {source}\nreference: {reference}\ntformer:   {hyps[i]}\n")
    saved = save_test_results(Path(recipe.out_dir), "test", scores, hyps, state)
    print(f"test {scores.brief()}; training {stopped}; total {(time.perf_counter() - start) / 60:.1f} min; "
          f"results in {saved}")
    return 0
