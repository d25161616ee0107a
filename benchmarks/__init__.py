"""tformer's benchmarks: speed, memory and quality measured against the field's own tools, as a package run
from the repository root (`python -m benchmarks.<name> [--quick]`; `make bench` runs the speed parts).
Measurements, never tests: figures live in docs/ and the README; tests/benchmarks runs each at `--quick`.

    common             timing, medians of alternating contenders, slopes, forecasts, --quick, JSON results
    machine            the machine's limits: matmul GFLOP/s, copy and mat-vec bandwidth
    bench              `make bench`: train_speed, generate, translate_speed, attention_memory; docs/bench/
    train_speed        training tokens/s and MFU against transformers and torch.nn.Transformer
    torch_transformer  torch.nn.Transformer behind our encoder-decoder interface (train_speed's contender)
    generate           GPT generation against transformers' generate
    translate_speed    greedy and beam translation against MarianMTModel.generate
    translate_baseline MarianMTModel trained from scratch with our run's data and budget
    attention_memory   the longest sequence exact attention handles within a memory cap
    complexity         the notes' complexity table: time and memory against n and d; docs/complexity/
    lm_sweep           short GPT runs differing in one thing (shared by quality and extrapolation)
    quality            every attention kind at equal budget: loss, speed, cache bytes; docs/quality/
    extrapolation      every position scheme at lengths beyond training; docs/extrapolation/
    kill_resume        SIGKILL a training at random steps, resume, compare bitwise
"""
