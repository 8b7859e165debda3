"""`pdctl preflight`: a file per topic, each with its commands, its parser and its check
(pdctl/preflight/registry.py lists them); the fact types in facts.py."""
