"""pdctl: one declarative spec -> a running vLLM deployment, from bare metal to Kubernetes."""

__version__ = "0.1.0"
