"""One check of each request value and one reading of each text, for the command line and the server alike
(issue 31, class 3): every field of /generate, /translate and /classify that has a range is sent out of it to
a server and given to the equivalent `tformer` command, and both refuse it with the same bounds, by the same
library check where the value gets that far (`check_max_new_tokens`, `check_sampling`, `check_beam`,
`check_top`): the same message but for the name the value goes by (`--max-new-tokens`, `decode.beam`,
`--top` on the command line). A text's leading byte-order mark is no part of it on either side
(`data.lines.normalise_text`): "\\ufeff" alone is an empty text, and "\\ufeffthe big cat" gets the answer
"the big cat" gets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serving import call
from test_serve_errors import assert_refused

from tformer.cli import main
from tformer.inference import load

BOM = "\ufeff"
KIND = {"/generate": "gpt", "/translate": "seq2seq", "/classify": "bert classifier"}
TEXT = {"/generate": "prompt", "/translate": "text", "/classify": "text"}
FLAG = {"max_new_tokens": "--max-new-tokens", "temperature": "--temperature", "top_k": "--top-k",
        "top_p": "--top-p", "seed": "--seed", "beam": "--beam", "lenpen": "--lenpen", "top": "--top",
        "n_best": "--n-best", "no_repeat_ngram_size": "--no-repeat-ngram-size",
        "repetition_penalty": "--repetition-penalty"}
CLI_NAME = {"max_new_tokens": "--max-new-tokens", "beam": "decode.beam", "top": "--top",
            "n_best": "--n-best"}  # else the field's

# (endpoint, field, the value as JSON and as a command-line argument): both refused by the same library check
SAME = [("/generate", "max_new_tokens", "-1"), ("/generate", "max_new_tokens", "-100"),
        ("/generate", "temperature", "-1.0"), ("/generate", "temperature", "-0.5"),
        ("/generate", "temperature", "1e-300"), ("/generate", "temperature", "0.0005"),
        ("/generate", "top_k", "0"), ("/generate", "top_k", "-5"),
        ("/generate", "top_p", "0.0"), ("/generate", "top_p", "1.5"), ("/generate", "top_p", "-0.1"),
        ("/translate", "beam", "0"), ("/translate", "beam", "-1"),
        ("/classify", "top", "0"), ("/classify", "top", "-1"),
        # issue 32: the n-best list (1 to the beam: 2 from the recipe) and repetition control (decoding.Repetition)
        ("/translate", "n_best", "0"), ("/translate", "n_best", "3"),
        ("/translate", "no_repeat_ngram_size", "-1"), ("/translate", "repetition_penalty", "0.5"),
        ("/generate", "no_repeat_ngram_size", "-2"), ("/generate", "repetition_penalty", "0.99")]
# (endpoint, field, JSON, argument, what both messages say): refused by both with the same bounds, the command
# line while it parses its arguments (argparse's words), the server by the library's check or its JSON reader
BOUNDS = [("/generate", "seed", "-1", "-1", "give an integer in [0, 2**64 - 1]"),
          ("/generate", "seed", str(2**64), str(2**64), "give an integer in [0, 2**64 - 1]"),
          ("/generate", "top_k", str(10**30), str(10**30), "2**63 - 1]"),
          ("/classify", "top", str(10**30), str(10**30), "2**63 - 1]"),
          ("/generate", "temperature", "NaN", "nan", "finite number"),
          ("/generate", "temperature", "1e400", "1e400", "finite number"),
          ("/generate", "top_p", "-Infinity", "-inf", "finite number"),
          ("/translate", "lenpen", "Infinity", "inf", "finite number"),
          ("/translate", "lenpen", "1e999", "1e999", "finite number"),
          ("/translate", "repetition_penalty", "Infinity", "inf", "finite number"),
          ("/generate", "repetition_penalty", "NaN", "nan", "finite number")]


@pytest.fixture(scope="module")
def lines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("values") / "in.txt"
    path.write_text("the cat\n", encoding="utf-8")
    return path


def cli_refusal(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """The one line `tformer` refuses `argv` with (exit code 2), without "tformer: error: "."""
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("tformer: error: ") and err.count("\n") == 1, (code, err)
    return err.removeprefix("tformer: error: ").rstrip("\n")


def command(path: str, checkpoints: dict[str, Path], lines: Path, tmp_path: Path) -> list[str]:
    """The `tformer` command that does what `path` does, on the same checkpoint, for "the cat"."""
    checkpoint = str(checkpoints[KIND[path]])
    if path == "/generate":
        return ["generate", "--checkpoint", checkpoint, "--prompt", "the cat", "--max-new-tokens", "2"]
    return [path.strip("/"), "--checkpoint", checkpoint, "-i", str(lines), "-o", str(tmp_path / "out.txt")]


def server_refusal(servers: dict[str, str], path: str, field: str, value: str) -> str:
    raw = f'{{"{TEXT[path]}": "the cat", "{field}": {value}}}'.encode()
    return assert_refused(*call(servers[KIND[path]], "POST", path, raw=raw), codes=(422,))


@pytest.mark.parametrize("path, field, value", SAME)
def test_a_value_out_of_range_gets_the_same_message_from_both(path: str, field: str, value: str,
                                                              servers: dict[str, str], checkpoints: dict[str, Path],
                                                              lines: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    served = server_refusal(servers, path, field, value)
    said = cli_refusal([*command(path, checkpoints, lines, tmp_path), f"{FLAG[field]}={value}"], capsys)
    name = CLI_NAME.get(field, field)
    assert said.startswith(f"{name}=") and served.startswith(f"{field}="), (said, served)
    assert said.replace(f"{name}=", f"{field}=", 1) == served
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize("path, field, value, argument, words", BOUNDS,
                         ids=[f"{path}-{field}-{argument}" for path, field, _, argument, _ in BOUNDS])
def test_a_value_out_of_range_gets_the_same_bounds_from_both(path: str, field: str, value: str, argument: str,
                                                             words: str, servers: dict[str, str],
                                                             checkpoints: dict[str, Path], lines: Path,
                                                             tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    served = server_refusal(servers, path, field, value)
    said = cli_refusal([*command(path, checkpoints, lines, tmp_path), f"{FLAG[field]}={argument}"], capsys)
    assert words in served and words in said, (served, said)


def test_the_servers_own_limits_are_the_library_checks_with_a_lower_bound(servers: dict[str, str],
                                                                         checkpoints: dict[str, Path],
                                                                         lines: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    """A server bounds what a request may cost (--max-new-tokens, 16 beams) where the command line does not;
    the check and its words are the library's all the same. A beam as wide as the vocabulary is refused by
    both, the command line when it decodes."""
    assert server_refusal(servers, "/generate", "max_new_tokens", "21") == \
        "max_new_tokens=21 is not allowed; give 0 to 20 (--max-new-tokens)"
    assert server_refusal(servers, "/translate", "beam", "17") == \
        "beam=17 is not allowed; give 1 (greedy) to 16 (this server's most)"
    vocab = load(checkpoints["seq2seq"]).config.vocab_size
    said = cli_refusal([*command("/translate", checkpoints, lines, tmp_path), f"--beam={vocab}"], capsys)
    assert said == f"beam={vocab} is not allowed; give 1 (greedy) to {vocab - 1} (fewer than the vocabulary's " \
                   f"{vocab} tokens)"
    assert server_refusal(servers, "/translate", "beam", str(vocab)).startswith(f"beam={vocab} is not allowed; give "
                                                                               "1 (greedy) to 16")


# --- a byte-order mark ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, path", [("seq2seq", "/translate"), ("gpt", "/score"),
                                        ("bert classifier", "/classify"), ("gpt", "/attention")])
def test_a_byte_order_mark_alone_is_an_empty_text_to_the_server(kind: str, path: str,
                                                                servers: dict[str, str]) -> None:
    for marks in (BOM, BOM * 2):
        message = assert_refused(*call(servers[kind], "POST", path, {"text": marks}), codes=(422,))
        assert message == "text is empty after its byte-order mark; give some text"
    assert assert_refused(*call(servers[kind], "POST", path, {"text": BOM + " \t"}), codes=(422,)) == \
        "text is only whitespace; give some text"
    if path != "/attention":
        message = assert_refused(*call(servers[kind], "POST", path, {"texts": ["the cat", BOM]}), codes=(422,))
        assert message == "texts[1] is empty after its byte-order mark; give some text"
    message = assert_refused(*call(servers["seq2seq"], "POST", "/attention", {"text": "a", "target": BOM}),
                             codes=(422,))
    assert message == "target is empty after its byte-order mark; give some text"
    # a prompt may be empty (a new document): one that is a mark alone is that
    empty = call(servers["gpt"], "POST", "/generate", {"prompt": "", "temperature": 0.0, "max_new_tokens": 5})
    assert call(servers["gpt"], "POST", "/generate", {"prompt": BOM, "temperature": 0.0, "max_new_tokens": 5}) == \
        empty and empty[0] == 200


def run(argv: list[str], out: Path) -> str:
    """What `tformer` writes to `--output out`, exiting 0."""
    assert main([*argv, "--output", str(out)]) == 0
    return out.read_text(encoding="utf-8")


@pytest.mark.parametrize("command", ["translate", "classify", "score"])
def test_a_line_that_is_a_byte_order_mark_is_an_empty_line_to_the_command_line(
        command: str, checkpoints: dict[str, Path], tmp_path: Path) -> None:
    kind = {"translate": "seq2seq", "classify": "bert classifier", "score": "gpt"}[command]
    outputs = []
    for name, text in [("empty", "the cat\n\nthe dog\n"), ("mark", f"the cat\n{BOM}\n{BOM}the dog\n")]:
        (tmp_path / name).write_text(text, encoding="utf-8")
        outputs.append(run([command, "--checkpoint", str(checkpoints[kind]), "-i", str(tmp_path / name)],
                           tmp_path / f"{name}.out"))
    assert outputs[0] == outputs[1] and outputs[0].count("\n") >= 2


def test_plot_attention_refuses_a_byte_order_mark_alone_as_it_refuses_no_text(
        checkpoints: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["plot", "attention", "--checkpoint", str(checkpoints["gpt"]), "--out", str(tmp_path / "a.png")]
    for text in ["", BOM]:
        assert "has no tokens; give a sentence" in cli_refusal([*argv, "--text", text], capsys)
    assert not (tmp_path / "a.png").exists()


@pytest.mark.parametrize("path, body", [
    ("/translate", {}), ("/generate", {"temperature": 0.0, "max_new_tokens": 6}), ("/score", {}),
    ("/classify", {"top": 3}), ("/attention", {})])
def test_a_leading_byte_order_mark_changes_no_answer_of_the_server(path: str, body: dict,
                                                                   servers: dict[str, str]) -> None:
    kind = {"/translate": "seq2seq", "/classify": "bert classifier"}.get(path, "gpt")
    field = "prompt" if path == "/generate" else "text"
    plain = call(servers[kind], "POST", path, {field: "the big cat", **body})
    assert plain[0] == 200, plain
    assert call(servers[kind], "POST", path, {field: BOM + "the big cat", **body}) == plain
    if field == "text" and path != "/attention":
        assert call(servers[kind], "POST", path, {"texts": [BOM + "the big cat"], **body})[1] == \
            call(servers[kind], "POST", path, {"texts": ["the big cat"], **body})[1]


def test_a_leading_byte_order_mark_changes_no_answer_of_the_command_line(
        servers: dict[str, str], checkpoints: dict[str, Path], tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text(f"the big cat\n{BOM}the big cat\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    translated = run(["translate", "--checkpoint", str(checkpoints["seq2seq"]), "-i", str(source)], out)
    answer = call(servers["seq2seq"], "POST", "/translate", {"text": BOM + "the big cat"})[1]["translation"]
    assert translated.splitlines() == [answer, answer]
    labels = run(["classify", "--checkpoint", str(checkpoints["bert classifier"]), "-i", str(source)], out)
    assert labels.splitlines()[0] == labels.splitlines()[1]
    scored = run(["score", "--checkpoint", str(checkpoints["gpt"]), "-i", str(source)], out).splitlines()
    assert scored[1].split("\t")[1:] == scored[2].split("\t")[1:]  # line 1 and line 2: the same scores
    argv = ["generate", "--checkpoint", str(checkpoints["gpt"]), "--temperature", "0", "--max-new-tokens", "6",
            "--json"]
    texts = [json.loads(run([*argv, "--prompt", prompt], out))["text"] for prompt in ("the big cat",
                                                                                       BOM + "the big cat")]
    answer = call(servers["gpt"], "POST", "/generate", {"prompt": "the big cat", "temperature": 0.0,
                                                         "max_new_tokens": 6})[1]["text"]
    assert texts == [answer, answer]


def test_a_byte_order_mark_inside_a_text_is_text(servers: dict[str, str]) -> None:
    """Only a leading mark is dropped: inside a text U+FEFF is a zero-width no-break space, a character."""
    inside = call(servers["gpt"], "POST", "/score", {"text": f"the{BOM} cat", "per_token": False})[1]["score"]
    plain = call(servers["gpt"], "POST", "/score", {"text": "the cat", "per_token": False})[1]["score"]
    assert inside["tokens"] == plain["tokens"] + 1
    twice = call(servers["gpt"], "POST", "/score", {"text": f"{BOM}{BOM}the cat", "per_token": False})[1]["score"]
    assert twice == plain  # marks that start a text are all dropped: normalising twice changes nothing
