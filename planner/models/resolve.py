"""Turn what the user typed into a ModelSpec.

In order: a path to a config.json or a model directory; a catalog name, HF id
or alias; a model in the local Hugging Face cache (read offline, never
downloaded); otherwise an error naming the closest catalog models. Explicit
dimensions and a bare parameter count have their own entry points.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from planner.errors import UserInputError
from planner.limits import MAX_LAYERS, MAX_PARAMS, MAX_WIDTH, check_count, check_number
from planner.models.catalog import find_model, suggest_models
from planner.models.legacy_names import catalog_name
from planner.models.spec import ModelSpec

MAX_MODEL_NAME = 4096  # PATH_MAX on Linux
# A config.json is kilobytes; a path to a weights file (gigabytes) is read no further than its first bytes (an audit:
# a GGUF given as --model was read whole, 2 GB of memory for a 1 GB file, before "not valid JSON").
MAX_CONFIG_BYTES = 16 * 2**20
WEIGHT_FILES = {b"GGUF": "a GGUF weights file", b"PK\x03\x04": "a zip archive (a torch checkpoint?)"}
WEIGHT_SUFFIXES = {".safetensors": "a safetensors weights file", ".gguf": "a GGUF weights file",
                   ".bin": "a weights file", ".pt": "a torch checkpoint", ".pth": "a torch checkpoint",
                   ".ckpt": "a checkpoint", ".onnx": "an ONNX model"}  # fmt: skip


def resolve_model(name: str, *, exact_counts: bool = True, other_ways: str = "") -> ModelSpec:
    """The spec for a catalog name, HF id, alias, config path or cached HF model.

    exact_counts builds a config that is not in the catalog on the meta device
    (importing torch and transformers) to count its parameters exactly;
    without it, or when transformers cannot build it, the formula counts stand.
    """
    if not name or not name.strip():
        raise UserInputError(
            "no model given; name a catalog model (see 'hardware-selector models') or a config.json path"
        )
    if len(name) > MAX_MODEL_NAME:  # no path, catalog name or HF id is this long (and the OS refuses the path)
        raise UserInputError(
            f"--model is {len(name):,} characters long; give a catalog name, an HF id or a config.json path"
        )
    path = Path(name).expanduser()
    if path.exists():
        return spec_from_config_path(path, exact_counts=exact_counts)
    # The seed interface's names (llama-7b: planner/models/legacy_names.py) mean the same model at every door.
    spec = find_model(name) or find_model(catalog_name(name))
    if spec is not None:
        return spec
    cached_config = find_in_hf_cache(name)
    if cached_config is not None:
        return spec_from_config_path(cached_config, exact_counts=exact_counts, display_name=name)
    # A path by its shape, or an HF-id-shaped name whose folder is here (qwen3-8b/config.jsn beside qwen3-8b/).
    local_parent = "/" in name and path.parent != Path(".") and path.parent.is_dir()
    if name.strip().endswith(".json") or name.strip().startswith(("/", "./", "../", "~")) or local_parent:
        # a path, not a name: "unknown model ... or pass a config.json path" told its user to do what they did
        raise UserInputError(f"{name}: no such file or folder; point at a model directory or its config.json")
    suggestions = suggest_models(name)
    hint = (
        f"did you mean {', '.join(repr(s) for s in suggestions)}?" if suggestions else "see 'hardware-selector models'"
    )
    # other_ways: what else the asking door accepts (`plan`'s --params); the seed CLI and the API have no such flags
    raise UserInputError(f"unknown model '{name}'; {hint} (or pass a config.json path{other_ways})")


def spec_from_config_path(path: Path, *, exact_counts: bool = True, display_name: str | None = None) -> ModelSpec:
    """Read a local config.json (or a directory holding one) into a ModelSpec."""
    config_path = path / "config.json" if path.is_dir() else path
    if path.is_dir() and path.name == "config.json" and not config_path.is_file():
        raise UserInputError(f"{path} is a folder, not a config.json file; point at the model folder that holds one")
    if not config_path.is_file():
        raise UserInputError(f"{path}: no config.json there; point at a model directory or its config.json")
    from planner.models.hf_config import spec_from_hf_config  # the config readers: not for a catalog model

    config = read_config_json(config_path)
    name = display_name or (path.name if path.is_dir() else config_path.parent.name) or config_path.stem
    spec = spec_from_hf_config(config, name=name, origin=str(config_path), source=str(config_path))
    if exact_counts:
        spec = _with_meta_device_counts(spec, config)
    return spec


def _strict_object(pairs: list[tuple[str, object]], config_path: Path) -> dict:
    """A JSON object whose keys are each given once and whose numbers are finite: json.loads takes the last of
    duplicate keys and reads NaN and Infinity, and a model config holds neither."""
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise UserInputError(f"{config_path}: key {key!r} is given twice; keep the one you mean")
        if isinstance(value, float) and not math.isfinite(value):
            raise UserInputError(f"{config_path}: {key} is {value}, not a finite number; fix the value")
        seen[key] = value
    return seen


def _refuse_weights_file(config_path: Path) -> None:
    """One line for a weights file or anything too large to be a config.json, read no further than 4 bytes."""
    with config_path.open("rb") as file:
        kind = WEIGHT_FILES.get(file.read(4)) or WEIGHT_SUFFIXES.get(config_path.suffix.lower())
        size = os.fstat(file.fileno()).st_size
    if kind is None and size <= MAX_CONFIG_BYTES:
        return
    what = kind or f"{size / 2**20:,.0f} MiB, too large for a config.json (those are kilobytes)"
    raise UserInputError(f"{config_path} is {what}; point --model at the model's folder or its config.json")


def read_config_json(config_path: Path) -> dict:
    try:
        _refuse_weights_file(config_path)
        text = config_path.read_text(encoding="utf-8")
    except OSError as error:
        raise UserInputError(f"{config_path}: cannot read it ({error.strerror})") from None
    except UnicodeDecodeError as error:
        raise UserInputError(
            f"{config_path}: not UTF-8 text (byte {error.object[error.start]:#04x} at position {error.start}); "
            "a config.json is UTF-8 JSON"
        ) from None
    try:
        config = json.loads(text, object_pairs_hook=lambda pairs: _strict_object(pairs, config_path))
    except json.JSONDecodeError as error:
        raise UserInputError(
            f"{config_path}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})"
        ) from None
    except RecursionError:
        raise UserInputError(f"{config_path}: nested too deeply to be a model config") from None
    if not isinstance(config, dict):
        raise UserInputError(f"{config_path}: expected a JSON object of config fields, got {type(config).__name__}")
    return config


def _with_meta_device_counts(spec: ModelSpec, config: dict) -> ModelSpec:
    """Replace formula counts with exact ones when transformers can build the model."""
    try:
        from planner.models.param_count import count_params_on_meta
        from planner.models.param_count_cache import cached_counts

        counts = cached_counts(config, count_params_on_meta)
    except ImportError:
        return spec  # transformers is not installed: the formula counts stand, and say so
    except (ValueError, KeyError, TypeError, AttributeError):
        # A config transformers rejects that our parser accepted; formula counts are still honest.
        return spec
    except Exception as error:
        # transformers 5 validates configs through huggingface_hub's strict dataclasses, whose
        # errors derive from Exception only (StrictDataclassError): the same case as above.
        if type(error).__module__.startswith("huggingface_hub"):
            return spec
        raise
    return spec.model_copy(update={"params": counts})


def hf_cache_roots() -> list[Path]:
    """Where huggingface_hub keeps downloaded repos, following its env variables."""
    roots: list[Path] = []
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            roots.append(Path(os.environ[variable]).expanduser())
    if os.environ.get("HF_HOME"):
        roots.append(Path(os.environ["HF_HOME"]).expanduser() / "hub")
    cache_home = Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser()
    roots.append(cache_home / "huggingface" / "hub")
    return [root for root in dict.fromkeys(roots) if root.is_dir()]


def find_in_hf_cache(name: str) -> Path | None:
    """config.json of a model already in the local HF cache, looked up offline.

    Accepts 'org/name' or a bare 'name' (matched case-insensitively); prefers
    the snapshot that refs/main points at, else the newest one.
    """
    wanted = name.strip().replace("/", "--").lower()
    for root in hf_cache_roots():
        for repo_dir in sorted(root.glob("models--*")):
            repo = repo_dir.name[len("models--") :].lower()
            if repo != wanted and repo.split("--", 1)[-1] != wanted:
                continue
            config = _snapshot_config(repo_dir)
            if config is not None:
                return config
    return None


def _snapshot_config(repo_dir: Path) -> Path | None:
    main_ref = repo_dir / "refs" / "main"
    if main_ref.is_file():
        candidate = repo_dir / "snapshots" / main_ref.read_text().strip() / "config.json"
        if candidate.is_file():
            return candidate
    snapshots = sorted(
        (path for path in (repo_dir / "snapshots").glob("*/config.json")),
        key=lambda path: path.stat().st_mtime,
        reverse=True,
    )
    return snapshots[0] if snapshots else None


def spec_from_dimensions(
    *,
    hidden: int,
    layers: int,
    heads: int,
    ffn: int,
    vocab: int,
    kv_heads: int | None = None,
    experts: int = 0,
    top_k: int | None = None,
    mlp: str = "gated",
    positions: str | None = None,
    max_positions: int | None = None,
) -> ModelSpec:
    """A decoder of these dimensions: Llama-shaped (or Mixtral-shaped with experts) for a gated MLP; for a
    standard one GPT-2-, GPT-NeoX- or MPT-shaped by its positions (planner/models/dimension_configs.py).
    Counts come from the formula."""
    from planner.models.dimension_configs import check_positions, dimension_config
    from planner.models.hf_config import spec_from_hf_config

    for flag, value in (
        ("--hidden", hidden),
        ("--layers", layers),
        ("--heads", heads),
        ("--ffn", ffn),
        ("--vocab", vocab),
    ):
        if value is None:
            raise UserInputError(f"{flag} must be a positive whole number")
        check_count(flag, value, high=MAX_LAYERS if flag == "--layers" else MAX_WIDTH)
    if hidden % heads:
        raise UserInputError(f"--heads {heads} does not divide --hidden {hidden}")
    kv_heads = kv_heads or heads
    if heads % kv_heads:
        raise UserInputError(f"--kv-heads {kv_heads} must divide --heads {heads}")
    if experts and not top_k:
        raise UserInputError("--experts needs --top-k (experts each token is routed to)")
    if top_k and not experts:
        raise UserInputError("--top-k needs --experts")
    if experts and top_k and top_k > experts:  # was the config field's name, num_experts_per_tok (an audit)
        raise UserInputError(f"--top-k {top_k} exceeds --experts {experts}: a token is routed to that many of them")
    chosen, limit = check_positions(mlp, positions, max_positions)
    if mlp == "standard" and (experts or kv_heads != heads):  # named as given: --kv-heads was blamed unasked
        given = " and ".join(flag for flag, used in (("--experts", experts), ("--kv-heads", kv_heads != heads)) if used)
        raise UserInputError(f"{given} describe{'s' if ' and ' not in given else ''} gated (Llama/Mixtral-shaped) "
                             "models; add --mlp gated")  # fmt: skip
    config = dimension_config(hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, ffn=ffn, vocab=vocab,
                              experts=experts, top_k=top_k, mlp=mlp, positions=chosen, max_positions=limit)  # fmt: skip
    name = f"custom-h{hidden}-l{layers}" + (f"-e{experts}x{top_k}" if experts else "")
    return spec_from_hf_config(config, name=name, origin="dimensions", source="dimension flags")


# (parameters, layers, hidden, heads) of the GPT-3 family (Brown et al. 2020, Table 2.1):
# the shapes a bare parameter count is mapped onto.
GPT3_SHAPES = (
    (125e6, 12, 768, 12),
    (350e6, 24, 1024, 16),
    (760e6, 24, 1536, 16),
    (1.3e9, 24, 2048, 16),
    (2.7e9, 32, 2560, 32),
    (6.7e9, 32, 4096, 32),
    (13e9, 40, 5120, 40),
    (175e9, 96, 12288, 96),
)


MAX_PARAM_COUNT = 1e13  # --params above this is beyond any trainable model (a mistyped exponent)
# The vocabulary and positions of the shape --params builds: GPT-2's tokenizer, learned positions to 8192.
PARAM_COUNT_VOCAB, PARAM_COUNT_POSITIONS = 50257, 8192


def spec_from_param_count(params: float) -> ModelSpec:
    """A GPT-shaped decoder whose parameter count is exactly `params`.

    Layers and hidden size follow the GPT-3 family's aspect ratio (the nearest
    published shape below, scaled in width), so activation estimates stay
    plausible; the count itself is what the user asked for, not the formula's.
    The width solves 12 L h^2 + (vocab + positions) h = N, so the shape's own parts (embedding, layers) fit in
    the total asked for (an audit: --params 2e7 had a 22M embedding in a 20M model); a count below the smallest
    such shape is refused, naming it.
    """
    params = check_number("--params", params, high=MAX_PARAMS, low=-math.inf)  # the bounds are the lines below
    if params > MAX_PARAM_COUNT:
        raise UserInputError(
            f"--params must be at most {MAX_PARAM_COUNT:g} (beyond any trainable model), not {params:g}; "
            "check the exponent"
        )
    count = int(round(params)) if params > 0 else 0
    base = max((shape for shape in GPT3_SHAPES if shape[0] <= count), default=GPT3_SHAPES[0])
    _, layers, hidden, heads = base
    head_dim = hidden // heads
    smallest = _param_count_shape(layers, head_dim, head_dim)
    if count < smallest.params.total:
        least = smallest.params.total
        raise UserInputError(
            f"--params must be at least {least:,} (the smallest GPT-shaped model it builds: {layers} layers x "
            f"{head_dim} hidden, GPT-2's {PARAM_COUNT_VOCAB:,}-token vocabulary), not {params:g}; pass "
            f"--params {math.ceil(least / 1e5) * 1e5:g} or more, or state the dimensions (--hidden, --layers, ...)"
        )
    embedding = PARAM_COUNT_VOCAB + PARAM_COUNT_POSITIONS
    width = (-embedding + math.sqrt(embedding**2 + 48 * layers * count)) / (24 * layers)
    hidden = max(head_dim, int(round(width / head_dim)) * head_dim)
    spec = _param_count_shape(layers, hidden, head_dim)
    while spec.params.total > count and hidden > head_dim:  # rounded up past the total: one head narrower
        hidden -= head_dim
        spec = _param_count_shape(layers, hidden, head_dim)
    counts = spec.params.model_copy(
        update={
            "total": count,
            "trainable": count,
            "active_per_token": count,
            "source": "formula",
            "source_detail": f"requested --params {params:g}; GPT-3-shaped {layers} layers x {hidden} hidden",
        }
    )
    return spec.model_copy(update={"params": counts, "name": f"gpt-{count / 1e9:g}b", "origin": "parameter count"})


def _param_count_shape(layers: int, hidden: int, head_dim: int) -> ModelSpec:
    """The GPT-shaped decoder --params builds at this width, with its own (formula) counts."""
    return spec_from_dimensions(
        hidden=hidden,
        layers=layers,
        heads=hidden // head_dim,
        ffn=4 * hidden,
        vocab=PARAM_COUNT_VOCAB,
        mlp="standard",
        max_positions=PARAM_COUNT_POSITIONS,
    )
