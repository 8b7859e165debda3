"""A tiny Docker registry for tests: the few endpoints of the Registry HTTP API v2 that
dockerd needs to pull one single-layer image (GET /v2/, HEAD/GET of a manifest by tag or
digest, HEAD/GET of a blob), over plain HTTP on 127.0.0.1 (dockerd treats 127.0.0.0/8
registries as insecure by default). It records every request it answers."""

from __future__ import annotations

import gzip
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG = "application/vnd.docker.container.image.v1+json"
LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Image:
    """One image as a registry holds it: its manifest and its blobs (config, gzipped layer)."""

    manifest: bytes
    blobs: dict[str, bytes]

    @property
    def digest(self) -> str:
        return sha(self.manifest)


def image_from_rootfs(rootfs: bytes, config: dict, arch: str = "amd64") -> Image:
    """A schema2 image of one layer (the root filesystem tar) with `config` (Env, Entrypoint,
    Labels) as its container configuration."""
    layer = gzip.compress(rootfs, mtime=0)
    image_config = json.dumps(
        {
            "architecture": arch, "os": "linux", "config": config,
            "rootfs": {"type": "layers", "diff_ids": [sha(rootfs)]},
            "history": [{"created_by": "tests/targets/registry.py"}],
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2, "mediaType": MANIFEST,
            "config": {"mediaType": CONFIG, "size": len(image_config), "digest": sha(image_config)},
            "layers": [{"mediaType": LAYER, "size": len(layer), "digest": sha(layer)}],
        },
        sort_keys=True,
    ).encode()
    return Image(manifest, {sha(image_config): image_config, sha(layer): layer})


@dataclass
class Registry:
    """Serves `images` (repository -> tag -> Image) until `close`; `requests` lists
    (method, path) of every request."""

    images: dict[str, dict[str, Image]]
    requests: list[tuple[str, str]] = field(default_factory=list)
    port: int = 0
    server: ThreadingHTTPServer | None = None

    def start(self) -> Registry:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self.answer(body=False)

            def do_GET(self) -> None:
                self.answer(body=True)

            def answer(self, body: bool) -> None:
                registry.requests.append((self.command, self.path))
                found = registry.find(self.path)
                if found is None:
                    error = {"errors": [{"code": "MANIFEST_UNKNOWN", "message": "unknown"}]}
                    self.send(404, json.dumps(error).encode(), "application/json", "", body)
                    return
                data, kind = found
                self.send(200, data, kind, sha(data) if data else "", body)

            def send(self, code: int, data: bytes, kind: str, digest: str, body: bool) -> None:
                self.send_response(code)
                self.send_header("Docker-Distribution-API-Version", "registry/2.0")
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                if digest:
                    self.send_header("Docker-Content-Digest", digest)
                self.end_headers()
                if body:
                    self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def find(self, path: str) -> tuple[bytes, str] | None:
        if path == "/v2/":
            return b"{}", "application/json"
        if not path.startswith("/v2/"):
            return None
        for repo, tags in self.images.items():
            prefix = f"/v2/{repo}/"
            if not path.startswith(prefix):
                continue
            kind, _, ref = path[len(prefix) :].partition("/")
            if kind == "manifests":
                image = tags.get(ref) or next((i for i in tags.values() if i.digest == ref), None)
                return (image.manifest, MANIFEST) if image else None
            if kind == "blobs":
                for image in tags.values():
                    if ref in image.blobs:
                        return image.blobs[ref], "application/octet-stream"
        return None

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
