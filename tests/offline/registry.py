"""A registry on a loopback port that takes `docker push` (the distribution API's push flow:
https://distribution.github.io/distribution/spec/api/#pushing-an-image) and keeps what it got
in memory. Docker treats 127.0.0.0/8 registries as plain-HTTP ones. Enough for the real
dockerd to push to it; nothing is pulled from it."""

from __future__ import annotations

import hashlib
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class Registry(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.blobs: dict[str, bytes] = {}
        self.uploads: dict[str, bytes] = {}
        self.manifests: dict[tuple[str, str], bytes] = {}  # (repository, tag) -> manifest
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    server: Registry

    def log_message(self, *args: object) -> None:
        pass

    def body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                out += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return out
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def reply(self, code: int, headers: dict[str, str] | None = None, data: bytes = b"") -> None:
        self.send_response(code)
        for k, v in {"Docker-Distribution-API-Version": "registry/2.0", **(headers or {}),
                     "Content-Length": str(len(data))}.items():
            self.send_header(k, v)
        self.end_headers()
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
        self.reply(200 if self.path.rstrip("/") == "/v2" else 404)

    def do_HEAD(self) -> None:  # noqa: N802
        repo, kind, last, _ = self.parts()
        data = self.server.blobs.get(last) if kind == "blobs" else None
        if data is None:
            self.reply(404)
            return
        self.send_response(200)
        self.send_header("Docker-Content-Digest", last)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()

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
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            self.server.manifests[(repo, last)] = data
            self.server.blobs[digest] = data
            self.reply(201, {"Docker-Content-Digest": digest,
                             "Location": f"/v2/{repo}/manifests/{digest}"})
            return
        data = self.server.uploads.pop(last) + data
        digest = query["digest"][0]
        if digest != "sha256:" + hashlib.sha256(data).hexdigest():
            self.reply(400)
            return
        self.server.blobs[digest] = data
        self.reply(201, {"Docker-Content-Digest": digest,
                         "Location": f"/v2/{repo}/blobs/{digest}"})
