"""Self-contained HTML reports of a bench run, two compared runs and a capacity plan (pure:
report data in, one HTML string out; only the CLI writes the file). Charts are drawn with
matplotlib into inline SVG (docs/bench.md says why)."""
