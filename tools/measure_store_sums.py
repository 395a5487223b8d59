"""What the passage store's checksum costs (issue 49): builds a store of N random 100-word
passages (its SHA256SUMS written last), seals it again, opens it with the full check in a
clean state, and times one pass over its rows (what an export of it reads anyway).

    PYTHONPATH=. python tools/measure_store_sums.py 500000 /tmp/store_sums
"""

from __future__ import annotations

import os
import random
import sys
import time

from dense_cf import files
from dense_cf.index.passage_store import open_store


def main(n: int, d: str) -> None:
    os.makedirs(d, exist_ok=True)
    corpus = os.path.join(d, "psgs.tsv")
    if not os.path.exists(corpus):
        rng = random.Random(0)
        words = [f"w{i}" for i in range(30000)]
        with open(corpus, "w") as f:
            f.write("id\ttext\ttitle\n")
            for i in range(n):
                f.write(f"{i}\t{' '.join(rng.choices(words, k=100))}\tTitle {i}\n")
    store = os.path.join(d, "store")
    t0 = time.perf_counter()
    s = open_store(corpus, store)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    files.seal_dir(store)
    seal = time.perf_counter() - t0
    files._CHECKED.clear()  # forget this process's checks: the open below reads every file
    t0 = time.perf_counter()
    s = open_store(corpus, store)
    reopen = time.perf_counter() - t0
    t0 = time.perf_counter()
    sum(1 for _ in s.rows())
    rows = time.perf_counter() - t0
    print(f"{len(s)} passages, store {files.tree_bytes(store) / 1e6:.0f} MB: build (incl. seal) "
          f"{build:.1f} s; seal again {seal:.2f} s ({seal / build:.1%} of the build); open with "
          f"the full check {reopen:.2f} s; one pass over rows() {rows:.1f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
