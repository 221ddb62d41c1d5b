"""Item 1, paired: the same order-lookup turn over HTTP + SSE and in-process, alternating.

    python -m benchmarks.overhead --url URL --database-url DSN --model-url URL --turns N

One process sends a turn to the service over real HTTP (reading the SSE stream to its
end), then runs the same turn on the same compiled graph in-process (`ainvoke`, then
`astream` with the service's stream modes), on threads with identical histories, so the
three see the same machine load.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import eventloop
from benchmarks.client import OurClient, http_client
from benchmarks.inproc import open_in_process
from benchmarks.loadgen import Pair, question, read_pairs


async def run(args: argparse.Namespace, pairs: Sequence[Pair]) -> dict[str, Any]:
    target = await open_in_process(args.database_url, args.model_url, "postgres")
    http = http_client(args.url, 2)
    client = OurClient(http, args.secret)
    rows: dict[str, list[dict[str, Any]]] = {"http": [], "invoke": [], "astream": []}
    try:
        for i in range(args.warmup + args.turns):
            user_id, order_id = pairs[i % len(pairs)]
            k = i % 3  # turn k of a three-turn conversation, on three identical threads
            base = f"{args.tag}-{i // 3}"
            text = question(k, order_id)
            http_row = (await client.turn(user_id, f"{base}-h", text)).as_dict()
            invoke_row = await target.turn(user_id, f"{base}-i", text, stream=False)
            stream_row = await target.turn(user_id, f"{base}-s", text, stream=True)
            if i >= args.warmup:
                rows["http"].append(http_row)
                rows["invoke"].append(invoke_row)
                rows["astream"].append(stream_row)
    finally:
        await http.aclose()
        await target.close()
    return {"cpu_s": time.process_time(), **rows}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overhead")
    parser.add_argument("--url", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--model-url", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--pairs", required=True)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--tag", default="ovh")
    parser.add_argument("--out", required=True)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    result = eventloop.run(run(args, read_pairs(args.pairs)))
    Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
