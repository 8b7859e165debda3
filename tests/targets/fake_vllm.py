#!/usr/bin/env python3
"""A stand-in for `vllm serve` (tests only): serves /health and /v1/models like vLLM.

Usage: vllm serve MODEL --port P [--served-model-name N] [...]. A MODEL path that does not
exist fails the way vLLM does: an error line on stderr and exit status 1.
"""

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "serve":
        print("usage: vllm serve MODEL [options]", file=sys.stderr)
        return 2
    model, rest = argv[1], argv[2:]
    opts = dict(zip(rest[::2], rest[1::2], strict=False))
    port = int(opts.get("--port", "8000"))
    name = opts.get("--served-model-name", model)
    if model.startswith("/") and not os.path.exists(model):
        print(f"OSError: fake-vllm: model path {model} does not exist", file=sys.stderr)
        return 1
    if os.environ.get("FAKE_VLLM_HANG"):  # alive but never healthy (for interrupt tests)
        print("fake-vllm: loading forever", flush=True)
        while True:
            time.sleep(60)
    body = json.dumps({"object": "list", "data": [{"id": name, "object": "model"}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                self.send_response(200)
                self.end_headers()
            elif self.path == "/v1/models":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_response(404)
                self.end_headers()

        def log_message(self, fmt: str, *args: object) -> None:
            print("fake-vllm:", fmt % args, flush=True)

    print(f"fake-vllm serving {name} on port {port}", flush=True)
    ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
