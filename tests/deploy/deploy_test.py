#!/ usr / bin / env python3
"""Checks of deploy/ against the real mnemo binary ($MNEMO_BIN).

* Every flag that deploy/compose.yaml, the Kubernetes manifests and the
  Dockerfile pass to a mnemo role exists in `mnemo <role> --help`, and every
  environment variable they set is one that role documents (or one the
  container's own shell command reads).
* Every metric a query of the Grafana dashboard names is exported by a live
  local cluster: two memory-store shards, a coordinator and two trainers as
  separate processes on loopback, as docs/cluster.md "Separate processes".
"""
import glob
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(REPO, "deploy")
MNEMO = os.environ.get("MNEMO_BIN", os.path.join(REPO, "build/services/mnemo"))
DATA = os.environ.get("MNEMO_SHARED_DATA", os.path.join(REPO, "../shared/data"))

_help = {}


def role_help(role):
    if role not in _help:
        p = subprocess.run([MNEMO, role, "--help"], capture_output=True, text=True)
        _help[role] = p.stdout + p.stderr
    return _help[role]


def invocations(argv):
    """The mnemo invocations in a container's argv: [(role, [args])]."""
    if argv[:2] == ["sh", "-c"]:
        out = []
        for part in re.split(r"&&|\|\||;", " ".join(argv[2:])):
            toks = shlex.split(part.replace("$$", "$"))
            # Skip `exec` and VAR=value assignments before the command.
            while toks and (toks[0] == "exec" or
                            ("=" in toks[0] and not toks[0].startswith("-"))):
                toks = toks[1:]
            if len(toks) >= 2 and toks[0] == "mnemo":
                out.append((toks[1], toks[2:]))
        return out
    if argv and argv[0] == "mnemo":
        argv = argv[1:]
    return [(argv[0], argv[1:])] if argv else []


def containers():
    """(where, argv, env names) of every container the deploy files define."""
    found = []
    with open(os.path.join(DEPLOY, "compose.yaml")) as fh:
        compose = yaml.safe_load(fh)
    for name, svc in compose["services"].items():
        if not str(svc.get("image", "")).startswith(("mnemo:", "mnemo-service:")):
            continue
        entry = svc.get("entrypoint") or ["mnemo"]
        cmd = svc.get("command") or []
        found.append((f"compose {name}", list(entry) + list(cmd),
                      sorted((svc.get("environment") or {}).keys())))
    k8s = os.path.join(DEPLOY, "k8s")
    base = {}
    for f in sorted(os.listdir(k8s)):
        if not f.endswith(".yaml"):
            continue
        with open(os.path.join(k8s, f)) as fh:
            docs = list(yaml.safe_load_all(fh))
        for doc in docs:
            if doc and "metadata" in doc:
                base[(doc.get("kind"), doc["metadata"].get("name"))] = doc
            spec = (doc or {}).get("spec", {})
            pod = spec.get("template", {}).get("spec", {})
            for c in pod.get("containers", []):
                argv = list(c.get("command") or ["mnemo"]) + list(c.get("args") or [])
                found.append((f"k8s/{f} {c['name']}", argv,
                              sorted(e["name"] for e in c.get("env", []))))
                for probe in ("readinessProbe", "livenessProbe"):
                    ex = c.get(probe, {}).get("exec", {}).get("command")
                    if ex:
                        found.append((f"k8s/{f} {c['name']} {probe}", ex, []))
    # Overlays (k8s/*/kustomization.yaml): the arguments their patches add to
    # a base container, as that container's role takes them.
    for kfile in sorted(glob.glob(os.path.join(k8s, "*", "kustomization.yaml"))):
        with open(kfile) as fh:
            kust = yaml.safe_load(fh)
        for patch in kust.get("patches") or []:
            target = patch.get("target") or {}
            doc = base.get((target.get("kind"), target.get("name"))) or {}
            pod = doc.get("spec", {}).get("template", {}).get("spec", {})
            for i, c in enumerate(pod.get("containers", [])):
                added = [op["value"] for op in yaml.safe_load(patch["patch"])
                         if op["path"].startswith(f"/spec/template/spec/containers/{i}/args/")]
                if added:
                    argv = list(c.get("command") or ["mnemo"]) + list(c.get("args") or [])
                    found.append((f"{os.path.relpath(kfile, DEPLOY)} {c['name']}",
                                  argv + added, []))
    return found


class DeployFlagsTest(unittest.TestCase):
    def test_every_flag_and_variable_exists(self):
        checked = 0
        for where, argv, env in containers():
            calls = invocations(argv)
            self.assertTrue(calls, f"{where}: no mnemo invocation in {argv}")
            shell = " ".join(argv[2:]) if argv[:2] == ["sh", "-c"] else ""
            for role, args in calls:
                text = role_help(role)
                self.assertIn(f"usage: mnemo {role}", text, f"{where}: unknown role {role}")
                for a in args:
                    if a.startswith("--"):
                        flag = a.split("=", 1)[0]
                        self.assertRegex(text, rf"(?m)^\s+{re.escape(flag)}\b",
                                         f"{where}: `mnemo {role}` has no flag {flag}")
                        checked += 1
            for var in env:
                used = any(var in role_help(r) for r, _ in calls) or \
                    re.search(rf"\$\$?\{{?{var}\b", shell)
                self.assertTrue(used, f"{where}: environment {var} is read by "
                                      f"neither {[r for r, _ in calls]} nor the command")
        self.assertGreater(checked, 20)

    def test_service_roles_run_the_image_without_libtorch(self):
        """Memory stores and coordinators run mnemo-service; trainers and
        serve (the model, LibTorch) run mnemo."""
        images = {}
        with open(os.path.join(DEPLOY, "compose.yaml")) as fh:
            for name, svc in yaml.safe_load(fh)["services"].items():
                images[f"compose {name}"] = str(svc.get("image", "")).split(":")[0]
        k8s = os.path.join(DEPLOY, "k8s")
        for f in sorted(os.listdir(k8s)):
            if f.endswith(".yaml"):
                with open(os.path.join(k8s, f)) as fh:
                    for doc in yaml.safe_load_all(fh):
                        pod = (doc or {}).get("spec", {}).get("template", {}).get("spec", {})
                        for c in pod.get("containers", []):
                            images[f"k8s/{f} {c['name']}"] = c["image"].split(":")[0]
        roles = {}
        for where, argv, _ in containers():
            if " " in where and "Probe" not in where and where in images:
                roles[where] = {r for r, _ in invocations(argv)}
        checked = 0
        for where, rs in roles.items():
            want = ("mnemo" if rs & {"train", "trainer", "serve"}
                    else "mnemo-service")
            self.assertEqual(images[where], want, f"{where} runs {sorted(rs)}")
            checked += want == "mnemo-service"
        self.assertGreaterEqual(checked, 5)  # compose: 3, k8s: 2

    def test_a_wrong_flag_is_caught(self):
#The check itself : a misspelt flag is not in the help text.
        self.assertNotRegex(role_help("memstore"), r"(?m)^\s+--data-directory\b")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return set()
    return {m.group(1) for m in re.finditer(r"(?m)^(mnemo_[a-z_]+?)(_bucket|_count|_sum)?[{ ]", text)}


def dashboard_metrics():
    """Every metric a query of the Grafana dashboard names (histograms by
    their base name). deploy/test-compose.sh uses it too."""
    import json
    with open(os.path.join(DEPLOY, "grafana/mnemo.json")) as fh:
        dash = json.load(fh)
    names = set()
    for p in dash["panels"]:
        for t in p["targets"]:
            for n in re.findall(r"mnemo_[a-z_]+", t["expr"]):
                names.add(re.sub(r"_(bucket|count|sum)$", "", n))
    return names


class LiveMetricsTest(unittest.TestCase):
    def test_dashboard_metrics_are_exported_by_a_live_cluster(self):
        want = dashboard_metrics()
        self.assertGreater(len(want), 15)
        tmp = tempfile.mkdtemp(prefix="mnemo-deploy-test-")
        procs = []
        ports = {}
        env = dict(os.environ, MNEMO_DATA_DIR=DATA)
        try:
            shards = []
            for i in range(2):
                grpc, metrics = free_port(), free_port()
                shards.append(f"127.0.0.1:{grpc}")
                ports[f"memstore-{i}"] = metrics
                procs.append(subprocess.Popen(
                    [MNEMO, "memstore", "--listen", shards[-1], "--data-dir",
                     os.path.join(tmp, f"ms{i}"), "--dim", "303", "--shard-id", str(i),
                     "--num-shards", "2", "--metrics-listen", f"127.0.0.1:{metrics}"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            store, coord, cm = free_port(), free_port(), free_port()
            ports["coordinator"] = cm
            cenv = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store), WORLD_SIZE="2")
            procs.append(subprocess.Popen(
                [MNEMO, "coordinator", "--listen", f"127.0.0.1:{coord}", "--memstores",
                 ",".join(shards), "--metrics-listen", f"127.0.0.1:{cm}"],
                env=cenv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            trainers = []
            for r in range(2):
                tm = free_port()
                ports[f"trainer-{r}"] = tm
                trainers.append(subprocess.Popen(
                    [MNEMO, "trainer", "--data", "collegemsg", "--max-events", "8000",
                     "--epochs", "2", "--batch-size", "200", "--threads", "1",
                     "--policy", "vanilla", "--progress", "none",
                     "--coordinator", f"127.0.0.1:{coord}", "--metrics-listen",
                     f"127.0.0.1:{tm}", "--out", os.path.join(tmp, "out")],
                    env=dict(cenv, RANK=str(r)), stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE, text=True))
            procs += trainers
            seen = {
name: set() for name in ports}
            deadline = time.time() + 300
            while time.time() < deadline and any(t.poll() is None for t in trainers):
                for name, port in ports.items():
                    seen[name] |= scrape(port)
                time.sleep(0.5)
            for name, port in ports.items():
                seen[name] |= scrape(port)
            for t in trainers:
                self.assertEqual(t.wait(timeout=60), 0, t.stderr.read())
                t.stderr.close()
            exported = set().union(*seen.values())
            self.assertFalse(want - exported,
                             f"dashboard metrics no live process exported: {sorted(want - exported)}")
            for name in ports:
                self.assertTrue(seen[name], f"{name} served no mnemo_ metrics")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
            subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    unittest.main(verbosity=2)
