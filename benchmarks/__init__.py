"""tformer's benchmarks: speed, memory and quality measured against the field's own tools, as a package run
from the repository root (`python -m benchmarks.<name> [--quick]`; `make bench` runs the speed parts).
Measurements, never tests: results go to docs/bench/, the README shows the headlines and docs/results.md
the lab notes; tests/benchmarks runs each at `--quick`. The programs the crash-safety tests drive
(kill_resume, crash_in_save) are test harnesses and live in tests/harnesses/.

Every module of the package, what it measures, and where its results go (-> the default output; "kept:"
where the default is the terminal and the run kept under docs/bench/ was written with `--out FILE`):

    attention_memory   the longest sequence one exact attention layer handles within 4 GiB, and its time
                       -> a part of bench: docs/bench/results.json
    bench_models       the trained models the decoding benchmarks run: the demo translator, a GPT-2-shaped GPT
                       and its draft, found or trained -> runs/bench/ (models that were missing)
    bench              `make bench`: machine, train_speed, generate, translate_speed, ct2_speed and
                       attention_memory in sequence -> docs/bench/results.json and docs/bench/README.md
    common             what every benchmark shares: timing, alternating contenders, slopes, forecasts,
                       --quick, JSON results -> nothing of its own
    complexity         the notes' complexity table: time and memory of one layer against n and d
                       -> docs/bench/complexity/ (results.json, table.md, three log-log plots)
    beam_profile       a trained translator's decoding call: the whole, the encoder alone, the operators of one
                       profiled call -> the terminal (docs/results.md quotes a run)
    continuous_profile where a continuous batch of generations spends its time in one process, no server: tokens/s,
                       ms a step, seconds and calls of each method of decoding.continuous.Running -> the
                       terminal (--out FILE for JSON)
    ct2_parity         CTranslate2 against tformer on one trained translator: the same translations? how fast?
                       -> the terminal (docs/ct2.md quotes a run)
    ct2_quality        BLEU and chrF on all of Acts of ct2_speed's translation rows (both engines, fp32 and int8)
                       and the GPT's perplexity, fp32 and int8 -> kept: docs/bench/ct2-user-quality.json
    ct2_random         the earlier CTranslate2 harness: random weights, forced lengths, the same work each step
                       (decode_profile's workloads) -> kept: docs/bench/ct2-speed.json, docs/bench/int8-ct2-speed.json
    ct2_speed          against CTranslate2 run as its users run it, on trained models: greedy and beam-4
                       translation of Acts, batch-1 and batch-8 generation, fp32 and int8 -> a part of bench;
                       kept: docs/bench/ct2-user.json
    demo_proxies       short fixed-step runs of the demo recipe differing in one method (optimizer, schedule,
                       averaging, architecture, extra data), scored on Romans -> --out DIR (proxies.jsonl;
                       docs/demo-recipe.md quotes the runs)
    decode_profile     one decoding step by operator (torch.profiler) against CTranslate2's step
                       -> kept: docs/bench/decode-profile.json, docs/bench/decode-profile-beam.json
    extrapolation      every position scheme at lengths beyond training -> docs/bench/extrapolation/
    fuzz               the bad-input contracts by property with many examples (tests/properties/contracts.py):
                       `tformer train` with mutated overrides, any request to each `tformer serve` endpoint
                       -> the terminal (outcomes and every breach; --out FILE for JSON)
    generate           GPT generation against transformers' generate -> a part of bench: docs/bench/results.json
    gpu_decode_check   captured decoding on a GPU: its tokens checked against the eager paths', GPT generation and
                       greedy translation timed with and without it and against transformers' generate
                       -> --out FILE (JSON, and the table beside it as .md); kept: docs/bench/gpu-decode.json
    int8_kernels       which int8 weight-only matmul runs fastest on this CPU, on the project's layer shapes
                       -> kept: docs/bench/int8-kernels.txt (printed), docs/bench/int8-kernels-compiled.json
    int8_quality       int8 against fp32 and CTranslate2 int8 on trained checkpoints: quality and speed
                       -> kept: docs/bench/int8.json
    lm_sweep           short GPT runs differing in one thing (shared by quality and extrapolation)
                       -> nothing of its own
    machine            the machine's limits: matmul GFLOP/s, copy, mat-vec and streaming-read bandwidth
                       -> a part of bench: docs/bench/results.json
    quiet              whether the machine was quiet while a contender was timed: other processes' CPU time
                       around each round (/proc/stat), the mark and the refusal of a ratio -> nothing of its own
    quality            every attention kind at equal budget: loss, speed, cache bytes -> docs/bench/quality/
    road               the notes' road to the Transformer: trained translators (RNN, attention RNN, Transformer)
                       side by side: steps, tokens/s, test BLEU and chrF, BLEU by source length
                       -> --out DIR (road.md, road.json, road-bleu-by-length.png)
    serve_load         `tformer serve` under concurrent clients, with micro-batching and without
                       -> kept: docs/bench/serve-load.json
    speculative        the bench GPT alone against it with a small draft (speculative decoding), greedy, batch 1:
                       tokens/s, acceptance rate, identical tokens -> the terminal (--out FILE for JSON)
    step_profile       where a translation recipe's training step spends its time: wall, the GPU's busy share,
                       operators, kernels and host waits a step; collation and evaluation -> the terminal
                       (--out FILE for JSON; gpu_check.sh runs it on demo-gpu)
    synthetic_road     the road on a synthetic task: the plain RNN, the attention RNN and the Transformer
                       reversing random sequences, exact and token accuracy by source length
                       -> --out DIR (synthetic_road.json, synthetic_road.md, synthetic-accuracy-by-length.png)
    threads            training steps/s against CPU threads, alone and beside busy processes
                       -> docs/bench/threads.json
    torch_transformer  torch.nn.Transformer behind our encoder-decoder interface (train_speed's contender)
                       -> nothing of its own
    train_speed        training tokens/s and MFU against transformers and torch.nn.Transformer
                       -> a part of bench: docs/bench/results.json
    translate_baseline MarianMTModel trained from scratch with our run's data and budget, both scored
                       -> RUN/../<run name>-marian/comparison.json (docs/results.md quotes the runs)
    translate_speed    greedy and beam translation against MarianMTModel.generate
                       -> a part of bench: docs/bench/results.json
"""
