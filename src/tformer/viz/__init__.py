"""Seeing inside: attention maps, positional encodings, training curves and benchmark results as pictures,
and a self-contained HTML report of a run.

    attention.py   `attention_maps` (the weights, every row a distribution) and `plot_attention`
    focus.py       where one word attends (`plot attention --query`): its row per layer and head, over words
    positions.py   sinusoidal table and similarity, RoPE scores, ALiBi biases
    curves.py      `read_metrics` of a run's metrics.jsonl and `plot_curves` of several runs
    complexity.py  the complexity benchmark's results, log-log with fitted slopes
    report.py      the HTML page of a run, pictures embedded (gathered by `tformer.tasks.report`)
    figures.py     the Agg figure, PNG / SVG by suffix, atomic saves, heatmaps

Every picture is a `matplotlib.figure.Figure` drawn on the headless Agg canvas (no display, no pyplot
state), saved as PNG or SVG by the output file's suffix. matplotlib (and torch) are imported by the modules
that need them, not here, so the `tformer` command starts as fast as before.
"""
