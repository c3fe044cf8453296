"""Typed configuration: nested dataclasses loaded from YAML with dotted CLI overrides.

``load_config(GRPOConfig, "configs/tiny-cpu.yaml", ["optim.lr=2e-6"])`` reads
the YAML, applies the overrides (values parsed as YAML scalars), checks every
key and type, and builds the dataclasses. Errors name the full key path, the
bad value and what is allowed; unknown keys get a "did you mean". Each field
documents itself through ``field(metadata={"help": ...})``.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeAlias, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from spreadrl.errors import ConfigError

T = TypeVar("T")

YAMLValue: TypeAlias = "str | int | float | bool | None | list[YAMLValue] | dict[str, YAMLValue]"
"""A config value as ``yaml.safe_load`` reads it: a scalar, a list or a mapping of them."""


class Section:
    """Base of every config section: ``validate()`` runs whenever one is built.

    From YAML, from overrides or in code (``RolloutConfig(max_turns=0)``), a
    section checks its cross-field rules in ``__post_init__``, so no path skips them.
    """

    def __post_init__(self) -> None:
        validate = getattr(self, "validate", None)
        if callable(validate):
            validate()


def option(default: T, help: str, **kwargs: bool) -> T:
    """A dataclass field with help text (lists and dicts get a default factory).

    Typed as its default, as :func:`dataclasses.field` is, so ``lr: float = option(1e-6, ...)``
    reads as a float; ``kwargs`` are field's flags (``repr``, ``compare``, ...)."""
    if isinstance(default, list | dict):
        value = default
        return dataclasses.field(
            default_factory=lambda: type(value)(value), metadata={"help": help}, **kwargs
        )
    return dataclasses.field(default=default, metadata={"help": help}, **kwargs)


def section(cls: type[T], help: str) -> T:
    """A nested config section with its own defaults."""
    return dataclasses.field(default_factory=cls, metadata={"help": help})


def _type_name(tp: object) -> str:
    """A type annotation as the error messages and docs spell it (``int | None``)."""
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in get_args(tp))}]"
    return getattr(tp, "__name__", str(tp))


_YAML_BOOLS = {True: ("on", "yes", "true"), False: ("off", "no", "false")}


def _coerce(value: YAMLValue, tp: object, path: str) -> object:
    """``value`` as the annotation ``tp`` wants it (a nested section built, a number from a
    string, a tuple from a list), or a ConfigError naming ``path``."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping of {tp.__name__} fields, got {value!r}")
        return from_dict(tp, value, path)
    if origin is Literal:
        choices = get_args(tp)
        if isinstance(value, bool) and value not in choices:
            # YAML 1.1 reads a bare off/no/on/yes as a bool; map it back to the word
            words = [c for c in choices if isinstance(c, str) and c.lower() in _YAML_BOOLS[value]]
            value = words[0] if len(words) == 1 else value
        if value not in choices:
            raise ConfigError(
                f"{path}: {value!r} is not allowed; choose one of {', '.join(map(repr, choices))}"
            )
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, path)
            except ConfigError:
                continue
        allowed = "null or " if type(None) in args else ""
        raise ConfigError(
            f"{path}: {value!r} does not fit {_type_name(tp)} (use {allowed}"
            f"{' | '.join(_type_name(a) for a in args if a is not type(None))})"
        )
    if origin in (list, tuple, Sequence) or tp in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{path}: expected a list, got {value!r}")
        args = get_args(tp) or (Any,)
        if origin is tuple and len(args) > 1 and args[1] is not Ellipsis:
            if len(value) != len(args):
                raise ConfigError(f"{path}: expected {len(args)} items, got {len(value)}")
            return tuple(
                _coerce(v, a, f"{path}[{i}]")
                for i, (v, a) in enumerate(zip(value, args, strict=True))
            )
        items = [_coerce(v, args[0], f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}")
        key_tp, value_tp = get_args(tp) or (Any, Any)
        return {
            _coerce(k, key_tp, f"{path}.{k}"): _coerce(v, value_tp, f"{path}.{k}")
            for k, v in value.items()
        }
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{path}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)  # YAML reads "1e-6" as a string
            except ValueError:
                pass
        raise ConfigError(f"{path}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{path}: expected a string, got {value!r}")
    if tp is Path:
        return Path(str(value))
    return value


def from_dict(cls: type[T], data: dict[str, YAMLValue], path: str = "") -> T:
    """Build dataclass ``cls`` from a mapping, checking keys and types recursively."""
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs = {}
    for key, value in data.items():
        where = f"{path}.{key}" if path else key
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown key {where!r}{hint} (valid keys: {', '.join(fields)})")
        kwargs[key] = _coerce(value, hints[key], where)
    obj = cls(**kwargs)
    if not isinstance(obj, Section):  # a Section validated itself in __post_init__
        validate = getattr(obj, "validate", None)
        if callable(validate):
            validate()
    return obj


def _set_dotted(data: dict[str, YAMLValue], dotted: str, value: YAMLValue) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[keys[-1]] = value


class DuplicateKeyError(yaml.YAMLError):
    """A mapping that names one key twice (YAML would silently keep the last value)."""

    def __init__(self, key: str, first: int, second: int) -> None:
        super().__init__(f"key {key!r} appears twice (lines {first} and {second}); keep one")


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that repeats a key."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.value == "<<":
                continue
            line = key_node.start_mark.line + 1
            if key_node.value in seen:
                raise DuplicateKeyError(key_node.value, seen[key_node.value], line)
            seen[key_node.value] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> YAMLValue:
    """``yaml.safe_load``, but a repeated key is a :class:`DuplicateKeyError`, not the last value."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


def parse_override(text: str) -> tuple[str, YAMLValue]:
    """``optim.lr=2e-6`` -> ("optim.lr", 2e-06); the value is read as YAML."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like key.path=value")
    key, raw = text.split("=", 1)
    try:
        value = load_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: value is not valid YAML ({exc})") from exc
    return key.strip(), value


def read_recipe(path: str | Path) -> dict[str, YAMLValue]:
    """The mapping a recipe file holds; ``path`` may name a shipped recipe (``tiny-cpu``).

    A missing file, a folder, a binary or empty file, or YAML that is no mapping is
    one :class:`ConfigError` naming the file, never a fall-back to the defaults.
    """
    from spreadrl.recipes import find_recipe

    file = find_recipe(path)
    try:
        text = file.read_text()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a YAML recipe (a binary file)") from exc
    try:
        loaded = load_yaml(text)
    except DuplicateKeyError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from exc
    if loaded is None:  # empty, or comments only: a recipe that says nothing is a mistake
        raise ConfigError(f"{path}: the recipe file is empty (write {{}} for the defaults)")
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys")
    return loaded


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """Load ``cls`` from a YAML file (optional) plus dotted overrides.

    An error is blamed on what caused it: the recipe file when the recipe alone
    fails, else the command line's overrides (the ones the message names).
    """
    import copy

    data: dict[str, YAMLValue] = {}
    if path is not None:
        data = read_recipe(path)
    merged = copy.deepcopy(data)
    for text in overrides:
        key, value = parse_override(text)
        _set_dotted(merged, key, value)
    try:
        return from_dict(cls, merged)
    except ConfigError as exc:
        raise ConfigError(f"{_blame(cls, data, path, overrides, str(exc))}{exc}") from exc


def _blame(
    cls: type,
    data: dict[str, YAMLValue],
    path: str | Path | None,
    overrides: Sequence[str],
    error: str,
) -> str:
    """The prefix naming what caused ``error``: ``recipe.yaml: `` or ``command line k=v: ``."""
    recipe = f"{path}: " if path else ""
    if not overrides:
        return recipe
    try:
        from_dict(cls, data)
    except ConfigError:
        return recipe  # the recipe alone fails: the file is at fault
    named = [t for t in overrides if t.split("=", 1)[0].strip() in error]
    return f"command line {' '.join(named or overrides)}: "


def unknown_keys(cls: type, data: dict[str, YAMLValue], prefix: str = "") -> list[str]:
    """The dotted keys of ``data`` that ``cls`` has no field for (nested sections walked)."""
    hints = get_type_hints(cls)
    unknown = []
    for key, value in data.items():
        if key not in hints:
            unknown.append(f"{prefix}{key}")
        elif dataclasses.is_dataclass(hints[key]) and isinstance(value, dict):
            unknown += unknown_keys(hints[key], value, f"{prefix}{key}.")
    return unknown


def config_to_dict(obj: object) -> YAMLValue:
    """Plain dicts, lists and scalars (tuples become lists, paths strings), for YAML/JSON."""
    if dataclasses.is_dataclass(obj):
        return section_dict(obj)
    if isinstance(obj, list | tuple):
        return [config_to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: config_to_dict(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    return obj


def section_dict(section: object) -> dict[str, YAMLValue]:
    """A settings dataclass as the mapping :func:`config_to_dict` gives for it."""
    if not dataclasses.is_dataclass(section):
        raise TypeError(f"not a settings section: {type(section).__name__}")
    return {f.name: config_to_dict(getattr(section, f.name)) for f in dataclasses.fields(section)}


@dataclasses.dataclass(frozen=True)
class ConfigRecord:
    """A recipe's whole config as plain data, made once per run: the mapping a run folder
    records (``run.json``) and trackers log, and its YAML (``config.yaml``, which
    :func:`load_config` reads back to an equal object)."""

    data: dict[str, YAMLValue]
    yaml: str


def config_record(cfg: object) -> ConfigRecord:
    """``cfg`` (a settings dataclass) serialised once, both ways."""
    data = section_dict(cfg)
    return ConfigRecord(data, dump_config(data))


def dump_config(obj: object) -> str:
    """YAML that ``load_config`` reads back to an equal object."""
    return yaml.safe_dump(config_to_dict(obj), sort_keys=False)


def describe_config(cls: type, prefix: str = "") -> list[tuple[str, str, object, str]]:
    """(key path, type, default, help) for every leaf field, for docs and --help."""
    rows: list[tuple[str, str, object, str]] = []
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            rows += describe_config(tp, path + ".")
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        rows.append((path, _type_name(tp), default, f.metadata.get("help", "")))
    return rows


def config_table(cls: type) -> str:
    """A Markdown table of every key of ``cls``: path, type, default, help."""
    lines = ["| key | type | default | help |", "|---|---|---|---|"]
    for path, tp, default, help_text in describe_config(cls):
        shown = yaml.safe_dump(config_to_dict(default), default_flow_style=True).strip()
        shown = shown.removesuffix("\n...").removesuffix("...").strip()
        cells = [f"`{c}`" for c in (path, tp, shown)] + [help_text]
        # GitHub tables need "|" escaped, even inside code spans
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


__all__ = [
    "load_config",
    "load_yaml",
    "unknown_keys",
    "ConfigRecord",
    "config_record",
    "dump_config",
    "config_to_dict",
    "describe_config",
    "config_table",
    "from_dict",
    "option",
    "parse_override",
    "section",
    "Section",
]
