"""`pdctl --help`, stored so that `pdctl`, `pdctl --help` and `pdctl --version` answer without
importing typer, pydantic or any command (about 100 ms less). Generated; a test keeps it equal
to what typer prints: `python -m pdctl.cli.helptext` rewrites it."""

ROOT_HELP = (
    "Usage: pdctl [OPTIONS] COMMAND [ARGS]...\n"
    "\n"
    "  Deploy vLLM from one declarative spec: processes over SSH (phase 0),\n"
    "  Kubernetes (phase 1), prefill/decode disaggregation (phase 2) and HAMi-\n"
    "  sliced decode (phase 3).\n"
    "\n"
    "Options:\n"
    "  --version             Print the version.\n"
    "  --debug               Show tracebacks on errors (before or after the\n"
    "                        command).\n"
    "  --install-completion  Install completion for the current shell.\n"
    "  --show-completion     Show completion for the current shell, to copy it or\n"
    "                        customize the installation.\n"
    "  -h, --help            Show this message and exit.\n"
    "\n"
    "Commands:\n"
    "  version    Print the pdctl version.\n"
    "  init       Write a commented example spec for a phase (stdout, or -o...\n"
    "  validate   Check SPEC: one line per problem (file:line: field: what;...\n"
    "  render     Render SPEC: Kubernetes YAML for `kubectl apply -f -`, or...\n"
    "  schema     Print the spec's JSON Schema, for editors...\n"
    "  explain    Explain a spec field: type, default, allowed values,...\n"
    "  plan       Capacity plan for SPEC: does the model fit, KV cache, memory...\n"
    "  preflight  Check hosts or the cluster against SPEC before deploying:...\n"
    "  bundle     Download the vLLM wheel and its whole dependency closure...\n"
    "  up         Start SPEC's deployment (or bring it in line with SPEC) and...\n"
    "  diff       Show what `up` would change: on Kubernetes a server-side dry...\n"
    "  down       Stop SPEC's processes, containers or Kubernetes objects and...\n"
    "  restart    Restart UNITs (or every unit of --role) of SPEC's running...\n"
    "  status     Show every instance of SPEC and whether it is healthy.\n"
    "  logs       Print the log of UNIT (every unit's last lines when UNIT is...\n"
    "  top        Show how the running deployment of SPEC uses its GPUs: per...\n"
    "  adapters   List, load or unload LoRA adapters on every engine of SPEC...\n"
    "  bench      Load SPEC's running deployment with its workload (`vllm...\n"
    "  tune       Propose spec changes (P:D ratio, replicas, TP, max-num-seqs,...\n"
    "  scale      Set ROLE's instance count on SPEC's hosts: start new...\n"
    "  autoscale  Scale SPEC's roles on its SSH hosts with the spec's...\n"
)


def as_source(text: str) -> str:
    """The text as a parenthesised run of one string literal per line."""
    lines = "".join(f"\n    {_literal(line)}" for line in text.splitlines(keepends=True))
    return f"({lines}\n)"


def _literal(line: str) -> str:
    """A string literal for line, in double quotes as ruff format writes it."""
    if '"' in line or not line.isascii() or not line[:-1].isprintable():
        return repr(line)
    return '"' + line.replace("\\", "\\\\").replace("\n", "\\n") + '"'


if __name__ == "__main__":
    from pathlib import Path

    from pdctl.cli.app import root_help

    path = Path(__file__)
    head, _, tail = path.read_text().partition("ROOT_HELP = (")
    rest = tail.split("\n)\n", 1)[1]
    path.write_text(head + "ROOT_HELP = " + as_source(root_help()) + "\n" + rest)
