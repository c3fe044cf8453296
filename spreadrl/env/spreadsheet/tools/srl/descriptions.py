"""Upstream's own tool descriptions, taken from a copy of its yaml that a user holds."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from spreadrl.errors import ConfigError


def _facts(schema: dict[str, Any]) -> tuple[list[tuple[object, ...]], list[object]]:
    params = schema["function"].get("parameters") or {}
    props = params.get("properties") or {}
    return (
        [
            (k, v.get("type"), v.get("enum"), (v.get("items") or {}).get("type"))
            for k, v in props.items()
        ],
        list(params.get("required") or []),
    )


def with_upstream_descriptions(
    schemas: list[dict[str, Any]], yaml_path: str | Path
) -> list[dict[str, Any]]:
    """``schemas`` with the descriptions of a copy of upstream's ``spreadsheet_tools.yaml``.

    The released checkpoint read upstream's wording; this project does not ship
    it, but a user with the repository can point ``env.tool_descriptions`` at
    its yaml. Only descriptions are taken, and only for tools whose argument
    facts (names, order, types, enums, items, required) equal this preset's;
    anything else raises a ConfigError naming the file and the tool.
    """
    import yaml

    path = Path(yaml_path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"env.tool_descriptions {path}: cannot read it ({exc})") from None
    entries = data.get("tools") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f"env.tool_descriptions {path}: no 'tools' list (upstream's layout)")
    theirs = {}
    for entry in entries:
        schema = entry.get("tool_schema") if isinstance(entry, dict) else None
        name = ((schema or {}).get("function") or {}).get("name")
        if isinstance(name, str):
            theirs[name] = schema
    out = copy.deepcopy(schemas)
    for schema in out:
        fn = schema["function"]
        other = theirs.get(fn["name"])
        if other is None:
            continue
        if _facts(other) != _facts(schema):
            raise ConfigError(
                f"env.tool_descriptions {path}: the arguments of {fn['name']} differ from the "
                "spreadsheet-rl preset's; descriptions are taken only over equal facts"
            )
        if isinstance(other["function"].get("description"), str):
            fn["description"] = other["function"]["description"]
        for key, prop in fn["parameters"]["properties"].items():
            text = other["function"]["parameters"]["properties"][key].get("description")
            if isinstance(text, str):
                prop["description"] = text
            else:
                prop.pop("description", None)
    return out
