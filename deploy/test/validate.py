"""Schema checks of the deployment files (run by deploy/test/check.sh).

- Every Kubernetes object in deploy/k8s against the API schemas
  (kubernetes-validate, strict: unknown fields are errors), the Prometheus
  Operator's ServiceMonitor against its models (cloudcoil; unknown fields are
  errors too), and kustomization.yaml's resources exist.
- deploy/compose.yaml against the compose specification (check-jsonschema's
  built-in schema), and the formats that schema leaves as plain strings:
  durations as Go writes them ("5s", "1m30s"), port specs
  ("127.0.0.1:8080:80/tcp"), exposed ports, subnets in CIDR notation.

Exit code 1 with the errors named by file, object and path.
Usage: python3 deploy/test/validate.py [DEPLOY_DIR]
"""

import copy
import glob
import os
import re
import subprocess
import sys

import kubernetes_validate
import yaml
from cloudcoil.models.prometheus_operator import v1 as prom_v1

# The oldest Kubernetes the manifests are for, and the newest schemas at hand.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")

failures = 0


def fail(where, what):
    global failures
    failures += 1
    print(f"FAIL {where}: {what}", file=sys.stderr)


def unknown_keys(given, known, path=""):
    """Paths in `given` that `known` (the model's dump) lacks."""
    out = []
    if isinstance(given, dict) and isinstance(known, dict):
        for k, v in given.items():
            if k not in known:
                out.append(f"{path}.{k}")
            else:
                out.extend(unknown_keys(v, known[k], f"{path}.{k}"))
    elif isinstance(given, list) and isinstance(known, list):
        for i, (g, k) in enumerate(zip(given, known)):
            out.extend(unknown_keys(g, k, f"{path}[{i}]"))
    return out


def check_service_monitor(doc, where):
    try:
        model = prom_v1.ServiceMonitor.model_validate(copy.deepcopy(doc))
    except Exception as e:  # pydantic's ValidationError names each path
        fail(where, str(e).replace("\n", "; "))
        return False
    dumped = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
    extra = unknown_keys(doc, dumped)
    for path in extra:
        fail(where, f"unknown field {path}")
    return not extra


def load_manifests(k8s_dir):
    """(file name, object) of every object in k8s/*.yaml."""
    out = []
    for path in sorted(glob.glob(os.path.join(k8s_dir, "*.yaml"))):
        name = os.path.relpath(path, os.path.dirname(k8s_dir))
        with open(path, encoding="utf-8") as f:
            out.extend((name, doc) for doc in yaml.safe_load_all(f) if doc)
    return out


def check_resources(kustomization, directory, where):
    for r in kustomization.get("resources") or []:
        if not os.path.exists(os.path.join(directory, r)):
            fail(where, f"missing resource {r}")


def check_kubernetes(k8s_dir, manifests):
    objects = 0
    for name, doc in manifests:
        kind = doc.get("kind", "?")
        meta = doc.get("metadata") or {}
        where = f"{name} {kind}/{meta.get('name', '?')}"
        api = doc.get("apiVersion", "")
        if api == "kustomize.config.k8s.io/v1beta1":
            check_resources(doc, k8s_dir, where)
            continue
        if api == "monitoring.coreos.com/v1" and kind == "ServiceMonitor":
            if check_service_monitor(doc, where):
                objects += 1
            continue
        objects += validate_object(doc, where)
    return objects


def validate_object(doc, where):
    """`doc` against every Kubernetes version's schema, strictly."""
    ok = True
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            fail(where, f"no Kubernetes {version} schema for "
                 f"{doc.get('apiVersion', '')} {doc.get('kind', '?')}")
            ok = False
        except kubernetes_validate.ValidationError as e:
            at = "/".join(str(p) for p in e.path) or "/"
            fail(where, f"Kubernetes {version}: {at}: {e.message}")
            ok = False
    return ok


def apply_json_patch(doc, ops, where):
    """The JSON patch operations kustomize overlays use here ("add",
    "replace") applied to a copy of `doc`; None after a failure."""
    out = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~")
                 for p in op["path"].split("/")[1:]]
        node = out
        try:
            for p in parts[:-1]:
                node = node[int(p)] if isinstance(node, list) else node[p]
            last = parts[-1]
            if op["op"] not in ("add", "replace"):
                fail(where, f"unsupported patch op {op['op']}")
                return None
            if isinstance(node, list):
                if last == "-":
                    node.append(op["value"])
                elif op["op"] == "add":
                    node.insert(int(last), op["value"])
                else:
                    node[int(last)] = op["value"]
            else:
                if op["op"] == "replace" and last not in node:
                    raise KeyError(last)
                node[last] = op["value"]
        except (KeyError, IndexError, ValueError, TypeError) as e:
            fail(where, f"patch path {op['path']} does not apply ({e!r})")
            return None
    return out


def check_overlays(k8s_dir, manifests):
    """Each overlay (a folder of k8s/ with its own kustomization.yaml) whose
    resources are the base: its JSON patches applied to the base objects
    they target, and the results validated as the base's are."""
    objects = 0
    base = {(doc.get("kind"), (doc.get("metadata") or {}).get("name")): doc
            for _, doc in manifests}
    for kfile in sorted(glob.glob(os.path.join(k8s_dir, "*", "kustomization.yaml"))):
        overlay = os.path.dirname(kfile)
        name = os.path.relpath(kfile, os.path.dirname(k8s_dir))
        with open(kfile, encoding="utf-8") as f:
            k = yaml.safe_load(f)
        check_resources(k, overlay, name)
        for i, patch in enumerate(k.get("patches") or []):
            where = f"{name} patches[{i}]"
            target = patch.get("target") or {}
            doc = base.get((target.get("kind"), target.get("name")))
            if doc is None:
                fail(where, f"no base object {target.get('kind')}/{target.get('name')}")
                continue
            patched = apply_json_patch(doc, yaml.safe_load(patch["patch"]), where)
            if patched is not None:
                objects += validate_object(patched, where)
    return objects


# The formats of the compose specification's earlier schema (its reference
# implementation defines them in Go).
DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")
PORTS = re.compile(
    r"^((\[?[0-9a-fA-F:.]*\]?:)?(\d+(-\d+)?:)?)?\d+(-\d+)?(/(tcp|udp|sctp))?$")
EXPOSE = re.compile(r"^\d+(-\d+)?(/(tcp|udp|sctp))?$")
SUBNET = re.compile(r"^[0-9a-fA-F:.]+/\d{1,3}$")


def check_compose_formats(compose, name="compose.yaml"):
    def duration(where, value):
        if value is not None and not DURATION.match(str(value)):
            fail(name, f"{where}: '{value}' is not a duration")

    for sname, svc in (compose.get("services") or {}).items():
        at = f"services.{sname}"
        hc = svc.get("healthcheck") or {}
        for k in ("interval", "timeout", "start_period", "start_interval"):
            duration(f"{at}.healthcheck.{k}", hc.get(k))
        duration(f"{at}.stop_grace_period", svc.get("stop_grace_period"))
        deploy = svc.get("deploy") or {}
        rp = deploy.get("restart_policy") or {}
        for k in ("delay", "window"):
            duration(f"{at}.deploy.restart_policy.{k}", rp.get(k))
        for section in ("update_config", "rollback_config"):
            cfg = deploy.get(section) or {}
            for k in ("delay", "monitor"):
                duration(f"{at}.deploy.{section}.{k}", cfg.get(k))
        for i, p in enumerate(svc.get("ports") or []):
            if isinstance(p, (str, int)) and not PORTS.match(str(p)):
                fail(name, f"{at}.ports[{i}]: '{p}' is not a port")
        for i, p in enumerate(svc.get("expose") or []):
            if not EXPOSE.match(str(p)):
                fail(name, f"{at}.expose[{i}]: '{p}' is not a port")
    for nname, net in (compose.get("networks") or {}).items():
        for i, cfg in enumerate(((net or {}).get("ipam") or {}).get("config")
                                or []):
            subnet = cfg.get("subnet")
            if subnet is not None and not SUBNET.match(str(subnet)):
                fail(name,
                     f"networks.{nname}.ipam.config[{i}].subnet: '{subnet}' "
                     "is not a subnet")


def check_compose(path):
    name = os.path.basename(path)
    run = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "check-jsonschema"),
         "--builtin-schema", "vendor.compose-spec", path],
        capture_output=True, text=True)
    if run.returncode != 0:
        for line in (run.stdout + run.stderr).splitlines():
            if line.strip() and "validation errors were encountered" not in line:
                fail(name, line.strip())
    with open(path, encoding="utf-8") as f:
        compose = yaml.safe_load(f)
    check_compose_formats(compose, name)
    return len(compose.get("services") or {})


def main():
    deploy = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    k8s = os.path.join(deploy, "k8s")
    manifests = load_manifests(k8s)
    objects = check_kubernetes(k8s, manifests)
    patched = check_overlays(k8s, manifests)
    services = check_compose(os.path.join(deploy, "compose.yaml"))
    overrides = 0
    for path in sorted(glob.glob(os.path.join(deploy, "compose.*.yaml"))):
        overrides += check_compose(path)
    if failures:
        print(f"{failures} problem(s)", file=sys.stderr)
        return 1
    print(f"ok: {objects} Kubernetes objects and {patched} patched by "
          f"overlays (Kubernetes {' and '.join(KUBERNETES_VERSIONS)} schemas, "
          f"strict), compose.yaml ({services} services) and its overrides "
          f"({overrides} services) pass their schemas")
    return 0


if __name__ == "__main__":
    sys.exit(main())
