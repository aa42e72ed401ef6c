"""Installs nmt_toolkit and its command-line programs.

The programs live in the top-level folder ``cli/`` of the repository but are installed as the
subpackage ``nmt_toolkit.cli`` (see ``package_dir``), so no top-level package named ``cli`` ever
lands in site-packages where it could shadow somebody else's.
"""
from setuptools import setup

PROGRAMS = {
    "nmt": "main",
    "nmt-preprocess": "preprocess",
    "nmt-train": "train",
    "nmt-generate": "generate",
    "nmt-interactive": "interactive",
    "nmt-average-checkpoints": "average_checkpoints",
    "nmt-score": "score",
    "nmt-export": "export",
    "nmt-convert": "convert",
    "nmt-serve": "serve",
    "nmt-translate-file": "translate_file",
}

setup(
    name="nmt_toolkit",
    version="0.1.0",
    description="Transformer neural machine translation toolkit (Vaswani et al., 2017) with fairseq-style CLIs",
    python_requires=">=3.10",
    packages=[
        "nmt_toolkit",
        "nmt_toolkit.data",
        "nmt_toolkit.modules",
        "nmt_toolkit.models",
        "nmt_toolkit.criterions",
        "nmt_toolkit.optim",
        "nmt_toolkit.training",
        "nmt_toolkit.generation",
        "nmt_toolkit.scoring",
        "nmt_toolkit.tasks",
        "nmt_toolkit.export",
        "nmt_toolkit.importers",
        "nmt_toolkit.markup",
        "nmt_toolkit.documents",
        "nmt_toolkit.serving",
        "nmt_toolkit.cli",
    ],
    package_dir={"nmt_toolkit.cli": "cli"},
    install_requires=[
        "torch>=2.2",
        "numpy",
        "sentencepiece",
        "subword-nmt",
        "sacrebleu>=2.0",
        "sacremoses",
        "click>=8.1",
        "pyyaml",
        "tqdm",
        "safetensors",  # model folders' weights: plain tensors, read without pickle (no code runs on load)
    ],
    extras_require={
        # the nmt-serve tests talk to a real server as LibreTranslate's Python client and as httpx
        # transformers: tests/test_marian.py checks the Marian import and export against Hugging Face's own
        # MarianMTModel and MarianTokenizer (never imported by the toolkit itself); protobuf: Transformers 5
        # needs it to build a tokenizer from a sentencepiece model (tests/test_m2m100.py's NLLB tokenizer)
        "test": ["pytest", "ruff", "httpx", "libretranslatepy", "transformers>=4.40", "protobuf"],
        "viz": ["matplotlib"],
        "tb": ["tensorboard"],
        # nmt-export --format ctranslate2 and --engine ctranslate2: a wheel (no compiler), CPU and CUDA
        "ct2": ["ctranslate2>=4.0"],
        # nmt-serve: FastAPI on uvicorn (the ASGI stack), sentencex (sentence splitting), prometheus-client (/metrics)
        # and py3langid (/detect, source auto: its model ships in the package; benchmarks/detect_accuracy.py chose it),
        # lxml (format html: libxml2's HTML parser, a tree to translate in place and a serializer that writes it whole)
        # python-multipart: FastAPI's forms, the multipart upload of /translate_file
        "serve": ["fastapi>=0.110", "uvicorn>=0.29", "sentencex>=1.0", "prometheus-client>=0.20", "py3langid>=0.4",
                  "lxml>=5.0", "python-multipart>=0.0.9"],
        # nmt-translate-file and /translate_file, each format through its own maintained library (read and
        # written whole, never by hand): python-docx (.docx), odfpy (.odt, .odp), python-pptx (.pptx), srt
        # (.srt, timings kept); plain text and HTML need only the [serve] extra's sentencex and lxml
        "documents": ["python-docx>=1.1", "odfpy>=1.4", "python-pptx>=1.0", "srt>=3.5", "sentencex>=1.0",
                      "lxml>=5.0"],
    },
    entry_points={
        "console_scripts": [f"{prog} = nmt_toolkit.cli.{mod}:main" for prog, mod in PROGRAMS.items()],
    },
)
