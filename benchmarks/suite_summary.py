"""The short table the GPU suites print last (the device tool returns the end of the output): one line per
JSON object of the results files named, whichever suite wrote them.

    python benchmarks/suite_summary.py out/gpu_train.jsonl out/gpu_decode.jsonl
"""
import json
import os
import sys


def line(r: dict) -> str:
    kind = r.get("benchmark")
    if kind == "gpu_train":
        return (f'{r["arch"]:17s} {r["dtype"]:5s} {r["max_tokens"]:6d} {r["target_tokens_per_s"]:>9,} tok/s '
                f'{r["model_tflops"]:7.1f} TFLOP/s mfu {r["mfu"]} of {r["peak_tflops"]} | {r["peak_memory_gb"]} GB | '
                f'graphs {r["compiled_graphs"]} | {r["seconds_before_from"]} s to update {r["updates"][0]}')
    if kind == "matmul_ceiling":
        return f'matmul 8192^3 {r["dtype"]}: {r["tflops"]} TFLOP/s'
    if kind == "gpu_decode":
        same = "" if r.get("identical_to_eager") is None else \
            f' identical {r["identical_to_eager"]} of {r.get("compared")} (with score {r.get("identical_with_score")})'
        return (f'{r["model"][:34]:34s} {r["device"]:16s} {r["dtype"]:4s} {str(r.get("search"))[:20]:20s} '
                f'{r["sentences_per_s"]} sent/s{same}')
    return str(r)


def main() -> None:
    for path in sys.argv[1:]:
        if not os.path.isfile(path):
            continue
        print(f"-- {os.path.basename(path)}")
        with open(path, encoding="utf-8") as f:
            for text in f:
                print(line(json.loads(text)))


if __name__ == "__main__":
    main()
