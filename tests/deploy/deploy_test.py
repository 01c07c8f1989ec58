#!/usr/bin/env python3
"""Deployment tests: the Helm chart, the image's files, the dashboard and the alert rules.

One subcommand per CTest (tests/deploy/CMakeLists.txt), each exiting non-zero with the list of
problems found:

  build-tools  builds the Go helpers (helmrender: Helm's engine for tests; grpcprobe: the
               kubelet's gRPC probe) into the build tree
  renderer-test  go test of helmrender against Helm's documented behaviour
  chart        renders the chart for every case in cases/ and checks each manifest
               (manifests.py); cases/invalid/ must be refused with the expected message
  server-config  runs leapcache-server --check-config on the config and arguments each case
               renders, and on the image's default config; cases/server-invalid/ must be refused
               by the server; the chart's list of settings must match the server's
  alerts       promtool check rules + promtool test rules; the chart's PrometheusRule carries
               the same groups as deploy/alerts
  dashboard    the Grafana JSON's structure, and its PromQL parsed by promtool
  metrics      starts leapcache-server with the chart's default config, probes it as the kubelet
               and the image's HEALTHCHECK would, drives a few puts, lookups and gets through
               leapcache-cli (when built; every storage format the chart offers is registered
               and must carry the chart's name for it), scrapes /metrics and checks that every
               metric the dashboard and the alerts read exists, with the right type and labels
  dockerfile   static checks of deploy/Dockerfile (stages, user, entrypoint, healthcheck, no
               build tools at run time, every build package of scripts/bootstrap.sh)

Case files are values overrides. A first-line comment `# expect: TEXT` (invalid cases) names
text the error must contain; `# release: NAME` sets the release name (default "prod").
"""

import argparse
import json
import os
import re
import shutil
import random
import signal
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

# Tests run from the source tree: keep the helper modules' bytecode out of it.
sys.dont_write_bytecode = True
import manifests as k8s  # noqa: E402
import promql  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class Failures(Exception):
    pass


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def case_header(path, key):
    with open(path) as f:
        for line in f:
            m = re.match(rf"#\s*{key}:\s*(.*\S)", line)
            if m:
                return m.group(1)
            if not line.startswith("#"):
                break
    return None


def cases(directory):
    return sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".yaml"))


class Repo:
    def __init__(self, args):
        self.source = os.path.abspath(args.source_dir)
        self.work = os.path.abspath(args.work_dir)
        self.tools = os.path.abspath(args.tools_dir) if getattr(args, "tools_dir", None) else None
        os.makedirs(self.work, exist_ok=True)

    def path(self, *parts):
        return os.path.join(self.source, *parts)

    @property
    def chart(self):
        return self.path("deploy", "helm", "leapcache")

    @property
    def renderer(self):
        return os.path.join(self.tools, "helmrender")

    def render(self, case, out_dir, extra_args=()):
        """Renders `case` (a values file, or None for the defaults) into out_dir; returns
        (CompletedProcess, manifests, values, notes)."""
        os.makedirs(out_dir, exist_ok=True)
        files = {k: os.path.join(out_dir, k) for k in ("manifests.json", "values.json",
                                                       "notes.txt", "manifests.yaml")}
        cmd = [self.renderer, "render", "--chart", self.chart, "--strict",
               "--release", (case and case_header(case, "release")) or "prod",
               "--namespace", "cache",
               "--json", files["manifests.json"], "--yaml", files["manifests.yaml"],
               "--notes", files["notes.txt"], "--values-json", files["values.json"], *extra_args]
        if case:
            cmd += ["-f", case]
        proc = run(cmd)
        if proc.returncode != 0:
            return proc, None, None, None
        with open(files["manifests.json"]) as f:
            manifests = json.load(f)
        with open(files["values.json"]) as f:
            values = json.load(f)
        with open(files["notes.txt"]) as f:
            notes = f.read()
        return proc, manifests, values, notes

    def yaml_to_json(self, path):
        proc = run([self.renderer, "yaml2json", path])
        if proc.returncode != 0:
            raise Failures([f"cannot read {path}: {proc.stderr.strip()}"])
        return json.loads(proc.stdout)

    def valid_cases(self):
        return [None] + cases(os.path.join(HERE, "cases"))


def case_name(case):
    return os.path.splitext(os.path.basename(case))[0] if case else "defaults"


# --- build-tools --------------------------------------------------------------------------------

def go_env(gopath, out):
    # Debian ships Go libraries as GOPATH sources, which only GOPATH mode
    # builds; GOENV=off and a cache in the build tree keep the build away from $HOME.
    return dict(os.environ, GO111MODULE="off", GOPATH=gopath, GOENV="off", GOFLAGS="",
                GOCACHE=os.path.join(out, "go-cache"), CGO_ENABLED="0")


def cmd_build_tools(args):
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    env = go_env(args.gopath, out)
    problems = []
    for tool in ("helmrender", "grpcprobe"):
        proc = run([args.go, "build", "-o", os.path.join(out, tool), "."],
                   cwd=os.path.join(HERE, tool), env=env)
        if proc.returncode != 0:
            problems.append(f"go build {tool}:\n{proc.stdout}{proc.stderr}")
    if problems:
        raise Failures(problems)
    print(f"built helmrender and grpcprobe in {out}")


def cmd_renderer_test(args):
    out = os.path.abspath(args.out)
    proc = run([args.go, "test", "."], cwd=os.path.join(HERE, "helmrender"),
               env=go_env(args.gopath, out))
    print(proc.stdout.strip())
    if proc.returncode != 0:
        raise Failures([f"go test helmrender:\n{proc.stdout}{proc.stderr}"])


# --- chart --------------------------------------------------------------------------------------

def check_rendered_extras(repo, manifests, values, notes):
    """Cross-checks of one case beyond manifests.py: the config file, monitoring objects, NOTES."""
    problems = []
    by_kind = {}
    for m in manifests:
        by_kind.setdefault(m["object"]["kind"], []).append(m["object"])
    monitoring = values.get("monitoring", {})

    def expect(kind, enabled):
        if enabled != (kind in by_kind):
            problems.append(f"{kind} rendered={kind in by_kind}, enabled={enabled}")

    expect("ServiceMonitor", monitoring.get("serviceMonitor", {}).get("enabled", False))
    expect("PrometheusRule", monitoring.get("prometheusRule", {}).get("enabled", False))
    expect("NetworkPolicy", values.get("networkPolicy", {}).get("enabled", False))
    expect("PodDisruptionBudget", values.get("podDisruptionBudget", {}).get("enabled", False))

    if "PrometheusRule" in by_kind:
        rules = repo.yaml_to_json(repo.path("deploy", "alerts", "leapcache-rules.yaml"))[0]
        if by_kind["PrometheusRule"][0]["spec"]["groups"] != rules["groups"]:
            problems.append(f"the PrometheusRule's groups differ from deploy/alerts")
    dashboards = [c for c in by_kind.get("ConfigMap", []) if "leapcache.json" in c.get("data", {})]
    if monitoring.get("grafanaDashboard", {}).get("enabled", False) != bool(dashboards):
        problems.append(f"dashboard ConfigMap does not follow grafanaDashboard.enabled")
    for d in dashboards:
        with open(repo.path("deploy", "dashboards", "leapcache.json")) as f:
            if json.loads(d["data"]["leapcache.json"]) != json.load(f):
                problems.append(f"the dashboard ConfigMap differs from deploy/dashboards")

    # The server config: a flat map whose settings follow the values.
    config = config_from_manifests(repo, manifests)
    if config is None:
        problems.append(f"no server config file in a ConfigMap")
    else:
        tiers = values["tiers"]
        expected = {
            "memory_budget": k8s.size_bytes(tiers["primary"]["budget"]),
            "spill_budget": k8s.size_bytes(tiers["spill"]["budget"]),
            "page_bytes": k8s.size_bytes(tiers["pageBytes"]),
        }
        for key, want in expected.items():
            if k8s.size_bytes(config.get(key, "-1")) != want:
                problems.append(f"config {key} = {config.get(key)!r}, values say {want} bytes")
        if config.get("eviction_policy") != values["eviction"]["policy"]:
            problems.append(f"config eviction_policy differs from eviction.policy")
        if config.get("listen", "").rsplit(":", 1)[-1] != str(values["ports"]["grpc"]) or \
           config.get("metrics_listen", "").rsplit(":", 1)[-1] != str(values["ports"]["metrics"]):
            problems.append(f"listen addresses do not use values.ports")
        for key, value in (values.get("config") or {}).items():
            # Values come as JSON numbers (floats); the config holds their integer text.
            whole = isinstance(value, float) and value.is_integer()
            text = str(int(value)) if whole else str(value)
            if str(config.get(key)) != text:
                problems.append(f"config {key} = {config.get(key)!r}, values say {value!r}")

    if not notes.strip():
        problems.append(f"NOTES.txt renders empty")
    elif values["storage"]["format"] not in notes:
        problems.append(f"NOTES.txt does not name the storage format")
    if "<no value>" in notes or any("<no value>" in json.dumps(m) for m in manifests):
        problems.append(f"a template printed a missing value")
    return problems


def config_from_manifests(repo, manifests):
    """The server's YAML config as rendered (from the ConfigMap the StatefulSet mounts), parsed."""
    text = config_text_and_args(manifests)[0]
    if text is None:
        return None
    path = os.path.join(repo.work, "config-parse.yaml")
    with open(path, "w") as f:
        f.write(text)
    docs = repo.yaml_to_json(path)
    return docs[0] if docs else {}


def config_text_and_args(manifests):
    """(config file text, container args with --config rewritten to 'CONFIG', container env)
    of the server container, following its --config path through the mount to the ConfigMap."""
    objs = [m["object"] for m in manifests]
    sts = next(o for o in objs if o["kind"] == "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = list(container.get("args") or [])
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for i, a in enumerate(args):
        if not a.startswith("--config="):
            continue
        path = a.split("=", 1)[1]
        for mount in container.get("volumeMounts", []):
            prefix = mount["mountPath"].rstrip("/") + "/"
            volume = volumes.get(mount["name"], {})
            if path.startswith(prefix) and "configMap" in volume:
                rel = path[len(prefix):]
                items = volume["configMap"].get("items")
                key = next((it["key"] for it in items if it["path"] == rel), None) if items else rel
                cm = next(o for o in objs if o["kind"] == "ConfigMap"
                          and o["metadata"]["name"] == volume["configMap"]["name"])
                args[i] = "--config=CONFIG"
                env = {e["name"]: e.get("value", "") for e in container.get("env") or []}
                return cm["data"].get(key), args, env
    return None, args, {}


def cmd_chart(args):
    repo = Repo(args)
    problems = []
    checked = 0
    for case in repo.valid_cases():
        name = case_name(case)
        proc, manifests, values, notes = repo.render(case, os.path.join(repo.work, name))
        if proc.returncode != 0:
            problems.append(f"{name}: rendering failed:\n{proc.stderr.strip()}")
            continue
        found = k8s.check_manifests(manifests, values)
        found += check_rendered_extras(repo, manifests, values, notes)
        problems += [f"{name}: {p}" for p in found]
        kinds = sorted({m["object"]["kind"] for m in manifests})
        print(f"ok   {name}: {len(manifests)} manifests ({', '.join(kinds)})" if not found
              else f"FAIL {name}")
        checked += 1

    # Renders must fail where the values are wrong, with a message that says what is wrong.
    for case in cases(os.path.join(HERE, "cases", "invalid")):
        name = "invalid/" + case_name(case)
        expect = case_header(case, "expect")
        proc, *_ = repo.render(case, os.path.join(repo.work, name))
        if proc.returncode == 0:
            problems.append(f"{name}: rendered, but must be refused ({expect})")
        elif not expect or expect not in proc.stderr:
            problems.append(f"{name}: refused without {expect!r}:\n{proc.stderr.strip()}")
        else:
            print(f"ok   {name}: refused ({expect})")

    # The chart must also render with missing keys allowed (Helm's default) exactly as strict.
    proc = run([repo.renderer, "render", "--chart", repo.chart])
    strict = run([repo.renderer, "render", "--chart", repo.chart, "--strict"])
    if proc.returncode != 0 or proc.stdout != strict.stdout:
        problems.append("defaults: the non-strict rendering differs from the strict one")
    # Chart.yaml's kubeVersion is enforced, as helm install does.
    old = run([repo.renderer, "render", "--chart", repo.chart, "--kube-version", "v1.26.5"])
    if old.returncode == 0 or "kubeVersion" not in old.stderr:
        problems.append("kubeVersion: a cluster older than Chart.yaml's kubeVersion was accepted")
    if problems:
        raise Failures(problems)
    print(f"chart: {checked} cases render and validate")


# --- server-config ------------------------------------------------------------------------------

# Settings the chart derives from its structured values; values.schema.json lists the others
# under `config`. Together they must be exactly the server's settings.
CHART_DERIVED_SETTINGS = {
    "listen", "metrics_listen", "port_file", "memory_budget", "spill_budget", "page_bytes",
    "eviction_policy", "eviction_half_life", "promote_on_hit", "shutdown_grace",
    "tls_cert_file", "tls_key_file", "tls_client_ca_file", "tokens_file",
}


def clean_env(extra=None):
    """The environment without LEAPCACHE_* variables (they would override the file under test)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEAPCACHE_")}
    env.update(extra or {})
    return env


def stand_in_secrets(config_text, values, work):
    """The rendered config names files of mounted Secrets (TLS, tokens), which --check-config
    reads and checks. Outside a pod they do not exist: make throw-away ones (openssl, a
    self-signed certificate that is also its own CA) and point the config at them."""
    for section, files in (("tls", ("tls.crt", "tls.key", "ca.crt")), ("auth", None)):
        if not values.get(section, {}).get("enabled"):
            continue
        mount = values[section]["mountPath"].rstrip("/")
        local = os.path.join(work, "secret-" + section)
        os.makedirs(local, exist_ok=True)
        if files:
            key, crt = os.path.join(local, "tls.key"), os.path.join(local, "tls.crt")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", crt,
                            "-days", "1", "-subj", "/CN=leapcache"],
                           check=True, capture_output=True, timeout=60)
            shutil.copyfile(crt, os.path.join(local, "ca.crt"))
        else:
            with open(os.path.join(local, values[section]["key"]), "w") as f:
                f.write("stand-in-token-0123456789 tenant\n")
        config_text = config_text.replace(f'"{mount}/', f'"{local}/')
    return config_text


def check_config(server, config_text, args, env, work):
    path = os.path.join(work, "leapcache.yaml")
    with open(path, "w") as f:
        f.write(config_text)
    argv = [server] + [a.replace("CONFIG", path) for a in args] + ["--check-config"]
    return run(argv, env=clean_env(env), cwd=work, timeout=60)


def describe(output):
    """DescribeConfig's output -> {setting: (value, source)}."""
    settings = {}
    for line in output.splitlines():
        m = re.match(r"([a-z_]+): (.*?)  # (.*)$", line)
        if m:
            settings[m.group(1)] = (m.group(2).strip('"'), m.group(3))
    return settings


def cmd_server_config(args):
    repo = Repo(args)
    problems = []
    for case in repo.valid_cases():
        name = case_name(case)
        work = os.path.join(repo.work, "server-config", name)
        proc, manifests, values, _ = repo.render(case, work)
        if proc.returncode != 0:
            problems.append(f"{name}: rendering failed:\n{proc.stderr.strip()}")
            continue
        text, cargs, env = config_text_and_args(manifests)
        text = stand_in_secrets(text, values, work)
        result = check_config(args.server, text, cargs, env, work)
        if result.returncode != 0:
            problems.append(f"{name}: leapcache-server refuses the rendered config:\n"
                            f"{result.stderr.strip()}\n--- config ---\n{text}")
            continue
        effective = describe(result.stdout)
        # Every setting the file holds must have come from the file.
        rendered = [line.split(":", 1)[0] for line in text.splitlines()
                    if line and not line.startswith("#")]
        for key in rendered:
            source = effective.get(key, ("", "missing"))[1]
            if not source.startswith("config file"):
                problems.append(f"{name}: {key} comes from {source}, not the rendered file")
        budget = k8s.size_bytes(values["tiers"]["primary"]["budget"])
        if k8s.size_bytes(effective["memory_budget"][0]) != budget:
            problems.append(
                f"{name}: the server reads memory_budget as {effective['memory_budget'][0]}")
        print(f"ok   {name}: the server accepts the rendered config ({len(rendered)} settings)")

    # Values the schema cannot judge (relations between settings) are the server's to refuse.
    for case in cases(os.path.join(HERE, "cases", "server-invalid")):
        name = "server-invalid/" + case_name(case)
        expect = case_header(case, "expect")
        work = os.path.join(repo.work, "server-config", name)
        proc, manifests, _, _ = repo.render(case, work)
        if proc.returncode != 0:
            problems.append(
                f"{name}: must render (the server refuses it), got:\n{proc.stderr.strip()}")
            continue
        text, cargs, env = config_text_and_args(manifests)
        result = check_config(args.server, text, cargs, env, work)
        if result.returncode == 0 or expect not in result.stderr:
            problems.append(f"{name}: expected the server to refuse with {expect!r}; "
                            f"rc={result.returncode} {result.stderr.strip()}")
        else:
            print(f"ok   {name}: the server refuses it ({expect})")

    # The image's default config.
    image_config = repo.path("deploy", "docker", "leapcache.yaml")
    result = run([args.server, "--config=" + image_config, "--check-config"], env=clean_env(),
                 timeout=60)
    if result.returncode != 0:
        problems.append(f"deploy/docker/leapcache.yaml is refused: {result.stderr.strip()}")
    else:
        print("ok   deploy/docker/leapcache.yaml")

    # The chart knows every setting the server has, and no other.
    result = run([args.server, "--check-config"], env=clean_env(), timeout=60)
    server_settings = set(describe(result.stdout))
    with open(os.path.join(repo.chart, "values.schema.json")) as f:
        schema = json.load(f)
    chart_settings = set(schema["properties"]["config"]["properties"]) | CHART_DERIVED_SETTINGS
    if not server_settings:
        problems.append(f"cannot list the server's settings: {result.stderr.strip()}")
    elif server_settings != chart_settings:
        problems.append(
            "the chart's settings differ from the server's: "
            f"server only {sorted(server_settings - chart_settings)} (add them to "
            f"values.schema.json's config properties), chart only "
            f"{sorted(chart_settings - server_settings)}")
    if problems:
        raise Failures(problems)


# --- alerts -------------------------------------------------------------------------------------

def cmd_alerts(args):
    repo = Repo(args)
    rules_file = repo.path("deploy", "alerts", "leapcache-rules.yaml")
    problems = []
    for cmd in ([args.promtool, "check", "rules", rules_file],
                [args.promtool, "test", "rules", os.path.join(HERE, "alerts_test.yaml")]):
        proc = run(cmd, cwd=HERE)
        print(proc.stdout.strip())
        if proc.returncode != 0:
            problems.append(f"{' '.join(cmd[1:3])} failed:\n{proc.stdout}{proc.stderr}")

    names = set()
    for group in repo.yaml_to_json(rules_file)[0]["groups"]:
        for rule in group["rules"]:
            name = rule.get("alert") or rule.get("record")
            if name in names:
                problems.append(f"{name}: defined twice")
            names.add(name)
            if "alert" not in rule:
                continue
            if rule.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
                problems.append(f"{name}: severity must be critical, warning or info")
            for key in ("summary", "description"):
                if not rule.get("annotations", {}).get(key):
                    problems.append(f"{name}: no {key} annotation")
            # Per-server alerts: a grouping that drops instance would merge pods' alerts.
            for group_labels in re.findall(r"\bby\s*\(([^)]*)\)", rule["expr"]):
                if "instance" not in group_labels:
                    problems.append(f"{name}: aggregates away the instance label ({group_labels})")
    with open(os.path.join(HERE, "alerts_test.yaml")) as f:
        tested = set(re.findall(r"alertname:\s*(\w+)", f.read()))
    if names - tested:
        problems.append(f"alerts without a promtool unit test: {sorted(names - tested)}")
    if problems:
        raise Failures(problems)
    print(f"alerts: {len(names)} rules checked and unit-tested")


# --- dashboard ----------------------------------------------------------------------------------

def dashboard_queries(dashboard):
    """[(panel title, expr)] of every panel target, rows' nested panels included."""
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((p.get("title", "?"), t["expr"]))
            walk(p.get("panels", []))

    walk(dashboard.get("panels", []))
    return out


def variable_queries(dashboard):
    """The metric selectors of label_values(...) template variables."""
    out = []
    for v in dashboard.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.match(r"\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)\s*$", q or "")
        if v.get("type") == "query" and m:
            out.append((f"variable {v['name']}", m.group(1)))
    return out


def grafana_to_promql(expr):
    """Grafana's variables replaced by values PromQL accepts, so promtool can parse the query."""
    for variable, value in (("$__rate_interval", "5m"), ("$__interval", "1m"), ("$__range", "6h")):
        expr = expr.replace(variable, value)
    return re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", ".*", expr)


def cmd_dashboard(args):
    repo = Repo(args)
    with open(repo.path("deploy", "dashboards", "leapcache.json")) as f:
        dashboard = json.load(f)
    problems = []
    for key in ("title", "uid", "panels", "templating", "schemaVersion"):
        if not dashboard.get(key):
            problems.append(f"dashboard has no {key}")
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    if variables.get("datasource", {}).get("type") != "datasource":
        problems.append("no datasource variable: the dashboard would be tied to one Prometheus")

    ids = set()
    occupied = set()
    for p in dashboard["panels"]:
        pid = p.get("id")
        if pid in ids:
            problems.append(f"panel id {pid} is used twice")
        ids.add(pid)
        g = p.get("gridPos", {})
        if g.get("x", 0) + g.get("w", 0) > 24:
            problems.append(f"panel {p.get('title')} is wider than the grid")
        for x in range(g.get("x", 0), g.get("x", 0) + g.get("w", 0)):
            for y in range(g.get("y", 0), g.get("y", 0) + g.get("h", 0)):
                if (x, y) in occupied:
                    problems.append(f"panel {p.get('title')} overlaps another at ({x},{y})")
                    break
                occupied.add((x, y))
        if p.get("type") == "row":
            continue
        if p.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"panel {p.get('title')}: datasource is not ${{datasource}}")
        refs = [t.get("refId") for t in p.get("targets", [])]
        if not refs or len(set(refs)) != len(refs):
            problems.append(f"panel {p.get('title')}: no targets, or duplicate refIds")
        if not p.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            problems.append(f"panel {p.get('title')}: no unit")

    queries = dashboard_queries(dashboard)
    # Every selector filters by the job and instance variables, so the dashboard can show one
    # server or a fleet.
    for title, expr in queries:
        for sel in re.findall(r"leapcache_[a-z0-9_]+(\{[^}]*\})?", expr):
            if 'job=~"$job"' not in sel or 'instance=~"$instance"' not in sel:
                problems.append(f"panel {title}: a selector ignores $job/$instance: {expr}")
                break

    # promtool parses each query as a recording rule.
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": grafana_to_promql(expr)}
        for i, (_, expr) in enumerate(queries + variable_queries(dashboard))]}]}
    path = os.path.join(repo.work, "dashboard-queries.json")
    os.makedirs(repo.work, exist_ok=True)
    with open(path, "w") as f:
        json.dump(rules, f, indent=1)  # JSON is YAML
    proc = run([args.promtool, "check", "rules", path])
    if proc.returncode != 0:
        problems.append(
            f"promtool cannot parse the dashboard's queries:\n{proc.stdout}{proc.stderr}")
    if problems:
        raise Failures(problems)
    print(f"dashboard: {len(dashboard['panels'])} panels, {len(queries)} queries parse")


# --- metrics ------------------------------------------------------------------------------------

class Server:
    """leapcache-server on free ports, started with the chart's config and arguments."""

    def __init__(self, binary, config_path, args, env, work):
        argv = [binary] + [a.replace("CONFIG", config_path) for a in args] + [
            # Flags outrank the file: free loopback ports, and a budget that suits a test.
            "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--memory-budget=64MiB",
            "--spill-budget=0"]
        self.stdout = open(os.path.join(work, "server.stdout"), "w+")
        self.stderr = open(os.path.join(work, "server.stderr"), "w+")
        self.proc = subprocess.Popen(argv, stdout=self.stdout, stderr=self.stderr,
                                     env=clean_env(env), cwd=work)
        self.grpc = self.metrics = None
        deadline = time.time() + 60
        while time.time() < deadline and (self.grpc is None or self.metrics is None):
            if self.proc.poll() is not None:
                raise Failures([f"the server exited with {self.proc.returncode}:\n{self.log()}"])
            self.stdout.seek(0)
            for line in self.stdout.read().splitlines():
                m = re.match(r"leapcache-server (listening|metrics) on (\S+)", line)
                if m and m.group(1) == "listening":
                    self.grpc = m.group(2)
                elif m:
                    self.metrics = m.group(2)
            time.sleep(0.1)
        if self.grpc is None or self.metrics is None:
            self.stop()
            raise Failures([f"the server did not report its addresses:\n{self.log()}"])

    def log(self):
        self.stderr.seek(0)
        return self.stderr.read()

    def http(self, path):
        try:
            with urllib.request.urlopen(f"http://{self.metrics}{path}", timeout=10) as r:
                return r.status, r.headers.get("Content-Type", ""), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type", ""), e.read().decode()

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode


def write_npy(path, shape, values):
    """A float32 .npy file (format 1.0), without numpy."""
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % \
        "".join(f"{d}, " for d in shape).rstrip(" ")
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack(f"<{len(values)}f", *values))


def format_flags(label):
    """leapcache-cli register flags for a storage format label ("leap8", "int-col6", "bf16")."""
    m = re.fullmatch(r"(leap|int-row|int-col|bf16|fp16|fp32)([0-9]*)", label)
    codec, bits = m.group(1), m.group(2) or {"bf16": "16", "fp16": "16", "fp32": "32"}[m.group(1)]
    return ["--codec", codec, "--bits", bits]


def client_workload(cli, server, values, schema_formats, work):
    """Real traffic through the client: every format the chart offers is registered (the server
    must label it as the chart names it), then one checkpoint of the chart's storage.format is
    put, looked up (a hit and a miss) and read back. Returns problems."""
    problems = []

    def call(*argv):
        p = run([cli, "--server", server, *argv], timeout=60)
        if p.returncode != 0:
            problems.append(f"leapcache-cli {' '.join(argv)}: rc={p.returncode} {p.stderr.strip()}")
        return dict(re.findall(r"^([a-z_]+): (.*)$", p.stdout, re.M))

    shape = ["--layers", "1", "--heads", "2", "--dk", "16", "--dv", "16"]
    namespace = None
    for label in schema_formats:
        info = call("register", "--tenant", "deploy-test", *shape, *format_flags(label))
        if info and info.get("format") != label:
            problems.append(f"storage format {label!r} of the chart is {info.get('format')!r} "
                            "for the server")
        if label == values["storage"]["format"]:
            namespace = info.get("namespace_id")
    if problems or namespace is None:
        return problems or ["the chart's storage.format was not registered"]

    rng = random.Random(1)
    state = os.path.join(work, "state.npy")
    write_npy(state, (2, 16, 16), [rng.uniform(-1, 1) for _ in range(512)])
    with open(os.path.join(work, "prompt.txt"), "w") as f:
        f.write(" ".join(str(t) for t in range(64)))
    with open(os.path.join(work, "other.txt"), "w") as f:
        f.write(" ".join(str(1000 + t) for t in range(64)))
    chain = ["--namespace", namespace, "--block-tokens", "16", "--tokens-file"]
    call("put", "--state", state, *chain, os.path.join(work, "prompt.txt"))
    hit = call("lookup", *chain, os.path.join(work, "prompt.txt"))
    miss = call("lookup", *chain, os.path.join(work, "other.txt"))
    if hit.get("hit") != "true" or miss.get("hit") != "false":
        problems.append(f"lookups after a put: {hit} / {miss}")
    elif not call("get", "--namespace", namespace, "--hash", hit["hash"],
                  "--out", os.path.join(work, "read.npy")) and not problems:
        problems.append("get printed nothing")
    return problems


def metric_queries(repo):
    """[(where, expr)] of every PromQL expression of the dashboard and the alert rules."""
    with open(repo.path("deploy", "dashboards", "leapcache.json")) as f:
        dashboard = json.load(f)
    queries = [(f"dashboard panel {t}", e) for t, e in dashboard_queries(dashboard)]
    queries += [(f"dashboard {t}", e) for t, e in variable_queries(dashboard)]
    rules = repo.yaml_to_json(repo.path("deploy", "alerts", "leapcache-rules.yaml"))[0]
    for group in rules["groups"]:
        for rule in group["rules"]:
            queries.append((f"alert {rule.get('alert') or rule.get('record')}", rule["expr"]))
    return queries


def cmd_metrics(args):
    repo = Repo(args)
    work = os.path.join(repo.work, "metrics")
    shutil.rmtree(work, ignore_errors=True)
    proc, manifests, values, _ = repo.render(None, work)
    if proc.returncode != 0:
        raise Failures([f"rendering the defaults failed: {proc.stderr}"])
    text, cargs, env = config_text_and_args(manifests)
    config_path = os.path.join(work, "leapcache.yaml")
    with open(config_path, "w") as f:
        f.write(text)
    sts = next(m["object"] for m in manifests if m["object"]["kind"] == "StatefulSet")
    container = sts["spec"]["template"]["spec"]["containers"][0]

    problems = []
    server = Server(args.server, config_path, cargs, env, work)
    try:
        # The kubelet's probes, as the chart configures them.
        probe_calls = 5
        for kind in ("startupProbe", "livenessProbe"):
            grpc_probe = container[kind]["grpc"]
            p = run([os.path.join(repo.tools, "grpcprobe"), "-addr", server.grpc,
                     "-service", grpc_probe.get("service", ""), "-count", str(probe_calls)])
            if p.returncode != 0:
                problems.append(
                    f"{kind} (gRPC health of {grpc_probe.get('service')!r}) fails: {p.stdout}")
        wrong = run([os.path.join(repo.tools, "grpcprobe"), "-addr", server.grpc,
                     "-service", "no.such.Service"])
        if wrong.returncode == 0:
            problems.append("the gRPC probe also passes for an unknown service: it proves nothing")
        ready = container["readinessProbe"]["httpGet"]
        status, _, body = server.http(ready["path"])
        if status != 200:
            problems.append(f"readinessProbe GET {ready['path']}: HTTP {status} {body.strip()}")
        status, _, _ = server.http("/healthz")
        if status != 200:
            problems.append(f"/healthz: HTTP {status}")
        # The image's HEALTHCHECK script, against the real admin port.
        port = server.metrics.rsplit(":", 1)[1]
        hc = run(["bash", repo.path("deploy", "docker", "healthcheck.sh"), port], timeout=30)
        if hc.returncode != 0:
            problems.append(
                f"deploy/docker/healthcheck.sh fails against a ready server: {hc.stderr}")

        if args.cli:
            with open(os.path.join(repo.chart, "values.schema.json")) as f:
                formats = json.load(f)["properties"]["storage"]["properties"]["format"]["enum"]
            problems += client_workload(args.cli, server.grpc, values, formats, work)

        status, content_type, body = server.http("/metrics")
        if status != 200 or not content_type.startswith("text/plain"):
            raise Failures(problems + [f"/metrics: HTTP {status} {content_type}"])
        expo = promql.Exposition(body)
        with open(os.path.join(work, "metrics.txt"), "w") as f:
            f.write(body)

        checks = 0
        for where, expr in metric_queries(repo):
            refs = promql.metric_references(expr)
            if not refs:
                problems.append(f"{where}: reads no metric: {expr}")
            names_in_expr = set()
            for name, func in refs:
                names_in_expr.add(name)
                if name in promql.SYNTHETIC_METRICS:
                    continue
                checks += 1
                problem = promql.check_reference(expo, name, func)
                if problem:
                    problems.append(f"{where}: {problem}")
            # Labels the expression filters or groups by must exist on the series it reads
            # (when the scrape has samples of them; families without series yet are skipped).
            exported = set()
            with_samples = False
            for name in names_in_expr:
                if name in expo.labels:
                    with_samples = True
                    exported |= expo.labels[name]
            wanted = promql.label_names(expr) - promql.TARGET_LABELS - {"le"}
            if with_samples and wanted - exported:
                # Families without samples in this scrape (e.g. per-format memory before any
                # put) cannot show their labels; only judge expressions whose metrics all have some.
                scraped = names_in_expr - promql.SYNTHETIC_METRICS
                if all(n in expo.labels for n in scraped):
                    problems.append(f"{where}: labels {sorted(wanted - exported)} are on none of "
                                    f"{sorted(names_in_expr)}")
        if args.cli:
            fmt = values["storage"]["format"]
            for name, want in [("leapcache_memory_fp32_equivalent_bytes", {"format": fmt}),
                               ("leapcache_lookup_hits_total", {}),
                               ("leapcache_lookup_miss_tokens_total", {}),
                               ("leapcache_get_bytes_total", {})]:
                if not expo.value(name, **want):
                    problems.append(
                        f"{name}{want} is still 0 after the client's put, lookups and get")
        # The probes above went through the server's RPC metrics.
        checks_seen = expo.value("leapcache_rpcs_total", method="Health/Check", code="OK") or 0
        if checks_seen < 2 * probe_calls:
            problems.append(f"leapcache_rpcs_total{{method=\"Health/Check\"}} is {checks_seen} "
                            f"after {2 * probe_calls} probe calls")
        traffic = "after puts, lookups and gets" if args.cli else "without client traffic"
        print(f"metrics: {checks} metric references checked against a scrape of "
              f"{len(expo.types)} families, {traffic}")
    finally:
        rc = server.stop(timeout=values["lifecycle"]["shutdownGraceSeconds"] + 30)
    if rc != 0:
        problems.append(
            f"the server did not drain and exit 0 on SIGTERM (rc={rc}):\n{server.log()}")
    if problems:
        raise Failures(problems)


# --- dockerfile ---------------------------------------------------------------------------------

BUILD_TOOLS = re.compile(r"^(build-essential|cmake|ninja-build|make|gcc.*|g\+\+.*|clang.*|"
                         r"pkg-config|protobuf-compiler.*|golang.*|git|.*-dev)$")


def dockerfile_instructions(text):
    """[(INSTRUCTION, arguments)] with continuation lines joined and comments dropped."""
    out, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") and not current:
            continue
        if stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        current += " " + stripped if current else stripped
        if current.endswith("\\"):
            current = current[:-1].rstrip()
            continue
        if current:
            word, _, rest = current.partition(" ")
            out.append((word.upper(), rest.strip()))
        current = ""
    return out


def bootstrap_packages(path):
    with open(path) as f:
        text = f.read()
    m = re.search(r"^packages=\((.*?)^\)", text, re.S | re.M)
    if not m:
        raise Failures([f"{path}: no packages=( ... ) list"])
    return [line.split("#")[0].strip() for line in m.group(1).splitlines()
            if line.split("#")[0].strip()]


def cmd_dockerfile(args):
    repo = Repo(args)
    path = repo.path("deploy", "Dockerfile")
    with open(path) as f:
        text = f.read()
    instructions = dockerfile_instructions(text)
    problems = []

    stages = []
    for word, rest in instructions:
        if word == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?$", rest, re.I)
            stages.append({"image": m.group(1), "name": m.group(2), "body": []})
        elif stages:
            stages[-1]["body"].append((word, rest))
    args_defaults = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
    if len(stages) < 2:
        problems.append("not a multi-stage build")
        raise Failures(problems)
    build, final = stages[0], stages[-1]
    cuda_image = r"nvidia/cuda:\$\{CUDA_VERSION\}-%s-\$\{UBUNTU_RELEASE\}"
    if not re.fullmatch(cuda_image % "devel", build["image"]):
        problems.append(f"the build stage is not the CUDA devel image: {build['image']}")
    if not re.fullmatch(cuda_image % "runtime", final["image"]):
        problems.append(f"the final stage is not the CUDA runtime image: {final['image']}")
    if not re.fullmatch(r"13\.0\.\d+", args_defaults.get("CUDA_VERSION", "")):
        problems.append("CUDA_VERSION must default to a 13.0.x release")
    if args_defaults.get("UBUNTU_RELEASE") != "ubuntu24.04":
        problems.append("UBUNTU_RELEASE must default to ubuntu24.04")

    body = final["body"]
    users = [rest for word, rest in body if word == "USER"]
    if not users or not re.fullmatch(r"[1-9][0-9]*(:[1-9][0-9]*)?", users[-1]):
        problems.append("the final stage does not end as a numeric non-root USER")
    entry = [rest for word, rest in body if word == "ENTRYPOINT"]
    try:
        entry_argv = json.loads(entry[-1]) if entry else None
    except json.JSONDecodeError:
        entry_argv = None
    if not entry_argv or not entry_argv[0].endswith("/leapcache-server"):
        problems.append("ENTRYPOINT is not leapcache-server in exec (JSON) form")
    health = [rest for word, rest in body if word == "HEALTHCHECK"]
    if not health or "CMD" not in health[-1]:
        problems.append("no HEALTHCHECK")
    for word, rest in body:
        if word == "ADD":
            problems.append(f"ADD in the runtime stage (use COPY): {rest}")
        if word == "COPY" and "--from=" in rest and f"--from={build['name']}" not in rest:
            problems.append(f"COPY from a stage other than the build: {rest}")
        if word == "COPY" and "--from=" not in rest:
            for src in rest.split()[:-1]:
                if not os.path.exists(repo.path(src)):
                    problems.append(f"COPY source {src} does not exist")
        if word == "RUN" and "apt-get install" in rest:
            after = rest.split("apt-get install", 1)[1]
            named = re.findall(r"(?<![-\w/=])([a-z0-9][a-z0-9.+-]+)(?=\s|$)", after)
            for pkg in named:
                if BUILD_TOOLS.match(pkg):
                    problems.append(f"the runtime stage installs a build tool: {pkg}")
    if not any(word == "RUN" and "--check-config" in rest for word, rest in body):
        problems.append("the runtime stage does not check its shipped config")

    # The build stage installs what scripts/bootstrap.sh installs, but for the packages the
    # Dockerfile names as not needed (test-only).
    build_text = " ".join(rest for word, rest in build["body"] if word == "RUN")
    installed = set(re.findall(r"[a-z0-9][a-z0-9.+-]+", build_text))
    m = re.search(r"^# Not needed for the image[^:]*:(.*?)^(?!#)", text, re.S | re.M)
    excluded = set(re.findall(r"[a-z0-9][a-z0-9.+-]+", m.group(1).replace("#", " ") if m else ""))
    for pkg in bootstrap_packages(repo.path("scripts", "bootstrap.sh")):
        if pkg not in installed and pkg not in excluded:
            problems.append(f"scripts/bootstrap.sh installs {pkg}, the image build does not "
                            "(install it, or list it as not needed in deploy/Dockerfile)")

    ignore = repo.path("deploy", "Dockerfile.dockerignore")
    if not os.path.exists(ignore) or not re.search(r"^build\*$", open(ignore).read(), re.M):
        problems.append("deploy/Dockerfile.dockerignore must keep build trees out of the context")
    if not os.access(repo.path("deploy", "docker", "healthcheck.sh"), os.X_OK):
        problems.append("deploy/docker/healthcheck.sh is not executable")
    if problems:
        raise Failures(problems)
    print(f"dockerfile: {len(stages)} stages, runtime user {users[-1]}, entrypoint {entry_argv}")


# --- main ---------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("build-tools")
    p.add_argument("--go", required=True)
    p.add_argument("--gopath", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_build_tools)

    p = sub.add_parser("renderer-test")
    p.add_argument("--go", required=True)
    p.add_argument("--gopath", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_renderer_test)

    def common(name, func, server=False, promtool=False):
        p = sub.add_parser(name)
        p.add_argument("--source-dir", required=True)
        p.add_argument("--work-dir", required=True)
        p.add_argument("--tools-dir")
        if server:
            p.add_argument("--server", required=True)
        if promtool:
            p.add_argument("--promtool", required=True)
        p.set_defaults(func=func)

    common("chart", cmd_chart)
    common("server-config", cmd_server_config, server=True)
    common("alerts", cmd_alerts, promtool=True)
    common("dashboard", cmd_dashboard, promtool=True)
    common("metrics", cmd_metrics, server=True)
    sub.choices["metrics"].add_argument(
        "--cli", help="leapcache-cli, to drive puts, lookups and gets before the scrape")
    common("dockerfile", cmd_dockerfile)

    args = parser.parse_args()
    try:
        args.func(args)
    except Failures as f:
        print(f"\n{len(f.args[0])} problem(s):", file=sys.stderr)
        for problem in f.args[0]:
            print(f"- {problem}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
