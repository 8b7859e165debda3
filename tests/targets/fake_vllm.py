#!/usr/bin/env python3
"""A stand-in for `vllm serve` (tests only): serves /health and /v1/models like vLLM.

Usage: vllm serve MODEL --port P [--served-model-name N] [--api-key K] [...]. A MODEL path
that does not exist fails the way vLLM does: an error line on stderr and exit status 1.

An API key (`--api-key`, else the environment variable VLLM_API_KEY, as vLLM reads them) is
enforced as vLLM's AuthenticationMiddleware does: requests under /v1, /v2 and /inference
without `Authorization: Bearer <key>` get 401; /health and /metrics stay open.
"""

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

AUTHENTICATED = ("/v1", "/v2", "/inference")


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
    api_key = opts.get("--api-key") or os.environ.get("VLLM_API_KEY") or None
    body = json.dumps({"object": "list", "data": [{"id": name, "object": "model"}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def authorized(self) -> bool:
            path = self.path.split("?", 1)[0]
            if api_key is None or not path.startswith(AUTHENTICATED):
                return True
            return self.headers.get("Authorization", "") == f"Bearer {api_key}"

        def do_GET(self) -> None:
            if not self.authorized():
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"error": "Unauthorized"}')
            elif self.path == "/health":
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
    ThreadingHTTPServer((opts.get("--host", "0.0.0.0"), port), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
