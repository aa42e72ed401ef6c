"""The forward translation's shards as one target file: ``merge_shards.py N shard0.txt shard1.txt … > train.de``.

Each shard holds ``id<TAB>translation`` lines (nmt-generate's D- lines of the batches that shard decoded); the
output is the N translations in corpus order. A sentence missing or translated twice (a shard of another run,
another SHARDS) is one line on stderr naming it and exit status 1, before anything is printed."""
from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    count, shards = int(argv[0]), argv[1:]
    found: dict[int, str] = {}
    for shard in shards:
        with open(shard, encoding="utf-8", newline="\n") as handle:
            for line in handle:
                key, _, text = line.rstrip("\n").partition("\t")
                sid = int(key)
                if sid in found or not 0 <= sid < count:
                    print(f"merge_shards.py: {shard}: sentence {sid} {'twice' if sid in found else 'outside the corpus'}"
                          f" (shards of another run? remove forward/ and run again)", file=sys.stderr)
                    return 1
                found[sid] = text
    missing = [sid for sid in range(count) if sid not in found]
    if missing:
        print(f"merge_shards.py: {len(missing)} of {count} sentences have no translation (the first: {missing[0]}); "
              f"the teacher's data-bin is not this corpus, or a sentence exceeds its positions", file=sys.stderr)
        return 1
    sys.stdout.write("".join(found[sid] + "\n" for sid in range(count)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
