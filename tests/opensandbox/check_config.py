"""Check a server config.toml with the real OpenSandbox server's own config model.

    $(tests/opensandbox/venv 0.2.2) tests/opensandbox/check_config.py CONFIG.toml

Loads the file with `opensandbox_server.config.load_config` (what the server does at startup with
`--config`, minus the environment overrides: OPENSANDBOX_SERVER_API_KEY and SANDBOX_CONFIG_PATH are
removed first), then walks the parsed TOML against the pydantic models (`AppConfig` and every model
nested in it) and lists every key no model field (name or alias) accepts. The models themselves
ignore unknown keys (pydantic's default `extra="ignore"`), so without this walk a misspelt key
would be dropped silently.

Prints one JSON object on stdout:
    {"valid": bool, "errors": [str], "unknown": ["table.key", ...], "config": {...} | null}
`errors` are the loader's messages (TOML syntax, validation); `config` is the loaded model dumped
as JSON (`model_dump(mode="json")`). Exit 0 = valid and no unknown keys, 1 = otherwise,
2 = usage or the package is missing.
"""

import json
import os
import sys
import types
import typing


def _model_types(annotation):
    """The pydantic model classes an annotation can hold, with where they sit: "" (the value
    itself), "[]" (list/tuple/set items) or "{}" (dict values)."""
    from pydantic import BaseModel

    found = []

    def walk(tp, where):
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is typing.Annotated:
            walk(args[0], where)
        elif origin in (typing.Union, types.UnionType):
            for a in args:
                walk(a, where)
        elif origin in (list, tuple, set, frozenset) or (origin and getattr(origin, "__name__", "") in ("Sequence", "List")):
            for a in args:
                if a is not Ellipsis:
                    walk(a, "[]")
        elif origin is dict or (origin and getattr(origin, "__name__", "") in ("Mapping", "Dict")):
            if len(args) == 2:
                walk(args[1], "{}")
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            found.append((tp, where))
        elif isinstance(tp, typing.ForwardRef):
            pass

    walk(annotation, "")
    return found


def _field_names(model):
    """Key → field name for every key the model accepts (field names and aliases)."""
    names = {}
    for name, field in model.model_fields.items():
        names[name] = name
        for alias in (field.alias, field.validation_alias):
            if isinstance(alias, str):
                names[alias] = name
            elif alias is not None and hasattr(alias, "choices"):
                for choice in alias.choices:
                    if isinstance(choice, str):
                        names[choice] = name
    return names


def unknown_keys(model, data, path, out):
    """Append to `out` the dotted path of every key of `data` that `model` has no field for."""
    if not isinstance(data, dict):
        return
    names = _field_names(model)
    for key, value in data.items():
        at = f"{path}.{key}" if path else key
        if key not in names:
            out.append(at)
            continue
        field = model.model_fields[names[key]]
        for sub, where in _model_types(field.annotation):
            if where == "" and isinstance(value, dict):
                unknown_keys(sub, value, at, out)
            elif where == "[]" and isinstance(value, list):
                for i, item in enumerate(value):
                    unknown_keys(sub, item, f"{at}[{i}]", out)
            elif where == "{}" and isinstance(value, dict):
                for k, item in value.items():
                    unknown_keys(sub, item, f"{at}.{k}", out)


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    path = argv[1]
    for var in ("OPENSANDBOX_SERVER_API_KEY", "SANDBOX_CONFIG_PATH"):
        os.environ.pop(var, None)
    try:
        from opensandbox_server import config as server_config
    except ImportError as exc:
        print(f"check_config: opensandbox_server is not installed in {sys.executable}: {exc}", file=sys.stderr)
        return 2
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    result = {"valid": False, "errors": [], "unknown": [], "config": None}
    try:
        loaded = server_config.load_config(path)
        result["config"] = loaded.model_dump(mode="json")
    except Exception as exc:  # noqa: BLE001 - every loader failure is a finding
        result["errors"].append(f"{type(exc).__name__}: {exc}")
    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
        unknown_keys(server_config.AppConfig, raw, "", result["unknown"])
    except Exception as exc:  # noqa: BLE001
        result["errors"].append(f"reading {path}: {type(exc).__name__}: {exc}")
    result["valid"] = not result["errors"] and not result["unknown"]
    print(json.dumps(result, sort_keys=True))
    return 0 if result["valid"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
