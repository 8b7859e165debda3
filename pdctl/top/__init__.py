"""`pdctl top`: is the GPU compute of the running deployment used well?

metrics (Prometheus text -> samples), window (two samples -> figures), gpu (telemetry),
verdict (pure rules over a window), source (where the figures come from: I/O), dashboard
(rich rendering)."""
