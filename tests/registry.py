"""A Docker registry for tests on a loopback port (Docker treats 127.0.0.0/8 registries as
plain-HTTP ones), in memory: it takes `docker push` (the distribution API's push flow:
https://distribution.github.io/distribution/spec/api/#pushing-an-image) and serves what it
holds to `docker pull` (GET /v2/, HEAD/GET of a manifest by tag or digest and of a blob).
`add` puts in an image made here (`image_from_rootfs`); `requests` records every request."""

from __future__ import annotations

import gzip
import hashlib
import json
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

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
            "history": [{"created_by": "tests/registry.py"}],
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


class Registry(ThreadingHTTPServer):
    """Serves from its start until `stop`."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.blobs: dict[str, bytes] = {}
        self.uploads: dict[str, bytes] = {}
        self.manifests: dict[tuple[str, str], bytes] = {}  # (repository, tag or digest) ->
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def add(
        self, repo: str, tag: str, manifest: bytes, blobs: Mapping[str, bytes] | None = None,
    ) -> str:
        """Holds `manifest` as REPO:TAG and REPO@its digest, with `blobs`; its digest."""
        digest = sha(manifest)
        self.manifests[(repo, tag)] = self.manifests[(repo, digest)] = manifest
        self.blobs.update({**(blobs or {}), digest: manifest})
        return digest

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    server: Registry

    def log_message(self, *args: object) -> None:
        pass

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        if parsed:
            self.server.requests.append((self.command, self.path))
        return parsed

    def body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                out += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return out
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def reply(self, code: int, headers: dict[str, str] | None = None, data: bytes = b"",
              body: bool = True) -> None:
        self.send_response(code)
        for k, v in {"Docker-Distribution-API-Version": "registry/2.0", **(headers or {}),
                     "Content-Length": str(len(data))}.items():
            self.send_header(k, v)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def parts(self) -> tuple[str, str, str, dict[str, list[str]]]:
        """(repository, kind, last path part, query) of /v2/<repository>/<kind>/<last>."""
        url = urlsplit(self.path)
        path = url.path.removeprefix("/v2/").rstrip("/")
        for kind in ("/blobs/uploads", "/blobs", "/manifests"):
            if kind + "/" in path + "/":
                repo, _, last = path.partition(kind)
                return repo, kind[1:], last.lstrip("/"), parse_qs(url.query)
        return "", "", path, parse_qs(url.query)

    def do_GET(self) -> None:  # noqa: N802
        self.serve(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self.serve(body=False)

    def serve(self, body: bool) -> None:
        repo, kind, last, _ = self.parts()
        if self.path.rstrip("/") == "/v2":
            data, media = b"{}", "application/json"
        elif kind == "manifests" and (repo, last) in self.server.manifests:
            data = self.server.manifests[(repo, last)]
            media = json.loads(data).get("mediaType", MANIFEST)
        elif kind == "blobs" and last in self.server.blobs:
            data, media = self.server.blobs[last], "application/octet-stream"
        else:
            error = {"errors": [{"code": "MANIFEST_UNKNOWN", "message": "unknown"}]}
            self.reply(404, {"Content-Type": "application/json"}, json.dumps(error).encode(), body)
            return
        self.reply(200, {"Content-Type": media, "Docker-Content-Digest": sha(data)}, data, body)

    def _upload(self, repo: str, key: str) -> dict[str, str]:
        return {"Location": f"/v2/{repo}/blobs/uploads/{key}", "Docker-Upload-UUID": key,
                "Range": f"0-{max(0, len(self.server.uploads[key]) - 1)}"}

    def do_POST(self) -> None:  # noqa: N802
        repo, kind, _, _ = self.parts()
        key = uuid.uuid4().hex
        self.server.uploads[key] = self.body()
        self.reply(202, self._upload(repo, key))

    def do_PATCH(self) -> None:  # noqa: N802
        repo, _, key, _ = self.parts()
        self.server.uploads[key] += self.body()
        self.reply(202, self._upload(repo, key))

    def do_PUT(self) -> None:  # noqa: N802
        repo, kind, last, query = self.parts()
        data = self.body()
        if kind == "manifests":
            digest = self.server.add(repo, last, data)
            self.reply(201, {"Docker-Content-Digest": digest,
                             "Location": f"/v2/{repo}/manifests/{digest}"})
            return
        data = self.server.uploads.pop(last) + data
        digest = query["digest"][0]
        if digest != sha(data):
            self.reply(400)
            return
        self.server.blobs[digest] = data
        self.reply(201, {"Docker-Content-Digest": digest,
                         "Location": f"/v2/{repo}/blobs/{digest}"})
