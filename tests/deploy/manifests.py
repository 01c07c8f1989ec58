"""Checks of rendered Kubernetes manifests, the parts a cluster would reject or silently misroute.

check_manifests(manifests, values) returns a list of problems (empty when all is well). It checks
every document (known apiVersion/kind, names, labels, required fields), the references between
them (selectors match pod labels, Service and probe ports exist on the container, mounts name
volumes, volumes name rendered ConfigMaps and keys, the ServiceMonitor finds exactly one Service)
and that the rendering follows the values (GPU requests, memory for the host tiers,
securityContext).
"""

import re

# What the chart may render: (apiVersion, kind) -> required dotted fields.
KNOWN_KINDS = {
    ("v1", "ConfigMap"): ["data"],
    ("v1", "Service"): ["spec.ports", "spec.selector"],
    ("v1", "ServiceAccount"): [],
    ("apps/v1", "StatefulSet"): [
        "spec.selector.matchLabels", "spec.serviceName", "spec.template.metadata.labels",
        "spec.template.spec.containers",
    ],
    ("policy/v1", "PodDisruptionBudget"): ["spec.selector.matchLabels"],
    ("networking.k8s.io/v1", "NetworkPolicy"): ["spec.podSelector", "spec.policyTypes"],
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ["spec.selector", "spec.endpoints"],
    ("monitoring.coreos.com/v1", "PrometheusRule"): ["spec.groups"],
}

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
PORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# Fields of the core/v1 PodSpec and Container: a misspelt field is dropped by the API server
# (or refused under strict field validation), so a typo here silently loses a probe or a limit.
POD_SPEC_FIELDS = {
    "activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "containers",
    "dnsConfig", "dnsPolicy", "enableServiceLinks", "ephemeralContainers", "hostAliases",
    "hostIPC", "hostNetwork", "hostPID", "hostUsers", "hostname", "imagePullSecrets",
    "initContainers", "nodeName", "nodeSelector", "os", "overhead", "preemptionPolicy",
    "priority", "priorityClassName", "readinessGates", "resourceClaims", "restartPolicy",
    "runtimeClassName", "schedulerName", "schedulingGates", "securityContext",
    "serviceAccount", "serviceAccountName", "setHostnameAsFQDN", "shareProcessNamespace",
    "subdomain", "terminationGracePeriodSeconds", "tolerations", "topologySpreadConstraints",
    "volumes",
}
CONTAINER_FIELDS = {
    "args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle",
    "livenessProbe", "name", "ports", "readinessProbe", "resizePolicy", "resources",
    "restartPolicy", "securityContext", "startupProbe", "stdin", "stdinOnce",
    "terminationMessagePath", "terminationMessagePolicy", "tty", "volumeDevices",
    "volumeMounts", "workingDir",
}
PROBE_FIELDS = {
    "exec", "failureThreshold", "grpc", "httpGet", "initialDelaySeconds", "periodSeconds",
    "successThreshold", "tcpSocket", "terminationGracePeriodSeconds", "timeoutSeconds",
}

SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
              "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
              "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
QUANTITY_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
                  "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
                  "Pi": 2**50, "Ei": 2**60}


def size_bytes(text):
    """A size in the server's syntax ("8Gi", "512MiB", 1048576) in bytes."""
    m = re.fullmatch(r"([0-9]+)([A-Za-z]*)", str(text).strip())
    if not m or m.group(2) not in SIZE_UNITS:
        raise ValueError(f"not a byte size: {text!r}")
    return int(m.group(1)) * SIZE_UNITS[m.group(2)]


def overhead_bytes(values):
    """tiers.memoryOverhead in bytes; "auto" as the server's ServerMemoryBound less its host
    tiers (service/config/config.h), with the server's defaults for settings not in config."""
    tiers = values["tiers"]
    if str(tiers["memoryOverhead"]) != "auto":
        return size_bytes(tiers["memoryOverhead"])
    config = values.get("config") or {}
    decode = 0 if config.get("compute_backend", "auto") == "cuda" else \
        size_bytes(config.get("decode_memory_budget", "1GiB"))
    grpc = size_bytes(config.get("grpc_memory_budget", "256MiB"))
    message = size_bytes(config.get("max_message_bytes", "8MiB"))
    return decode + grpc + 2 * message * int(tiers["overheadCores"]) + (128 << 20) + (64 << 20)


def quantity_bytes(text):
    """A Kubernetes memory quantity ("16Gi", "20G", 17179869184) in bytes."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)", str(text).strip())
    if not m or m.group(2) not in QUANTITY_UNITS:
        raise ValueError(f"not a memory quantity: {text!r}")
    return float(m.group(1)) * QUANTITY_UNITS[m.group(2)]


def get(obj, dotted, default=None):
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return default
        obj = obj[part]
    return obj


def matches(selector, labels):
    """A matchLabels-style selector against a label map (an empty selector matches nothing here:
    the chart never means to select everything)."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


class Checker:
    def __init__(self, manifests, values):
        self.manifests = manifests
        self.values = values
        self.problems = []

    def fail(self, where, message):
        self.problems.append(f"{where}: {message}")

    def of_kind(self, kind):
        return [m for m in self.manifests if m["object"].get("kind") == kind]

    # --- every document ---------------------------------------------------------------------

    def check_document(self, m):
        obj = m["object"]
        where = f'{m["source"]} {obj.get("kind")}/{get(obj, "metadata.name")}'
        if not isinstance(obj, dict):
            self.fail(m["source"], "a document is not a map")
            return
        key = (obj.get("apiVersion"), obj.get("kind"))
        if key not in KNOWN_KINDS:
            self.fail(where, f"unknown apiVersion/kind {key}")
            return
        for field in ["metadata.name", "metadata.namespace"] + KNOWN_KINDS[key]:
            if get(obj, field) in (None, "", [], {}):
                self.fail(where, f"{field} is missing or empty")
        name = get(obj, "metadata.name", "")
        # Service names become DNS labels; everything else here is a DNS subdomain.
        pattern, limit = (DNS_LABEL, 63) if obj["kind"] == "Service" else (DNS_SUBDOMAIN, 253)
        if not pattern.match(name) or len(name) > limit:
            self.fail(where, f"invalid name {name!r}")
        for field in ("metadata.labels", "spec.template.metadata.labels"):
            for k, v in (get(obj, field) or {}).items():
                if not LABEL_NAME.match(k) or len(k.split("/")[-1]) > 63:
                    self.fail(where, f"invalid label name {k!r} in {field}")
                if not isinstance(v, str) or not LABEL_VALUE.match(v) or len(v) > 63:
                    self.fail(where, f"invalid label value {v!r} for {k} in {field}")
        for k, v in (get(obj, "metadata.annotations") or {}).items():
            if not isinstance(v, str):
                self.fail(where, f"annotation {k} is not a string ({v!r})")

    def check_unique(self):
        seen = set()
        for m in self.manifests:
            key = (m["object"].get("kind"), get(m["object"], "metadata.name"))
            if key in seen:
                self.fail(m["source"], f"{key[0]}/{key[1]} is rendered twice")
            seen.add(key)

    # --- workloads ----------------------------------------------------------------------------

    def pods(self):
        """(StatefulSet name, pod template) for every workload."""
        return [(get(s["object"], "metadata.name"), get(s["object"], "spec.template"))
                for s in self.of_kind("StatefulSet")]

    def check_statefulset(self, m):
        sts = m["object"]
        where = f'StatefulSet/{get(sts, "metadata.name")}'
        pod = get(sts, "spec.template")
        labels = get(pod, "metadata.labels") or {}
        if not matches(get(sts, "spec.selector.matchLabels"), labels):
            self.fail(where, "spec.selector.matchLabels does not match the pod template's labels")
        headless = [s for s in self.of_kind("Service")
                    if get(s["object"], "metadata.name") == get(sts, "spec.serviceName")]
        if len(headless) != 1 or get(headless[0]["object"], "spec.clusterIP") != "None":
            self.fail(where, f'serviceName {get(sts, "spec.serviceName")!r} is not a rendered '
                             "headless Service")
        if get(sts, "spec.replicas") != self.values["replicaCount"]:
            self.fail(where, "replicas differ from replicaCount")

        spec = pod["spec"]
        for field in sorted(set(spec) - POD_SPEC_FIELDS):
            self.fail(where, f"unknown pod spec field {field!r}")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        if len(volumes) != len(spec.get("volumes", [])):
            self.fail(where, "duplicate volume names")
        self.check_volumes(where, volumes)
        sa = spec.get("serviceAccountName")
        rendered_sas = [get(s["object"], "metadata.name") for s in self.of_kind("ServiceAccount")]
        if self.values["serviceAccount"].get("create", True) and sa not in rendered_sas:
            self.fail(where, f"serviceAccountName {sa!r} is not rendered")
        if spec.get("automountServiceAccountToken") is not False:
            self.fail(where, "the service account token is mounted; the server needs none")
        grace = spec.get("terminationGracePeriodSeconds", 30)
        life = self.values["lifecycle"]
        if grace <= life["preStopSleepSeconds"] + life["shutdownGraceSeconds"]:
            self.fail(where, "terminationGracePeriodSeconds does not cover preStop + drain")

        pod_sc = spec.get("securityContext") or {}
        containers = spec.get("containers") or []
        for c in containers:
            self.check_container(where, c, volumes, pod_sc)
        self.check_scheduling(where, spec)

    def check_volumes(self, where, volumes):
        configmaps = {get(c["object"], "metadata.name"): c["object"]
                      for c in self.of_kind("ConfigMap")}
        for name, v in volumes.items():
            if "configMap" in v:
                cm = configmaps.get(v["configMap"].get("name"))
                if cm is None:
                    self.fail(where, f'volume {name}: ConfigMap {v["configMap"].get("name")!r} '
                                     "is not rendered")
                    continue
                for item in v["configMap"].get("items", []):
                    if item["key"] not in cm.get("data", {}):
                        self.fail(where,
                                  f'volume {name}: key {item["key"]!r} is not in the ConfigMap')
            elif "secret" in v:
                if not v["secret"].get("secretName"):
                    self.fail(where, f"volume {name}: no secretName")
                mode = v["secret"].get("defaultMode", 0o644)
                if mode & 0o007:
                    self.fail(where, f"volume {name}: secret readable by others (mode {mode:o})")
            elif "emptyDir" not in v:
                self.fail(where, f"volume {name}: unexpected volume source {sorted(v)}")

    def check_container(self, where, c, volumes, pod_sc):
        where = f'{where} container {c.get("name")}'
        for field in sorted(set(c) - CONTAINER_FIELDS):
            self.fail(where, f"unknown container field {field!r}")
        if not c.get("image"):
            self.fail(where, "no image")
        ports = c.get("ports") or []
        by_name = {p.get("name"): p for p in ports}
        numbers = {p.get("containerPort") for p in ports}
        if len(by_name) != len(ports) or len(numbers) != len(ports):
            self.fail(where, "duplicate port names or numbers")
        for p in ports:
            if not PORT_NAME.match(p.get("name", "")) or len(p["name"]) > 15:
                self.fail(where, f'invalid port name {p.get("name")!r}')
            if not isinstance(p.get("containerPort"), int) or not 0 < p["containerPort"] < 65536:
                self.fail(where, f'invalid containerPort {p.get("containerPort")!r}')
        if numbers != {self.values["ports"]["grpc"], self.values["ports"]["metrics"]}:
            self.fail(where, "container ports differ from values.ports")

        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            probe = c.get(kind)
            if probe is None:
                if self.values["probes"][kind.replace("Probe", "")]["enabled"]:
                    self.fail(where, f"{kind} is enabled in values but not rendered")
                continue
            for field in sorted(set(probe) - PROBE_FIELDS):
                self.fail(where, f"{kind}: unknown field {field!r}")
            handlers = [h for h in ("grpc", "httpGet", "tcpSocket", "exec") if h in probe]
            if len(handlers) != 1:
                self.fail(where, f"{kind} needs exactly one handler (has {handlers})")
                continue
            port = probe[handlers[0]].get("port") if handlers[0] != "exec" else None
            if handlers[0] == "grpc" and not isinstance(port, int):
                self.fail(where, f"{kind}: a gRPC probe's port must be a number")
            if port is not None and port not in by_name and port not in numbers:
                self.fail(where, f"{kind} port {port!r} is not a container port")
            if handlers[0] == "grpc" and port != self.values["ports"]["grpc"]:
                self.fail(where, f"{kind} does not probe the gRPC port")

        mounts = c.get("volumeMounts") or []
        paths = [mo["mountPath"] for mo in mounts]
        if len(set(paths)) != len(paths):
            self.fail(where, "two mounts at one path")
        for mo in mounts:
            if mo["name"] not in volumes:
                self.fail(where, f'volumeMount {mo["name"]!r} names no volume')
        if self.values["tls"].get("enabled"):
            tls = [mo for mo in mounts if mo["mountPath"] == self.values["tls"]["mountPath"]]
            secret = tls and "secret" in volumes.get(tls[0]["name"], {})
            if not secret or not tls[0].get("readOnly"):
                self.fail(where, "TLS is enabled but its secret is not mounted read-only")

        # The server's config file: --config names a file on a mounted ConfigMap.
        args = c.get("args") or []
        config_args = [a for a in args if a.startswith("--config=")]
        if len(config_args) != 1:
            self.fail(where, f"expected one --config=PATH argument, got {args}")
        else:
            path = config_args[0].split("=", 1)[1]
            mount = [mo for mo in mounts if path.startswith(mo["mountPath"].rstrip("/") + "/")]
            if not mount or "configMap" not in volumes.get(mount[0]["name"], {}):
                self.fail(where, f"--config {path} is not on a mounted ConfigMap")

        sc = c.get("securityContext") or {}
        if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
            self.fail(where, "runAsNonRoot is not set")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) in (None, 0):
            self.fail(where, "no non-root runAsUser")
        if sc.get("readOnlyRootFilesystem") is not True:
            self.fail(where, "the root filesystem is writable")
        if sc.get("allowPrivilegeEscalation") is not False:
            self.fail(where, "privilege escalation is allowed")
        if "ALL" not in (get(sc, "capabilities.drop") or []) or get(sc, "capabilities.add"):
            self.fail(where, "capabilities are not all dropped")
        if "/tmp" not in paths:
            self.fail(where, "/tmp is not writable (no emptyDir) with a read-only root")

        self.check_resources(where, c)

    def check_resources(self, where, c):
        v = self.values
        requests = get(c, "resources.requests") or {}
        limits = get(c, "resources.limits") or {}
        gpu = v["gpu"]
        env = {e["name"]: e.get("value") for e in c.get("env") or []}
        if gpu["enabled"]:
            if limits.get(gpu["resourceName"]) != gpu["count"]:
                self.fail(where, f'{gpu["resourceName"]} limit is not gpu.count')
            if env.get("NVIDIA_VISIBLE_DEVICES") is not None:
                self.fail(where, "GPU pod hides its devices")
        else:
            if any("gpu" in k for k in list(limits) + list(requests)):
                self.fail(where, "CPU-only pod requests a GPU")
            if env.get("NVIDIA_VISIBLE_DEVICES") != "void":
                self.fail(where,
                          "CPU-only pod does not hide the node's GPUs (NVIDIA_VISIBLE_DEVICES)")
        if any(k.startswith("LEAPCACHE_") for k in env):
            self.fail(where, "LEAPCACHE_* variables would override the rendered config")

        tiers = v["tiers"]
        host = size_bytes(tiers["spill"]["budget"])
        if tiers["primary"]["onHost"]:
            host += size_bytes(tiers["primary"]["budget"])
        memory = limits.get("memory", requests.get("memory"))
        if memory is None:
            self.fail(where, "no memory request or limit")
            return
        if quantity_bytes(memory) < host:
            self.fail(where, f"memory {memory} is below the host tiers ({host} bytes)")
        user_set = "memory" in (v["resources"].get("limits") or {}) or \
                   "memory" in (v["resources"].get("requests") or {})
        if not user_set:
            want = host + overhead_bytes(v)
            equal = requests.get("memory") == limits.get("memory")
            if quantity_bytes(limits.get("memory", 0)) < want or not equal:
                self.fail(where, f"derived memory should be request = limit >= {want} bytes "
                                 f"(got {requests.get('memory')} / {limits.get('memory')})")

    def check_scheduling(self, where, spec):
        v = self.values
        gpu_toleration = [t for t in spec.get("tolerations") or []
                          if t.get("key") == v["gpu"]["resourceName"]]
        wants = v["gpu"]["enabled"] and v["gpu"].get("tolerateTaint", False)
        if bool(gpu_toleration) != wants:
            self.fail(where, "GPU taint toleration does not follow gpu.enabled/tolerateTaint")
        for t in v.get("tolerations") or []:
            if t not in (spec.get("tolerations") or []):
                self.fail(where, f"toleration {t} from values is missing")
        if (spec.get("nodeSelector") or {}) != (v.get("nodeSelector") or {}):
            self.fail(where, "nodeSelector differs from values")
        if (spec.get("affinity") or {}) != (v.get("affinity") or {}):
            self.fail(where, "affinity differs from values")

    # --- services and selectors ---------------------------------------------------------------

    def selected_containers(self, selector):
        out = []
        for _, pod in self.pods():
            if matches(selector, get(pod, "metadata.labels") or {}):
                out.extend(get(pod, "spec.containers") or [])
        return out

    def check_service(self, m):
        svc = m["object"]
        where = f'Service/{get(svc, "metadata.name")}'
        containers = self.selected_containers(get(svc, "spec.selector") or {})
        if not containers:
            self.fail(where, "selector matches no pod template")
            return
        names = {p["name"]: p["containerPort"] for c in containers for p in c.get("ports") or []}
        numbers = set(names.values())
        for p in get(svc, "spec.ports") or []:
            target = p.get("targetPort", p.get("port"))
            if target not in names and target not in numbers:
                self.fail(where,
                          f'port {p.get("name")}: targetPort {target!r} is no container port')
            if not isinstance(p.get("port"), int) or not 0 < p["port"] < 65536:
                self.fail(where, f'port {p.get("name")}: invalid port {p.get("port")!r}')
            reaches = names.get(target, target)
            for port in ("grpc", "metrics"):
                if p.get("name") == port and reaches != self.values["ports"][port]:
                    self.fail(where, f"the {port} port does not reach the server's {port} port")
        fmt = get(svc, "metadata.annotations", {}).get("leapcache.io/storage-format")
        if fmt != self.values["storage"]["format"]:
            self.fail(where, "storage-format annotation differs from storage.format")

    def check_pdb(self, m):
        pdb = m["object"]
        where = f'PodDisruptionBudget/{get(pdb, "metadata.name")}'
        if not self.selected_containers(get(pdb, "spec.selector.matchLabels")):
            self.fail(where, "selector matches no pod template")
        if ("minAvailable" in pdb["spec"]) == ("maxUnavailable" in pdb["spec"]):
            self.fail(where, "exactly one of minAvailable and maxUnavailable is required")

    def check_network_policy(self, m):
        np = m["object"]
        where = f'NetworkPolicy/{get(np, "metadata.name")}'
        containers = self.selected_containers(get(np, "spec.podSelector.matchLabels"))
        if not containers:
            self.fail(where, "podSelector matches no pod template")
        names = {p["name"] for c in containers for p in c.get("ports") or []}
        for rule in get(np, "spec.ingress") or []:
            for p in rule.get("ports") or []:
                if isinstance(p.get("port"), str) and p["port"] not in names:
                    self.fail(where, f'port {p["port"]!r} is no container port')

    def check_service_monitor(self, m):
        sm = m["object"]
        where = f'ServiceMonitor/{get(sm, "metadata.name")}'
        selector = get(sm, "spec.selector.matchLabels")
        services = [s["object"] for s in self.of_kind("Service")
                    if matches(selector, get(s["object"], "metadata.labels") or {})]
        if len(services) != 1:
            self.fail(where, f"selector matches {len(services)} Services; "
                             "only one scrapes each pod once")
            return
        # The alert rules find a down target by its job, which must name leapcache.
        job_label = get(sm, "spec.jobLabel")
        job = (get(services[0], "metadata.labels") or {}).get(job_label) if job_label else \
            get(services[0], "metadata.name")
        if not job or "leapcache" not in job:
            self.fail(where, f"scrape job {job!r} does not contain 'leapcache' (LeapcacheDown "
                             "matches up{job=~\".*leapcache.*\"})")
        port_names = {p.get("name") for p in get(services[0], "spec.ports")}
        for e in get(sm, "spec.endpoints"):
            if e.get("port") not in port_names:
                self.fail(where, f'endpoint port {e.get("port")!r} is not a port of the Service')
            if e.get("path") != "/metrics":
                self.fail(where, "endpoint path is not /metrics")

    def run(self):
        for m in self.manifests:
            self.check_document(m)
        if self.problems:
            return self.problems
        self.check_unique()
        if len(self.of_kind("StatefulSet")) != 1:
            self.fail("chart", "expected exactly one StatefulSet")
        for m in self.manifests:
            kind = m["object"]["kind"]
            {
                "StatefulSet": self.check_statefulset,
                "Service": self.check_service,
                "PodDisruptionBudget": self.check_pdb,
                "NetworkPolicy": self.check_network_policy,
                "ServiceMonitor": self.check_service_monitor,
            }.get(kind, lambda _: None)(m)
        return self.problems


def check_manifests(manifests, values):
    return Checker(manifests, values).run()
