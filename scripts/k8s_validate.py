"""Validates rendered Kubernetes manifests (multi-document YAML files):
built-in kinds with kubernetes-validate (strict: unknown fields fail) for
each Kubernetes version given, ServiceMonitor with the schema in
deploy/k8s/schemas. Any other kind fails: nothing goes unchecked.
  python scripts/k8s_validate.py --versions 1.27.0,1.37.0 FILE...
Exit 0 when every document is valid, 1 otherwise.
"""
import argparse
import json
import pathlib
import sys

import jsonschema
import kubernetes_validate
import yaml

SCHEMAS = pathlib.Path(__file__).resolve().parent.parent / "deploy/k8s/schemas"
CUSTOM = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor.json",
}


def problems(doc, versions):
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in CUSTOM:
        schema = json.loads((SCHEMAS / CUSTOM[key]).read_text())
        validator = jsonschema.Draft202012Validator(schema)
        return [f"{'.'.join(map(str, e.path))}: {e.message}"
                for e in validator.iter_errors(doc)]
    found = []
    for version in versions:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            found.append(f"k8s {version}: {'.'.join(map(str, e.path))}: "
                         f"{e.message}")
        except kubernetes_validate.SchemaNotFoundError:
            found.append(f"k8s {version}: no schema for {key}")
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--versions", default="1.27.0,1.37.0")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    versions = args.versions.split(",")
    bad = 0
    for name in args.files:
        docs = [d for d in yaml.safe_load_all(open(name)) if d]
        for doc in docs:
            what = f"{name}: {doc.get('kind')}/{doc['metadata'].get('name')}"
            found = problems(doc, versions)
            for p in found:
                print(f"INVALID {what}: {p}")
            bad += bool(found)
        print(f"{name}: {len(docs)} documents checked")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
