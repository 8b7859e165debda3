"""The CLI layer: the only code that reads files and the environment, prints and exits."""
