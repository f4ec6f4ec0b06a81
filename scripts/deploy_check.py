#!/usr/bin/env python3
"""Checks the Kubernetes manifests under deploy/ against folio and the Dockerfile (CI runs
it; `kubectl apply --dry-run=client` needs an API server to map kinds, so this stands in).

- every built-in kind (Deployment, Service) validates strictly against Kubernetes' own
  OpenAPI schemas (the `kubernetes-validate` package: wrong types, missing required fields
  and unknown fields all fail); the InferencePool is a CRD those schemas lack, so its
  fields are checked below by hand;
- the Deployment's readiness, liveness and startup probes GET /health (a route folio
  serves, per crates/server/src/lib.rs) on the container port folio listens on (the
  Dockerfile's `--port`);
- the Service selects the Deployment's pod labels and targets that port;
- the InferencePool (inference.networking.k8s.io/v1) selects the same pods, targets that
  port and names an endpoint picker with a port;
- the KV-events port in the container args is a declared container port.

Usage: deploy_check.py [DEPLOY_DIR]   (needs PyYAML and kubernetes-validate)
"""
import pathlib
import re
import sys

import kubernetes_validate
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent


def fail(msg: str) -> None:
    print(f"deploy check: {msg}", file=sys.stderr)
    sys.exit(1)


def port_of(container: dict, port) -> int:
    """A probe's or Service's port, by number or by the container port's name."""
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    fail(f"port {port!r} is not a named port of container {container['name']}")


def main() -> int:
    deploy = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "deploy"
    docs = [d for f in sorted(deploy.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    version = kubernetes_validate.latest_version()
    for d in docs:
        if d["kind"] == "InferencePool":
            continue
        try:
            kubernetes_validate.validate(d, version, strict=True)
        except kubernetes_validate.utils.ValidationError as e:
            fail(f"{d['kind']} {d['metadata'].get('name')}: not a valid Kubernetes {version} object: {e.message}")
        except kubernetes_validate.utils.SchemaNotFoundError:
            fail(f"{d['kind']} ({d['apiVersion']}) has no Kubernetes {version} schema")
    for kind in ("Deployment", "Service", "InferencePool"):
        if len(by_kind.get(kind, [])) != 1:
            fail(f"expected one {kind}, found {len(by_kind.get(kind, []))}")
    dep, svc, pool = by_kind["Deployment"][0], by_kind["Service"][0], by_kind["InferencePool"][0]

    docker = (ROOT / "Dockerfile").read_text()
    m = re.search(r'ENTRYPOINT \[.*"--port", "(\d+)"', docker)
    if not m:
        fail("the Dockerfile's ENTRYPOINT sets no --port")
    http_port = int(m.group(1))
    routes = (ROOT / "crates/server/src/lib.rs").read_text()
    if '.route("/health"' not in routes:
        fail("folio serves no /health route")

    spec = dep["spec"]
    labels = spec["template"]["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in spec["selector"]["matchLabels"].items()):
        fail(f"Deployment selector {spec['selector']['matchLabels']} does not match its pod labels {labels}")
    containers = spec["template"]["spec"]["containers"]
    c = next((c for c in containers if c["name"] == "folio"), None) or fail("no container named folio")
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        get = c.get(probe, {}).get("httpGet") or fail(f"{probe}: no httpGet")
        if get["path"] != "/health":
            fail(f"{probe}: path {get['path']!r}, folio's readiness is /health")
        if port_of(c, get["port"]) != http_port:
            fail(f"{probe}: port {get['port']!r} is not folio's port {http_port}")
    args = c.get("args", [])
    if "--kv-events-endpoint" in args:
        ep = args[args.index("--kv-events-endpoint") + 1]
        kv_port = int(ep.rsplit(":", 1)[1])
        if kv_port not in [p["containerPort"] for p in c.get("ports", [])]:
            fail(f"--kv-events-endpoint {ep}: port {kv_port} is not a container port")

    sel = svc["spec"]["selector"]
    if any(labels.get(k) != v for k, v in sel.items()):
        fail(f"Service selector {sel} does not select the pods {labels}")
    for p in svc["spec"]["ports"]:
        if port_of(c, p.get("targetPort", p["port"])) != http_port:
            fail(f"Service port {p} does not reach folio's port {http_port}")

    if pool["apiVersion"] != "inference.networking.k8s.io/v1":
        fail(f"InferencePool apiVersion {pool['apiVersion']}, expected inference.networking.k8s.io/v1")
    ps = pool["spec"]
    if any(labels.get(k) != v for k, v in ps["selector"]["matchLabels"].items()):
        fail(f"InferencePool selector {ps['selector']} does not select the pods {labels}")
    if [t["number"] for t in ps["targetPorts"]] != [http_port]:
        fail(f"InferencePool targetPorts {ps['targetPorts']}, expected [{{number: {http_port}}}]")
    ref = ps.get("endpointPickerRef", {})
    if not ref.get("name") or not ref.get("port", {}).get("number"):
        fail(f"InferencePool endpointPickerRef {ref} needs a name and a port number")
    print(f"deploy check: {len(docs)} manifests OK (Deployment and Service valid against Kubernetes {version}; folio on {http_port}, probes /health)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
