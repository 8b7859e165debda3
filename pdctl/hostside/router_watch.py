#!/usr/bin/env python3
"""pdctl's router watch: runs vllm-router in Mooncake P/D mode and starts it again when a prefill
engine comes back as another Mooncake engine. See docs/phase2-bare-metal.md ("A restarted
prefill behind vllm-router").

    python3 router_watch.py --bootstrap URL [--bootstrap URL ...] -- COMMAND...

Why: vllm-router reads each prefill's Mooncake engine ids once, when it starts (GET
BOOTSTRAP/query, `query_mooncake_bootstrap` in its vllm_pd_router.rs), and sends them to decode
with every request. vLLM names its engine with a new uuid at every start (KVTransferConfig
engine_id), so after a prefill restarts, decode is told to pull KV from an engine that is gone
(its cached address points at the old process's side-channel port) and the request hangs until
the client gives up: seen on an H100 with vLLM 0.23.0, every request after a prefill restart.

- Before it starts COMMAND it reads every bootstrap server's `/query` (vLLM's
  MooncakeBootstrapServer: {dp_rank: {"engine_id": ..., "worker_addr": ...}}) and keeps the
  engine ids each names.
- It runs COMMAND as its child, in the watch's own process group.
- Every POLL seconds it reads them again. When a server names other engine ids, or names some
  where it named none before COMMAND's start, it says so on stderr, stops COMMAND (SIGTERM,
  SIGKILL after STOP seconds) and starts it again, which reads them anew. A server that does
  not answer, or names no engine yet (its prefill is restarting), is waited for, never acted
  on.
- COMMAND ending on its own ends the watch with its status; an exit with status 0 that nobody
  asked for exits GONE (75), so that a Restart=on-failure supervisor restarts it too.
- SIGTERM and SIGINT: the stop scripts signal the whole process group, COMMAND included; the
  watch passes the signal on (in case it came alone), waits for COMMAND (SIGKILL after STOP
  seconds) and exits with its status.

Standard library only: it runs under the router's own Python (`python3` of its venv).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request

POLL = 2.0  # seconds between two reads of the bootstrap servers
ASK_TIMEOUT = 3.0  # one /query
STOP = 20.0  # SIGTERM, then SIGKILL after this many seconds
GONE = 75  # an unrequested exit with status 0 (EX_TEMPFAIL)

Ids = dict[str, str]  # dp rank -> engine id, as one bootstrap server answers
# The bootstrap servers are the deployment's own: never through an http_proxy of the environment.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def say(text: str) -> None:
    print(f"pdctl router watch: {text}", file=sys.stderr, flush=True)


def engine_ids(url: str) -> Ids | None:
    """What one bootstrap server answers (dp rank -> engine id); None when it does not answer,
    or names no engine yet (its workers register as they start)."""
    try:
        with DIRECT.open(url.rstrip("/") + "/query", timeout=ASK_TIMEOUT) as resp:
            doc = json.loads(resp.read())
        return {str(rank): str(entry["engine_id"]) for rank, entry in doc.items()} or None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def changed(urls: list[str], known: dict[str, Ids]) -> list[str]:
    """The servers that answer with engine ids the router did not read at its start: other
    ones than `known` holds, or any, where it had none (vllm-router keeps no engine id of a
    prefill whose bootstrap server named none when it asked)."""
    out = []
    for url in urls:
        now = engine_ids(url)
        if now is None:
            continue
        if url not in known:
            out.append(f"{url} now answers {describe(now)} (it named none at the router's start)")
        elif now != known[url]:
            out.append(f"{url} now answers {describe(now)} (was {describe(known[url])})")
    return out


def describe(ids: Ids) -> str:
    return ", ".join(f"dp {rank}: {engine}" for rank, engine in sorted(ids.items())) or "nothing"


def status_of(code: int) -> int:
    """A child's return code as a shell says it: 128 + N for one ended by signal N."""
    return 128 - code if code < 0 else code


def stop(child: subprocess.Popen) -> int:
    """SIGTERM to COMMAND, SIGKILL after STOP seconds; its status."""
    for sig, wait in ((signal.SIGTERM, STOP), (signal.SIGKILL, None)):
        try:
            child.send_signal(sig)
        except ProcessLookupError:
            pass
        try:
            return status_of(child.wait(wait))
        except subprocess.TimeoutExpired:
            continue
    return status_of(child.wait())


def main(argv: list[str]) -> int:
    cut = argv.index("--") if "--" in argv else len(argv)
    opts, command = argv[:cut], argv[cut + 1:]
    urls = [opts[i + 1] for i, a in enumerate(opts[:-1]) if a == "--bootstrap"]
    if not urls or not command:
        print("usage: router_watch.py --bootstrap URL [...] -- COMMAND...", file=sys.stderr)
        return 2
    asked: list[int] = []
    signal.signal(signal.SIGTERM, lambda s, f: asked.append(s))
    signal.signal(signal.SIGINT, lambda s, f: asked.append(s))
    while True:
        known = {u: ids for u in urls if (ids := engine_ids(u)) is not None}
        say(f"starting {command[0]}; engine ids: "
            + "; ".join(f"{u}: {describe(known[u]) if u in known else 'no answer yet'}"
                        for u in urls))
        child = subprocess.Popen(command)
        why: list[str] = []
        while not asked:
            try:
                status = child.wait(POLL)
            except subprocess.TimeoutExpired:
                why = changed(urls, known)
                if why:
                    break
                continue
            return GONE if status == 0 else status_of(status)
        if asked:
            return stop(child)  # it has the signal too, when the whole group got it
        say("a prefill came back as another Mooncake engine: " + "; ".join(why)
            + f"; restarting {command[0]} so that it reads the new ids")
        status = stop(child)
        if asked:  # stopped meanwhile: no new start
            return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
