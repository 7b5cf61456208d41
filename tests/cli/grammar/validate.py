#!/usr/bin/env python3
"""validate.py SCHEMA [FILE]: each line of FILE (or stdin) is a JSON string
holding a generated text; exit 1 naming the first text that is not a JSON
document valid under SCHEMA.

A validator of its own for the keywords the tests' schemas use (type,
properties, required, additionalProperties, items, minItems, maxItems,
enum, const, anyOf, minimum, maximum, minLength, maxLength, pattern), so
that the check does not share code with llm-run. Where the jsonschema
package is installed, it is consulted as well."""
import json
import re
import sys

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def valid(v, s):
    if s is True or s == {}:
        return True
    if "anyOf" in s:
        return any(valid(v, x) for x in s["anyOf"])
    if "enum" in s and v not in s["enum"]:
        return False
    if "const" in s and v != s["const"]:
        return False
    t = s.get("type")
    if isinstance(t, list):
        return any(valid(v, dict(s, type=x)) for x in t)
    if t == "integer":
        if not isinstance(v, int) or isinstance(v, bool):
            return False
    elif t == "number":
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return False
    elif t is not None and not isinstance(v, TYPES[t]):
        return False
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if v < s.get("minimum", v) or v > s.get("maximum", v):
            return False
    if isinstance(v, str):
        if not s.get("minLength", 0) <= len(v) <= s.get("maxLength", len(v)):
            return False
        if "pattern" in s and not re.search(s["pattern"], v):
            return False
    if isinstance(v, list):
        if not s.get("minItems", 0) <= len(v) <= s.get("maxItems", len(v)):
            return False
        if not all(valid(x, s.get("items", True)) for x in v):
            return False
    if isinstance(v, dict):
        props = s.get("properties", {})
        if any(k not in v for k in s.get("required", [])):
            return False
        for k, x in v.items():
            if k in props:
                if not valid(x, props[k]):
                    return False
            elif s.get("additionalProperties", False) is False:
                return False
    return True


def main():
    schema = json.load(open(sys.argv[1]))
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    src = open(sys.argv[2]) if len(sys.argv) > 2 else sys.stdin
    n = 0
    for line in src:
        text = json.loads(line)
        try:
            doc = json.loads(text)
        except ValueError as e:
            sys.exit(f"not JSON ({e}): {text!r}")
        if not valid(doc, schema):
            sys.exit(f"not valid under the schema: {text!r}")
        if jsonschema:
            jsonschema.validate(doc, schema)
        n += 1
    print(n, "valid")


main()
