"""Targets: apply a rendered bundle over SSH (paramiko), Docker (docker SDK) or Kubernetes."""
