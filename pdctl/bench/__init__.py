"""`pdctl bench`, the P/D canary and `pdctl tune` (docs/bench.md).

Pure parts: `load` (the `vllm bench serve` command of a step and its result), `report` (plan
vs measured, `--compare`), `canary` (the comparison), `tune` (the rules). I/O: `remote` (runs
them over the SSH connections `up` and `top` use)."""
