"""Using a trained model: a checkpoint loaded once (`load` -> `Loaded`: model, config, tokenizer, kind and
the model's decoding layout), then translated, generated, scored or classified with.

    load(path, command=...)            the checkpoint, checked for the command, placed, perhaps int8
    translate(model, tokenizer, ...)   an encoder-decoder's translations (greedy or beam search)
    sample_prompts / continue_prompt   a GPT's continuations, streamed as they come
    score_lines / score_pairs          log-likelihoods under a GPT, or log p(target | source)
    top_labels / classify              a fine-tuned BERT's labels

This layer sits below the recipes (`tasks/`), the server (`serve/`) and the CLI, which all call it, and
above decoding/: it never imports the training loop.
"""

from tformer.inference.classify import check_top, classify, label_names, top_labels
from tformer.inference.generate import Sample, TextStream, continue_prompt, prompt_ids, sample_prompts
from tformer.inference.loaded import NEEDS, Loaded, check_kind, checkpoint_kind, load
from tformer.inference.score import read_scored_lines, score_lines, score_pairs, token_scores
from tformer.inference.translate import DecodeConfig, decode_config, run_decode, translate

__all__ = ["NEEDS", "DecodeConfig", "Loaded", "Sample", "TextStream", "check_kind", "check_top", "checkpoint_kind",
           "classify", "continue_prompt", "decode_config", "label_names", "load", "prompt_ids", "read_scored_lines",
           "run_decode", "sample_prompts", "score_lines", "score_pairs", "token_scores", "top_labels", "translate"]
