"""Checked value types for spec fields that reach a command line, a script or an API object.

Patterns use fullmatch (`$` would accept a trailing newline). A value passed as one argument
must never read as an option ("-..."): `--privileged` as an image, `-oProxyCommand=...` as an
address."""

import ipaddress
import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from pdctl.spec.base import DNS1123_LABEL, EnvName, matching, refuse

# An image reference, as Docker and containerd parse it (distribution's reference grammar):
# [registry[:port]/]path[:tag][@digest]. The first part is a registry only when it holds a '.'
# or ':' or is `localhost`; the path's components are lower-case.
_DOMAIN_PART = r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
REGISTRY = re.compile(rf"({_DOMAIN_PART}(\.{_DOMAIN_PART})*|\[[0-9A-Fa-f:.]+\])(:[0-9]+)?")
_PATH_PART = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
REPOSITORY = re.compile(
    rf"{_PATH_PART}(/{_PATH_PART})*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,})?"
)
IMAGE_GRAMMAR = (
    "write [registry[:port]/]repository[:tag][@digest]: the repository in lower-case letters, "
    "digits and the separators '.', '_', '__', '-' between them, the tag at most 128 of "
    "letters, digits, '_', '.', '-', e.g. 'vllm/vllm-openai:v0.33.0' or "
    "'registry.example.com:5000/vllm@sha256:...'"
)
CONDA_ENV = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,31}\$?")
_DNS_PART = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME = re.compile(rf"{_DNS_PART}(\.{_DNS_PART})*\.?")
LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")
# Variables pdctl sets itself: a spec value would silently undo GPU placement or the cache.
RESERVED_ENV = {
    "CUDA_VISIBLE_DEVICES": "pdctl sets it from the GPUs it places (hosts[].gpus)",
    "LD_PRELOAD": "pdctl sets it for HAMi-core on sliced decode engines (decode.share); "
    "a library every engine loads belongs in the image or the environment",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "set model.lora.runtimeLoading (refused without "
    "secrets.apiKey: docs/security.md)",
    "HF_HOME": "set hosts[].hfCache (on Kubernetes the model-cache volume is mounted at "
    "/root/.cache/huggingface)",
}
# Variables the shell reads: a spec value would break the scripts pdctl runs on the hosts.
SHELL_ENV = {
    "PATH": "the start script finds vllm, setsid and its tools through it: choose the Python "
    "environment with hosts[].runtime, condaEnv or venv (or engine.image)",
    "BASH_ENV": "bash would run the file it names at the start of every script pdctl runs: "
    "prepare the environment with hosts[].venv or engine.image",
    "ENV": "sh would run the file it names in every interactive shell: prepare the "
    "environment with hosts[].venv or engine.image",
}
# A name that holds a secret: one of its '_'-separated words (camelCase words count too) is one
# of these, or two adjacent words are API_KEY, ACCESS_KEY or PRIVATE_KEY. Whole words, so
# TOKENIZERS_PARALLELISM and VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE are no secrets.
SECRET_LIKE = re.compile(
    r"(?:^|_)(TOKEN|SECRETS?|PASSWORD|PASSWD|CREDENTIALS?|APIKEY|(?:API|ACCESS|PRIVATE)_KEY)"
    r"(?:_|$)",
    re.I,
)
# Values no secret takes: a switch (HF_HUB_DISABLE_TOKEN=1 names a token but holds none).
NOT_SECRET_VALUES = frozenset({"0", "1", "true", "false", "yes", "no", "on", "off"})
# Length bounds by kind of value (every other string: source.MAX_SCALAR). A Hugging Face id is at
# most 96 + 1 + 96 characters; a local model folder is a path, so it gets room.
MAX_ARGUMENT = 1024  # model names, served names, revisions
MAX_IMAGE = 512  # Docker caps a repository name at 255 and a tag at 128


def argument(value: str) -> str:
    """A value passed as one command-line argument: it must not read as an option."""
    if len(value) > MAX_ARGUMENT:
        raise ValueError(f"is {len(value):,} characters long, more than {MAX_ARGUMENT:,}")
    if value.startswith("-") or value != value.strip():
        raise ValueError(
            f"{value!r} starts with '-' or has spaces around it, so a command line would "
            "misread it; remove them"
        )
    return value


def image(value: str) -> str:
    if len(value) > MAX_IMAGE:
        raise ValueError(f"is {len(value):,} characters long, more than {MAX_IMAGE}")
    first, slash, rest = value.partition("/")
    has_registry = bool(slash) and (any(c in first for c in ".:") or first == "localhost")
    ok = (
        bool(REGISTRY.fullmatch(first)) and bool(REPOSITORY.fullmatch(rest))
        if has_registry
        else bool(REPOSITORY.fullmatch(value))
    )
    if not ok:
        upper = "" if value.lower() == value else " (a repository name is lower-case)"
        raise refuse(f"{value!r} is not an image reference{upper}", IMAGE_GRAMMAR)
    return value


def registry(value: str) -> str:
    """HOST[:PORT] of a registry, as Docker reads one: with a '.' or ':', or `localhost`."""
    if not REGISTRY.fullmatch(value) or not (any(c in value for c in ".:") or value == "localhost"):
        raise refuse(f"{value!r} is not a registry host",
                     "write HOST[:PORT] with a '.' or a port (Docker reads a bare name as a "
                     "Docker Hub user), e.g. 'registry.internal:5000' or 'localhost:5000'")
    return value


def address(value: str) -> str:
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if len(value) > 253 or not HOSTNAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an IP address or a DNS name (e.g. 10.0.0.10 or gpu-a.lan)"
        )
    return value


def engine_env_name(key: str) -> str:
    """A key of `engine.env` / `<role>.env`: no variable pdctl sets itself or the shell reads
    (the error names the key, `engine.env.PATH`)."""
    if key in RESERVED_ENV:
        raise refuse(f"{key} is set by pdctl", f"remove {key}: {RESERVED_ENV[key]}")
    if key in SHELL_ENV:
        raise refuse(
            f"{key} would change how the shell runs pdctl's scripts",
            f"remove {key}: {SHELL_ENV[key]}",
        )
    return key


def secret_like(name: str) -> bool:
    """Whether a variable or field name names a secret (SECRET_LIKE, over its words: `HF_TOKEN`,
    `apiKey`, `secretKey`; not `TOKENIZERS_PARALLELISM`)."""
    return bool(SECRET_LIKE.search(re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)))


# Prefixes of issued tokens and keys (Hugging Face, OpenAI, GitHub, GitLab, Slack, AWS).
TOKEN_PREFIXES = ("hf_", "sk-", "ghp_", "gho_", "ghs_", "ghu_", "github_pat_", "glpat-", "xox",
                  "AKIA")


def token_like(text: str) -> bool:
    """Whether a text reads as a token's value, not a variable's name: 20 or more characters
    mixing lower-case, upper-case and digits, or 16 or more after an issued token's prefix
    with digits, mixed case or a '-' (`hf_token_file` is a name)."""
    lower, upper, digit = (any(test(c) for c in text) for test in
                           (str.islower, str.isupper, str.isdigit))
    if text.startswith(TOKEN_PREFIXES) and len(text) >= 16:
        return digit or (lower and upper) or "-" in text
    return len(text) >= 20 and lower and upper and digit


def secret_env_name(value: object) -> object:
    """`secrets.*.env` names a variable: a token pasted there is refused without showing it."""
    if isinstance(value, str) and token_like(value):
        raise refuse(
            "looks like the token itself, not the name of a variable holding it (not shown)",
            "write the variable's name, e.g. {env: HF_TOKEN}, export the token in that "
            "variable, and rotate the token if this file was shared",
        )
    return value


def engine_env(value: dict[str, str]) -> dict[str, str]:
    """Extra engine environment (`engine.env`, `prefill.env`, `decode.env`): no secrets (the
    keys are EngineEnvName). A switch's value (0/1, true/false, ...) is no secret whatever the
    name says."""
    for key, text in value.items():
        if secret_like(key) and text.strip().lower() not in NOT_SECRET_VALUES:
            raise ValueError(
                f"{key} looks like a secret; secrets never go in the spec: use "
                "`secrets.hfToken` / `secrets.apiKey` (a reference to an env var or Secret)"
            )
    return value


def url_host(host: str) -> str:
    """The host part of `host:port` or a URL: an IPv6 address goes in brackets."""
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]"
    except ValueError:
        pass
    return host


def host_port(host: str, port: int | str) -> str:
    """`host:port` for a URL or a connector address (`[2001:db8::1]:8100` for IPv6)."""
    return f"{url_host(host)}:{port}"


def label_key(key: str) -> str:
    """A Kubernetes label or taint key: [DNS-subdomain prefix '/'] name."""
    prefix, _, name = key.rpartition("/")
    ok = bool(LABEL_NAME.fullmatch(name)) and (
        not prefix
        or (len(prefix) <= 253 and all(DNS1123_LABEL.fullmatch(p) for p in prefix.split(".")))
    )
    if not ok:
        raise ValueError(
            f"{key!r} is not a Kubernetes label key: [prefix/]name, e.g. "
            "'nvidia.com/gpu.product' (name: letters, digits, '-', '_', '.', at most 63)"
        )
    return key


def label_value(value: str) -> str:
    if value and not LABEL_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a label value: at most 63 letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit"
        )
    return value


def host_dir(value: str) -> str:
    if not (value.startswith("/") or value.startswith("~/")):
        raise ValueError(f"{value!r} must be an absolute path or start with '~/'")
    return value


def mountable(value: str) -> str:
    """A host folder `docker run -v` can take: ':' and ',' are its separators."""
    if ":" in value or "," in value:
        raise ValueError(
            f"{value!r} holds ':' or ',', which `docker run -v` reads as separators; "
            "choose a folder without them"
        )
    return value


Argument = Annotated[str, AfterValidator(argument)]
EngineEnvName = Annotated[EnvName, AfterValidator(engine_env_name)]
# `secrets.*.env`: the name of the variable holding a secret, never the secret.
SecretEnvName = Annotated[EnvName, BeforeValidator(secret_env_name)]
# Extra engine environment (`engine.env`, `<role>.env`): no variable pdctl sets, no secrets.
EngineEnv = Annotated[dict[EngineEnvName, str], AfterValidator(engine_env)]
Image = Annotated[str, AfterValidator(image)]
Registry = Annotated[str, AfterValidator(registry)]
CondaEnv = Annotated[str, matching(
    CONDA_ENV, "is not a conda environment name: use letters, digits, '.', '_' and '-', not "
    "starting with '-' or '.'")]
UserName = Annotated[str, matching(
    USER, "is not a user name: use letters, digits, '.', '_' and '-', not starting with '-'")]
Address = Annotated[str, AfterValidator(address)]
SecretKey = Annotated[str, matching(
    SECRET_KEY, "is not a Secret key: use letters, digits, '-', '_' and '.'")]
LabelKey = Annotated[str, AfterValidator(label_key)]
LabelValue = Annotated[str, AfterValidator(label_value)]
HostDir = Annotated[str, AfterValidator(host_dir)]
MountableDir = Annotated[str, AfterValidator(host_dir), AfterValidator(mountable)]
