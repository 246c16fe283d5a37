"""Generation speed of a local model by llama.cpp thread count and polling, idle and loaded.

llama.cpp's worker threads busy-wait ("poll") between steps by default. With one thread
per core, any other process on the machine (a test runner, the embedding model, a second
query) stalls them. This measures tokens/s for each setting, with the machine idle and with
one competing busy process, to choose LocalChatModel's defaults; the "default" rows let the
model choose its thread count (the cores other work leaves free when it is made).

    python benchmarks/llm_threads.py --model local:smollm2-135m --tokens 64 --repeats 5
    python benchmarks/llm_threads.py --model local:qwen2.5-coder-1.5b --only-default
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time

from hyde_lc import load_llm
from hyde_lc.core.cpu import forget


def _burn(stop: float) -> None:
    while time.time() < stop:
        pass


def measure(
    spec: str, threads: int | None, poll: int, tokens: int, repeats: int
) -> tuple[int, list[float]]:
    """(threads used, tokens/s of each repeat); ``threads=None``: the model's default."""
    forget()  # the default looks at the machine as it is now
    chosen = {} if threads is None else {"threads": threads}
    llm = load_llm(spec, role="hypothesis", poll=poll, max_tokens=tokens, seed=1, **chosen)
    llm.invoke("Warm up.", max_tokens=2)
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        message = llm.invoke("Write a paragraph about lighthouses and their keepers.")
        rates.append(message.usage_metadata["output_tokens"] / (time.perf_counter() - start))
    return llm.threads, rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="local:smollm2-135m")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only-default", action="store_true", help="only the default's rows")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    print(f"| threads | poll | load | tokens/s median | min | max |  ({args.model}, {cores} cores)")
    print("|---|---|---|---|---|---|")
    for load in ("idle", "1 busy process"):
        fixed = [] if args.only_default else sorted({1, cores})
        for threads in [*fixed, None]:
            for poll in (50, 0) if threads else (50,):
                hog = None
                if load != "idle":
                    hog = multiprocessing.Process(target=_burn, args=(time.time() + 600,))
                    hog.start()
                    time.sleep(0.5)  # running before the model looks at the machine
                try:
                    used, rates = measure(args.model, threads, poll, args.tokens, args.repeats)
                finally:
                    if hog:
                        hog.terminate()
                        hog.join()
                print(
                    f"| {used if threads else f'default ({used})'} | {poll} | {load} "
                    f"| {statistics.median(rates):.1f} "
                    f"| {min(rates):.1f} | {max(rates):.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
