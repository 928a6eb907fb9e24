"""Pull the preflight script out of rendered manifests (args[0] of a wrapped container).

  python3 test/gpu/extract-script.py MANIFEST.yaml OUT_FILE [CONTAINER_NAME]
Needs PyYAML. Fails unless exactly one wrapped container matches.
"""
import sys

import yaml

MARKER = "# vram-preflight "
src, out = sys.argv[1], sys.argv[2]
want = sys.argv[3] if len(sys.argv) > 3 else None


def containers(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("containers", "initContainers") and isinstance(v, list):
                yield from (c for c in v if isinstance(c, dict))
            else:
                yield from containers(v)
    elif isinstance(node, list):
        for v in node:
            yield from containers(v)


found = []
with open(src) as f:
    for doc in yaml.safe_load_all(f):
        for c in containers(doc):
            args = c.get("args") or []
            if args and isinstance(args[0], str) and args[0].startswith(MARKER):
                if want is None or c.get("name") == want:
                    found.append((c.get("name"), args[0]))
if len(found) != 1:
    sys.exit(f"expected one wrapped container, found {[n for n, _ in found]}")
with open(out, "w") as f:
    f.write(found[0][1])
print(f"wrote {out} from container {found[0][0]}", file=sys.stderr)
