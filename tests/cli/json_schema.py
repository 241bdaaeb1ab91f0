#!/usr/bin/env python3
"""Validates JSON documents against the JSON schemas of man/json/ (draft 2020-12, the subset they use).

usage: json_schema.py SCHEMA [FILE]   (FILE: one JSON document; default stdin)

Keywords: type (a name or a list; "integer" is a number without a fraction, booleans are not numbers),
enum, const, properties, required, additionalProperties (false or a schema), items, minItems, maxItems,
minimum, oneOf, anyOf, $ref to "#/$defs/NAME", description and title (ignored). Any other keyword is
an error, so that a schema cannot silently ask for what is not checked. Exit 0 valid, 1 invalid (each
problem printed with its JSON path), 2 a schema or document that cannot be read.
"""
import json
import sys

KNOWN = {"$schema", "$id", "$defs", "title", "description", "type", "enum", "const", "properties", "required",
         "additionalProperties", "items", "minItems", "maxItems", "minimum", "oneOf", "anyOf", "$ref"}


def type_ok(value, name):
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, dict)
    raise ValueError(f"unknown type {name!r}")


def check(value, schema, root, path, problems):
    unknown = set(schema) - KNOWN
    if unknown:
        raise ValueError(f"{path}: schema keywords not supported: {sorted(unknown)}")
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"{path}: $ref {ref!r} is not #/$defs/NAME")
        check(value, root["$defs"][ref[len("#/$defs/"):]], root, path, problems)
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(type_ok(value, n) for n in names):
            problems.append(f"{path}: {json.dumps(value)[:80]} is not of type {'/'.join(names)}")
            return
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {json.dumps(value)[:80]} is not one of {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        problems.append(f"{path}: {json.dumps(value)[:80]} is not {json.dumps(schema['const'])}")
    if "minimum" in schema and type_ok(value, "number") and value < schema["minimum"]:
        problems.append(f"{path}: {value} is less than {schema['minimum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                problems.append(f"{path}: required member {name!r} is missing")
        for name, member in value.items():
            if name in props:
                check(member, props[name], root, f"{path}.{name}", problems)
            elif schema.get("additionalProperties") is False:
                problems.append(f"{path}: member {name!r} is not in the schema")
            elif isinstance(schema.get("additionalProperties"), dict):
                check(member, schema["additionalProperties"], root, f"{path}.{name}", problems)
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            problems.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            problems.append(f"{path}: more than {schema['maxItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                check(item, schema["items"], root, f"{path}[{i}]", problems)
    for keyword in ("oneOf", "anyOf"):
        if keyword in schema:
            results = []
            for alternative in schema[keyword]:
                sub = []
                check(value, alternative, root, path, sub)
                results.append(sub)
            matched = sum(1 for r in results if not r)
            if matched == 0 or (keyword == "oneOf" and matched > 1):
                why = "matches none" if matched == 0 else f"matches {matched}"
                problems.append(f"{path}: {why} of the {keyword} alternatives")
                if matched == 0:
                    best = min(results, key=len)
                    problems.extend("  " + p for p in best)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    try:
        with open(sys.argv[1]) as f:
            schema = json.load(f)
        text = open(sys.argv[2]).read() if len(sys.argv) == 3 else sys.stdin.read()
        doc = json.loads(text)
    except (OSError, ValueError) as e:
        print(f"json_schema.py: {e}", file=sys.stderr)
        return 2
    problems = []
    try:
        check(doc, schema, schema, "$", problems)
    except ValueError as e:
        print(f"json_schema.py: {sys.argv[1]}: {e}", file=sys.stderr)
        return 2
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
