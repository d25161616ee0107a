"""Pictures and reports (`tformer.viz`):

    tformer plot attention --checkpoint DIR --text TEXT [--target TEXT] [--part P] [--layer L] [--head H]
                           [--query WORD] [-o FILE] [--device D] [--dtype T]
    tformer plot positions [--max-len N] [--d-model D] [--heads H] [--out-dir DIR] [--format png|svg]
    tformer plot curves RUN_DIR [RUN_DIR ...] [-o FILE]
    tformer plot complexity [--results docs/bench/complexity/results.json] [--out-dir DIR] [--format png|svg]
    tformer report RUN_DIR [-o FILE]

A FILE's suffix picks the format (.png or .svg; PNG for - (stdout), a FIFO or a device); `-o`, `--output` and
`--out` are one option. Every file and folder named is checked before any work (`files.check_output`,
`files.check_output_dir`) and written by the one writer (`files.write_output`). Bad values raise UserError,
which `tformer.cli.main` prints as one line `tformer: error: ...` with exit code 2. Each command prints the
paths it wrote (nothing when the picture itself went to stdout).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tformer.cli import options, shared


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register `plot` (with attention, positions, curves, complexity) and `report` on the `tformer` parser."""
    plot = sub.add_parser("plot", help="pictures: attention maps, positional encodings, training curves, complexity")
    plots = plot.add_subparsers(dest="plot", required=True)

    p = plots.add_parser("attention", help="attention weights of every layer and head for one text")
    p.add_argument("--checkpoint", required=True, help="any checkpoint: encoder-decoder, GPT or BERT")
    p.add_argument("--text", required=True, type=options.text, help="the input (an encoder-decoder's source sentence)")
    p.add_argument("--target", type=options.text,
                   help="encoder-decoder: the target sentence (default: the model's greedy translation)")
    p.add_argument("--part", help="only this attention: encoder, decoder or cross (default: all the model has)")
    p.add_argument("--layer", type=options.integer(), help="only this layer (0-based; default: every layer)")
    p.add_argument("--head", type=options.integer(), help="only this head (0-based; default: every head)")
    p.add_argument("--query", type=options.text, metavar="WORD",
                   help="only where this word attends: its row in every layer and head over the key words, drawn "
                        "and printed (a word of several tokens: their rows' mean; the part: the first, an "
                        "encoder-decoder's encoder, unless --part; default: none: every row)")
    p.add_argument("-o", "--output", "--out", dest="out", default="attention.png", metavar="FILE",
                   help="output .png or .svg, or - for stdout (PNG)")
    shared.add_placement(p)
    p.set_defaults(run=cmd_attention)

    p = plots.add_parser("positions", help="sinusoidal table and similarity, RoPE scores, ALiBi biases")
    p.add_argument("--max-len", type=options.integer(), default=128, help="positions n (default 128)")
    p.add_argument("--d-model", type=options.integer(), default=128, help="width of the sinusoids and of the RoPE head")
    p.add_argument("--heads", type=options.integer(), default=8, help="ALiBi heads (default 8)")
    add_out_dir(p)
    p.set_defaults(run=cmd_positions)

    p = plots.add_parser("curves", help="loss, learning rate, tokens/s and validation metrics of runs, overlaid")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories holding metrics.jsonl")
    p.add_argument("-o", "--output", "--out", dest="out", default="curves.png", metavar="FILE",
                   help="output .png or .svg, or - for stdout (PNG)")
    p.set_defaults(run=cmd_curves)

    p = plots.add_parser("complexity", help="the complexity benchmark's results, log-log with fitted slopes")
    p.add_argument("--results", default="docs/bench/complexity/results.json", help="benchmarks/complexity.py output")
    add_out_dir(p)
    p.set_defaults(run=cmd_complexity)

    p = sub.add_parser("report", help="a self-contained HTML page about a run: curves, metrics, samples, attention")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (metrics.jsonl, checkpoints)")
    p.add_argument("-o", "--output", "--out", dest="out", metavar="FILE",
                   help="output .html, or - for stdout (default: RUN_DIR/report.html)")
    p.set_defaults(run=cmd_report)


def add_out_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out-dir", default="plots", help="directory for the pictures (default: plots)")
    p.add_argument("--format", default="png", choices=("png", "svg"), help="the pictures' file format")


def wrote(path: str | Path) -> None:
    """Say which file was written, unless the picture or page itself went to stdout."""
    if not shared.is_std(str(path)):
        print(f"wrote {path}")


def cmd_attention(args: argparse.Namespace) -> int:
    from tformer.inference import load
    from tformer.viz.attention import attention_maps, plot_attention, select
    from tformer.viz.figures import output_format, save_figure
    from tformer.viz.focus import check_query, focus, plot_word_row, word_table

    shared.check_output(args.out)  # a bad target or suffix fails before the model runs
    output_format(args.out)
    if args.query is not None:
        check_query(args.query)
    loaded = load(args.checkpoint, **shared.placement(args))
    maps = attention_maps(loaded.model, loaded.tokenizer, args.text, target=args.target)
    if args.query is not None:  # a bad --part/--layer/--head or a word not in the text fails here
        row, layers, heads = focus(maps, args.query, part=args.part, layer=args.layer, head=args.head)
        wrote(save_figure(plot_word_row(row, layers=layers, heads=heads), args.out))
        if not shared.is_std(str(args.out)):  # not into the picture on stdout
            print(word_table(row, layers=layers, heads=heads))
        return 0
    select(maps, part=args.part, layer=args.layer, head=args.head)  # a bad --part/--layer/--head fails here
    wrote(save_figure(plot_attention(maps, part=args.part, layer=args.layer, head=args.head), args.out))
    return 0


def cmd_positions(args: argparse.Namespace) -> int:
    from tformer.files import check_output_dir
    from tformer.viz.figures import save_figure
    from tformer.viz.positions import check_sizes, plot_alibi, plot_rope, plot_sinusoidal

    check_sizes(max_len=args.max_len, d_model=args.d_model, heads=args.heads)
    check_output_dir(args.out_dir)
    out = Path(args.out_dir)
    for name, fig in (("sinusoidal", plot_sinusoidal(args.max_len, args.d_model)),
                      ("rope", plot_rope(args.max_len, args.d_model)),
                      ("alibi", plot_alibi(args.max_len, args.heads))):
        print(f"wrote {save_figure(fig, out / f'positions-{name}.{args.format}')}")
    return 0


def cmd_curves(args: argparse.Namespace) -> int:
    from tformer.viz.curves import plot_curves, read_metrics
    from tformer.viz.figures import output_format, save_figure

    shared.check_output(args.out)
    output_format(args.out)
    runs = {str(run): read_metrics(run) for run in args.runs}
    wrote(save_figure(plot_curves(runs), args.out))
    return 0


def cmd_complexity(args: argparse.Namespace) -> int:
    from tformer.files import check_output_dir
    from tformer.viz.complexity import PLOTS, plot_complexity, read_results
    from tformer.viz.figures import save_figure

    check_output_dir(args.out_dir)
    data = read_results(args.results)
    for axis, key, stem, what, ylabel in PLOTS:
        fig = plot_complexity(data, axis=axis, key=key, what=what, ylabel=ylabel)
        print(f"wrote {save_figure(fig, Path(args.out_dir) / f'{stem}.{args.format}')}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from tformer.tasks.report import write_report

    shared.check_output(args.out)  # None: RUN_DIR/report.html
    wrote(write_report(args.run_dir, args.out))
    return 0
