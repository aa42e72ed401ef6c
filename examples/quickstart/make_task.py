#!/usr/bin/env python3
"""Write a small synthetic translation task: English-like SVO sentences -> an invented SOV language.

The target language ("Verbish") is built so that a model has to learn what attention is for:

* **reordering** — the verb goes to the end (subject, [place], object + case marker ``ke``, verb);
  prepositions become postpositions; adjectives follow the noun, in mirrored order;
* **agreement** — determiners and adjectives agree with their noun in gender (m/f, a property of the
  noun that the source never shows) and number; the verb agrees with the *subject* in number, and in
  the past tense also in gender, even though the object stands between them;
* **morphology** — words are built from stems and suffixes, so a learned sentencepiece model has
  something to share across forms.

Each source sentence has exactly one translation, so a good model reaches BLEU near 100.
The output is deterministic for a given ``--seed``: the same files on every machine.

    python3 make_task.py OUTDIR [--train 15000 --valid 500 --test 500 --seed 1]

writes ``OUTDIR/{train,valid,test}.{src,tgt}``, one sentence per line, with no sentence shared
between the splits.
"""
from __future__ import annotations

import argparse
import os
import random
import sys

# noun: (singular, plural, target stem, gender)
NOUNS = [
    ("dog", "dogs", "kav", "m"), ("cat", "cats", "gat", "f"), ("bird", "birds", "pul", "m"),
    ("horse", "horses", "bek", "m"), ("cow", "cows", "vak", "f"), ("fish", "fishes", "pesk", "m"),
    ("child", "children", "nin", "m"), ("woman", "women", "dom", "f"), ("man", "men", "vir", "m"),
    ("teacher", "teachers", "magist", "f"), ("farmer", "farmers", "agrik", "m"),
    ("king", "kings", "reg", "m"), ("queen", "queens", "regin", "f"), ("friend", "friends", "amik", "m"),
    ("student", "students", "skol", "f"), ("doctor", "doctors", "medik", "m"),
    ("soldier", "soldiers", "milit", "m"), ("baker", "bakers", "panad", "f"),
    ("apple", "apples", "mel", "f"), ("book", "books", "libr", "m"), ("letter", "letters", "karta", "f"),
    ("house", "houses", "kas", "f"), ("tree", "trees", "arbor", "m"), ("river", "rivers", "flum", "m"),
    ("garden", "gardens", "hort", "m"), ("city", "cities", "urb", "f"), ("boat", "boats", "nav", "f"),
    ("table", "tables", "mens", "f"), ("song", "songs", "kant", "m"), ("stone", "stones", "petr", "f"),
]
ANIMATE = set(range(18))  # the first 18 nouns can be subjects

# adjective: (source, target stem)
ADJECTIVES = [
    ("big", "grand"), ("small", "pik"), ("red", "rub"), ("old", "vet"), ("young", "juv"),
    ("happy", "fel"), ("sad", "trist"), ("green", "verd"), ("black", "negr"), ("white", "alb"),
    ("quick", "rap"), ("slow", "lent"), ("good", "bon"), ("bad", "mal"), ("tall", "alt"), ("new", "nov"),
]

# verb: (3sg present, plural present, past, base after "will"/"does not", target stem)
VERBS = [
    ("sees", "see", "saw", "see", "vid"), ("likes", "like", "liked", "like", "am"),
    ("finds", "find", "found", "find", "trov"), ("follows", "follow", "followed", "follow", "sekw"),
    ("helps", "help", "helped", "help", "juv"), ("knows", "know", "knew", "know", "kon"),
    ("carries", "carry", "carried", "carry", "port"), ("watches", "watch", "watched", "watch", "spekt"),
    ("paints", "paint", "painted", "paint", "pikt"), ("calls", "call", "called", "call", "vok"),
    ("hears", "hear", "heard", "hear", "aud"), ("visits", "visit", "visited", "visit", "vizit"),
    ("chases", "chase", "chased", "chase", "kas"), ("draws", "draw", "drew", "draw", "desen"),
]

# determiner: source (sg, pl) -> target prefix stem; target form = stem + agreement vowel
DETERMINERS = [
    (("the", "the"), "l"), (("a", "some"), "un"), (("this", "these"), "st"), (("my", "my"), "m"),
    (("every", "all"), "tot"),
]
# agreement vowels by (gender, number)
AGREE = {("m", "sg"): "o", ("f", "sg"): "a", ("m", "pl"): "i", ("f", "pl"): "e"}

# preposition -> postposition
PREPOSITIONS = [("near", "pres"), ("in", "ini"), ("behind", "post"), ("with", "kon"), ("under", "sub")]

ADVERBS = [("today", "oje"), ("yesterday", "jeri"), ("often", "spes")]


def noun_phrase(rng: random.Random, subject: bool):
    """Source words and target words of one NP, plus its (gender, number)."""
    n = rng.choice(sorted(ANIMATE)) if subject else rng.randrange(len(NOUNS))
    sg, pl, stem, gender = NOUNS[n]
    number = "pl" if rng.random() < 0.4 else "sg"
    det_src, det_stem = rng.choice(DETERMINERS)
    n_adj = rng.choices([0, 1, 2], weights=[5, 4, 1])[0]
    adjs = rng.sample(ADJECTIVES, n_adj)
    vowel = AGREE[(gender, number)]
    src = [det_src[0 if number == "sg" else 1]] + [a for a, _ in adjs] + [sg if number == "sg" else pl]
    tgt = [det_stem + vowel, stem + vowel] + [t + vowel for _, t in reversed(adjs)]
    return src, tgt, (gender, number)


def verb_phrase(rng: random.Random, subj_agr):
    """Source verb words and the final target verb form, agreeing with the subject."""
    pres3, pres_pl, past, base, stem = rng.choice(VERBS)
    gender, number = subj_agr
    tense = rng.choices(["pres", "past", "fut", "neg"], weights=[4, 3, 2, 2])[0]
    if tense == "pres":
        src = [pres3 if number == "sg" else pres_pl]
        tgt = [stem + ("at" if number == "sg" else "ant")]
    elif tense == "past":  # past participle agrees in gender and number, like French être-verbs
        src = [past]
        tgt = [stem + "it" + AGREE[subj_agr]]
    elif tense == "fut":
        src = ["will", base]
        tgt = [stem + ("ara" if number == "sg" else "aran")]
    else:
        src = ["does" if number == "sg" else "do", "not", base]
        tgt = ["ne", stem + ("at" if number == "sg" else "ant")]
    return src, tgt


def sentence(rng: random.Random):
    subj_src, subj_tgt, subj_agr = noun_phrase(rng, subject=True)
    obj_src, obj_tgt, _ = noun_phrase(rng, subject=False)
    verb_src, verb_tgt = verb_phrase(rng, subj_agr)
    src = subj_src + verb_src + obj_src
    tgt = list(subj_tgt)
    if rng.random() < 0.3:  # a place: "near the old house" -> "la kasa veta pres", before the object
        prep_src, prep_tgt = rng.choice(PREPOSITIONS)
        pp_src, pp_tgt, _ = noun_phrase(rng, subject=False)
        src += [prep_src] + pp_src
        tgt += pp_tgt + [prep_tgt]
    tgt += obj_tgt + ["ke"] + verb_tgt
    if rng.random() < 0.15:  # a sentence adverb goes first in the target
        adv_src, adv_tgt = rng.choice(ADVERBS)
        src += [adv_src]
        tgt = [adv_tgt] + tgt
    src[0] = src[0].capitalize()
    tgt[0] = tgt[0].capitalize()
    return " ".join(src) + " .", " ".join(tgt) + " ."


def make_task(outdir: str, sizes: dict[str, int], seed: int) -> None:
    rng = random.Random(seed)
    seen: set[str] = set()
    os.makedirs(outdir, exist_ok=True)
    for split in ("test", "valid", "train"):  # held-out sets first, so train never contains them
        pairs = []
        attempts = 0
        while len(pairs) < sizes[split]:
            attempts += 1
            if attempts > 50 * sizes[split] + 1000:
                sys.exit(f"make_task: could not draw {sizes[split]} distinct {split} sentences")
            src, tgt = sentence(rng)
            if src in seen:
                continue
            seen.add(src)
            pairs.append((src, tgt))
        for side, column in (("src", 0), ("tgt", 1)):
            with open(os.path.join(outdir, f"{split}.{side}"), "w", encoding="utf-8") as handle:
                handle.writelines(pair[column] + "\n" for pair in pairs)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outdir")
    parser.add_argument("--train", type=int, default=15000)
    parser.add_argument("--valid", type=int, default=500)
    parser.add_argument("--test", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    make_task(args.outdir, {"train": args.train, "valid": args.valid, "test": args.test}, args.seed)


if __name__ == "__main__":
    main()
