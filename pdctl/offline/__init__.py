"""Hosts without a package index: `pdctl bundle` downloads the wheels a spec's hosts install
(pip resolves them for the hosts' Python and platform), a manifest pins every file, and
`pdctl up --bundle` verifies it, copies the wheels to each host over SSH and renders start
scripts that install with `pip install --no-index --find-links` (docs/offline.md)."""
