#!/usr/bin/env python3
"""Copy named schemas of the official OpenAI OpenAPI spec, with everything
they reference, verbatim into a test-data file (components.schemas).

    tools/ref/openapi_subset.py SPEC.json OUT.json COMMENT NAME...

The tests validate the gateway's bodies against the copy with
t/lib/LlmSchema.pm, so the repo needs no ../shared at test time."""
import json
import sys


def refs(node, out):
    if isinstance(node, dict):
        r = node.get('$ref')
        if isinstance(r, str) and r.startswith('#/components/schemas/'):
            out.add(r.rsplit('/', 1)[1])
        for v in node.values():
            refs(v, out)
    elif isinstance(node, list):
        for v in node:
            refs(v, out)


def main():
    spec, out, comment, names = sys.argv[1], sys.argv[2], sys.argv[3], \
        sys.argv[4:]
    schemas = json.load(open(spec))['components']['schemas']
    want, todo = {}, list(names)
    while todo:
        n = todo.pop()
        if n in want:
            continue
        want[n] = schemas[n]
        found = set()
        refs(schemas[n], found)
        todo.extend(sorted(found - set(want)))
    doc = {'$comment': comment,
           'components': {'schemas': {k: want[k] for k in sorted(want)}}}
    with open(out, 'w') as f:
        json.dump(doc, f, indent=2, ensure_ascii=False)
        f.write('\n')


if __name__ == '__main__':
    main()
