"""Language identifiers compared on the lines of a parallel test set: accuracy and speed, restricted to its
languages (as nmt-serve restricts detection to the languages it serves).

    python benchmarks/detect_accuracy.py [--data ../shared/data/multi30k] [--split test_2016_flickr] \
        [--languages en,de,fr,cs] [--libraries nmt_toolkit,py3langid,lingua,langdetect] [--rounds 3] [--words N]

Every line of ``DATA/SPLIT.LANG`` for each language is one case whose answer is LANG. One JSON line per
library: accuracy, lines/s (the median of ``--rounds`` passes over all lines, one line per call, as a
request to /detect is one text), the seconds to load it (first call included: lingua loads its models
then), and the confusions. ``nmt_toolkit`` is the server's own Detector (py3langid behind the code mapping);
the others are the libraries called directly. A library that is not installed prints a line saying so.
``--words N`` keeps each line's first N words: short texts, on which identifiers part ways.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import pathlib
import statistics
import sys
import time
from collections import Counter
from typing import Callable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from decode_run import code_revision, cpu_name  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "multi30k"


def server_detector(languages: list[str]) -> Callable[[str], str]:
    from nmt_toolkit.serving.detect import Detector

    detector = Detector(languages)
    return lambda text: detector.detect(text)[0][0]


def py3langid(languages: list[str]) -> Callable[[str], str]:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    identifier.set_languages(languages)
    return lambda text: identifier.classify(text)[0]


def lingua(languages: list[str]) -> Callable[[str], str]:
    from lingua import IsoCode639_1, LanguageDetectorBuilder

    detector = LanguageDetectorBuilder.from_iso_codes_639_1(*(getattr(IsoCode639_1, c.upper()) for c in languages))
    built = detector.build()  # high accuracy mode, lingua's default
    return lambda text: built.detect_language_of(text).iso_code_639_1.name.lower()


def langdetect(languages: list[str]) -> Callable[[str], str]:
    """langdetect with a prior of zero for every other language (its own way to restrict), seeded: it
    samples n-grams at random."""
    from langdetect.detector_factory import PROFILES_DIRECTORY, DetectorFactory

    factory = DetectorFactory()
    factory.load_profile(PROFILES_DIRECTORY)
    factory.set_seed(0)
    prior = {code: float(code in languages) for code in factory.get_lang_list()}

    def detect(text: str) -> str:
        detector = factory.create()
        detector.set_prior_map(prior)
        detector.append(text)
        return detector.detect()

    return detect


LIBRARIES = {"nmt_toolkit": (server_detector, "py3langid"), "py3langid": (py3langid, "py3langid"),
             "lingua": (lingua, "lingua-language-detector"), "langdetect": (langdetect, "langdetect")}


def measure(make, cases: list[tuple[str, str]], languages: list[str], rounds: int) -> dict:
    """Load, answer every case ``rounds`` times (the answers of the first pass are scored), time each pass."""
    start = time.perf_counter()
    identify = make(languages)
    identify(cases[0][1])
    load_s = time.perf_counter() - start
    passes, answers = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        found = [identify(text) for _, text in cases]
        passes.append(time.perf_counter() - start)
        answers = answers or found
    confusions = Counter(f"{want}->{got}" for (want, _), got in zip(cases, answers) if want != got)
    return {"accuracy": round(sum(want == got for (want, _), got in zip(cases, answers)) / len(cases), 5),
            "lines_per_s": round(len(cases) / statistics.median(passes), 1), "load_s": round(load_s, 3),
            "errors": sum(confusions.values()), "confusions": dict(confusions.most_common(10))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(DATA), help="folder of SPLIT.LANG files")
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--languages", default="en,de,fr,cs")
    p.add_argument("--libraries", default=",".join(LIBRARIES))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--words", type=int, default=None, help="keep each line's first N words")
    args = p.parse_args()
    languages = args.languages.split(",")
    cases = [(lang, " ".join(line.split()[:args.words]) if args.words else line) for lang in languages
             for line in (pathlib.Path(args.data) / f"{args.split}.{lang}").read_text(encoding="utf-8").splitlines()]
    common = {"data": f"{args.split}.{{{','.join(languages)}}}", "words": args.words or "all", "lines": len(cases),
              "languages": languages,
              "cpu": cpu_name(), "revision": code_revision(), "date": datetime.date.today().isoformat()}
    for name in args.libraries.split(","):
        make, package = LIBRARIES[name]
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            print(json.dumps({"library": name, "error": f"{package} is not installed"}), flush=True)
            continue
        row = {"library": name, "package": f"{package} {version}", **measure(make, cases, languages, args.rounds)}
        print(json.dumps({**row, **common}, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
