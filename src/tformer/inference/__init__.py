"""Using a trained model: a checkpoint loaded once (`load` -> `Loaded`: model, config, tokenizer, kind and
the model held for decoding, `Loaded.decoder`), then translated, generated, scored or classified with.

    load(path, command=...)            the checkpoint, checked for the command, placed, perhaps int8
    load_draft(path, target)           a small GPT sharing the target's tokenizer, for speculative decoding
    translate(decoder, tokenizer, ...) an encoder-decoder's translations, searched as a DecodeConfig says
    translate_n_best(...)              the same search's best hypotheses of each sentence, with their scores
    sample_prompts / continue_prompt   a GPT's continuations, streamed as they come
    score_lines / score_pairs          log-likelihoods under a GPT, or log p(target | source)
    top_labels / classify              a fine-tuned BERT's labels
    unknown_warning                    one line when the input holds text the tokenizer cannot represent

This layer sits below the recipes (`tasks/`), the server (`serve/`) and the CLI, which all call it, and
above decoding/: it never imports the training loop.
"""

from tformer.decoding.settings import DecodeConfig, SampleConfig, with_given
from tformer.inference.classify import check_top, classify, label_names, top_labels
from tformer.inference.generate import (
    Sample,
    TextStream,
    continue_prompt,
    prompt_ids,
    repetition_of,
    sample_prompts,
)
from tformer.inference.loaded import NEEDS, Loaded, check_kind, checkpoint_kind, load, load_draft
from tformer.inference.score import read_scored_lines, score_lines, score_pairs, token_scores
from tformer.inference.translate import (
    Candidate,
    Encoded,
    check_n_best,
    encode_sentences,
    n_best_ids,
    prefix_ids,
    run_decode,
    split_prefixes,
    translate,
    translate_ids,
    translate_n_best,
)
from tformer.inference.unknown import Unknown, unknown_tokens, unknown_warning

__all__ = ["NEEDS", "DecodeConfig", "Loaded", "Sample", "TextStream", "check_kind", "check_top", "checkpoint_kind",
           "classify", "continue_prompt", "label_names", "load", "load_draft", "prompt_ids", "read_scored_lines",
           "run_decode", "sample_prompts", "score_lines", "score_pairs", "token_scores", "top_labels", "translate"]
__all__ += ["Candidate", "Encoded", "SampleConfig", "Unknown", "check_n_best", "encode_sentences", "n_best_ids",
            "prefix_ids", "repetition_of", "split_prefixes", "translate_ids", "translate_n_best", "unknown_tokens",
            "unknown_warning", "with_given"]
