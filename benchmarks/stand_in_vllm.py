"""A stand-in for `vllm serve` (benchmarks only): answers /health and /v1/models at once.

`pdctl up` starts it through the rendered start.sh exactly as it would start vLLM; the fleet
benchmark then measures pdctl's own work (SSH, upload, start, health wait), not model loading.
Usage: vllm serve MODEL --port P [--served-model-name N] [...]
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "serve":
        print("usage: vllm serve MODEL [options]", file=sys.stderr)
        return 2
    opts = dict(zip(argv[2::2], argv[3::2], strict=False))
    name = opts.get("--served-model-name", argv[1])
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
            pass

    server = ThreadingHTTPServer(("0.0.0.0", int(opts.get("--port", "8000"))), Handler)
    print(f"stand-in vllm serving {name}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
