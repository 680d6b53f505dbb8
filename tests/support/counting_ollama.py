"""benchmarks/simulated_ollama.py's server, each generation's prompt written (as a hash, with the time)
to a file, so a test can count the calls per prompt the server itself answered: a call whose answer
never reached the pipeline (its host cut off mid-call) counts too.

    python -m tests.support.counting_ollama --host H --port P --latency-ms MS --parallel N --calls FILE
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.simulated_ollama import BASE_MODELS, serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=11434)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--calls", type=Path, required=True, help="JSON lines: one per generation")
    args = parser.parse_args(argv)
    server = serve(args.host, args.port, args.latency_ms, args.parallel, BASE_MODELS)
    state: Any = server.state  # type: ignore[attr-defined]
    answer = state.generate
    lock = threading.Lock()
    calls = args.calls.open("a", buffering=1)

    def counted(model: str, prompt: str, schema: Any) -> str:
        started = time.time()
        text = answer(model, prompt, schema)
        line = {"prompt": hashlib.sha256(prompt.encode()).hexdigest()[:16], "started": started}
        with lock:
            calls.write(json.dumps(line) + "\n")
        return text

    state.generate = counted
    print(f"http://{args.host}:{server.server_address[1]}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
