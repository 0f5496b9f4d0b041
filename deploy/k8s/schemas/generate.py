"""Writes servicemonitor.json, the JSON schema of the Prometheus Operator's
ServiceMonitor (monitoring.coreos.com/v1) that scripts/deploy-check.sh
validates deploy/k8s against: kubernetes-validate knows only the built-in
kinds. The schema comes from the models that cloudcoil-models-prometheus-
operator generates from the operator's CRDs; every object is made closed
(additionalProperties: false), as kubernetes-validate --strict does, so a
misspelt field fails.
  python deploy/k8s/schemas/generate.py  (with that package installed)
"""
import json
import pathlib

from cloudcoil.models.prometheus_operator.v1 import ServiceMonitor


def close(node):
    if isinstance(node, dict):
        if node.get("type") == "object" and "properties" in node:
            node.setdefault("additionalProperties", False)
        for value in node.values():
            close(value)
    elif isinstance(node, list):
        for value in node:
            close(value)


schema = ServiceMonitor.model_json_schema(by_alias=True)
close(schema)
out = pathlib.Path(__file__).with_name("servicemonitor.json")
out.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
print(f"wrote {out}")
