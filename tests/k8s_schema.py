"""Checks a manifest against the Kubernetes API's schema, offline.

The schema is the ``kubernetes`` Python client's models, which are generated
from the API's OpenAPI spec: each model's ``attribute_map`` names the fields
the API knows and ``openapi_types`` their types. The client itself ignores
unknown fields when it deserializes, so this walks the document and rejects
them (a misspelt ``restartPolicy`` would otherwise pass), checks every value's
type, then builds the models, which reject a missing required field (newer,
pydantic-based clients also check everything above themselves).
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes.client
from kubernetes.client import ApiClient

# Older clients write list[T] and dict(K, V); newer (pydantic) ones List[T],
# Dict[K, V] and Optional[T].
_OPTIONAL = re.compile(r"Optional\[(.+)\]")
_LIST = re.compile(r"(?:list|List)\[(.+)\]")
_DICT = re.compile(r"(?:dict\(|Dict\[)([^,]+), (.+)[)\]]")
_PRIMITIVES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "object": (object,),  # IntOrString, Quantity, raw JSON
    "datetime": (str,),
    "date": (str,),
}


def schema_errors(data: Any, type_name: str, path: str = "") -> list[str]:
    """Every unknown field and mistyped value of ``data`` as ``type_name``."""
    if m := _OPTIONAL.fullmatch(type_name):
        type_name = m.group(1)
    if m := _LIST.fullmatch(type_name):
        if not isinstance(data, list):
            return [f"{path}: expected a list of {m.group(1)}, got {type(data).__name__}"]
        return [e for i, v in enumerate(data) for e in schema_errors(v, m.group(1), f"{path}[{i}]")]
    if m := _DICT.fullmatch(type_name):
        if not isinstance(data, dict):
            return [f"{path}: expected a map, got {type(data).__name__}"]
        return [e for k, v in data.items() for e in schema_errors(v, m.group(2), f"{path}.{k}")]
    if type_name in _PRIMITIVES:
        ok = isinstance(data, _PRIMITIVES[type_name])
        if type_name in ("int", "float") and isinstance(data, bool):
            ok = False
        return [] if ok else [f"{path}: expected {type_name}, got {data!r}"]
    model = getattr(kubernetes.client.models, type_name)
    if not isinstance(data, dict):
        return [f"{path}: expected a {type_name} object, got {type(data).__name__}"]
    by_json = {json_key: attr for attr, json_key in model.attribute_map.items()}
    errors = []
    for key, value in data.items():
        attr = by_json.get(key)
        if attr is None:
            errors.append(f"{path}.{key}: not a field of {type_name}")
            continue
        errors += schema_errors(value, model.openapi_types[attr], f"{path}.{key}")
    return errors


def validate(data: dict[str, Any], type_name: str) -> object:
    """The model built from ``data``; AssertionError naming every schema error."""
    errors = schema_errors(data, type_name, type_name)
    assert not errors, "\n".join(errors)
    model = getattr(kubernetes.client.models, type_name)
    if hasattr(model, "model_validate"):
        # pydantic models (client >= 35): strict types, extra fields forbidden,
        # required fields enforced; a ValidationError is a ValueError.
        return model.from_dict(data)
    # Older models: the setters raise ValueError for a missing required field.
    return ApiClient()._ApiClient__deserialize(data, type_name)
