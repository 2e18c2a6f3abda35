#!/usr/bin/env bash
# Checks everything under deploy/ without a cluster or a container engine:
# renders the kustomizations and validates every object against the
# Kubernetes schemas (kubernetes-models, offline), checks the Prometheus
# config, alert rules and their unit tests with promtool, checks that the
# PrometheusRule carries exactly deploy/prometheus/alerts.yml, and that the
# Grafana dashboard is valid JSON whose queries name only metrics the server
# exports, and that the Dockerfiles copy every source folder the image's
# build needs. Any failure exits non-zero.
#   NODE_TOOLS   where the npm packages are installed (default build/deploy-tools)
set -euo pipefail
cd "$(dirname "$0")/../.."
NODE_TOOLS=${NODE_TOOLS:-build/deploy-tools}
py=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ ! -d "$NODE_TOOLS/node_modules/@kubernetes-models/prometheus-operator" ]; then
  echo "== installing kubernetes-models into $NODE_TOOLS"
  mkdir -p "$NODE_TOOLS"
  npm install --silent --no-audit --no-fund --prefix "$NODE_TOOLS" \
    kubernetes-models@4 @kubernetes-models/prometheus-operator@4 yaml@2 > /dev/null
fi
export NODE_PATH="$(cd "$NODE_TOOLS" && pwd)/node_modules"

for overlay in deploy/k8s/base deploy/k8s/overlays/gpu deploy/k8s/overlays/http-probes \
               deploy/k8s/overlays/inference-pool deploy/k8s/overlays/state-store; do
  echo "== $overlay"
  kubectl kustomize "$overlay" > "$work/rendered.yaml"
  node scripts/check/validate_k8s.js < "$work/rendered.yaml"
done

echo "== Prometheus config, rules and rule tests"
sed "s|/etc/prometheus/rules/alerts.yml|$PWD/deploy/prometheus/alerts.yml|" \
  deploy/compose/prometheus.yml > "$work/prometheus.yml"
promtool check config "$work/prometheus.yml"
promtool check rules deploy/prometheus/alerts.yml
promtool test rules deploy/prometheus/alerts.test.yml

echo "== PrometheusRule == alerts.yml, dashboard and compose references"
$py - <<'PY'
import json, re, sys, yaml
groups = yaml.safe_load(open("deploy/prometheus/alerts.yml"))["groups"]
rule = yaml.safe_load(open("deploy/k8s/base/prometheusrule.yaml"))
if rule["spec"]["groups"] != groups:
    sys.exit("deploy/k8s/base/prometheusrule.yaml differs from deploy/prometheus/alerts.yml")

# The metric names the server registers, with a histogram's series suffixes.
source = open("server/metrics/metrics.cc").read()
exported = set()
for name in re.findall(r'\.Name\("(attn_[a-z_]+)"\)', source):
    exported.add(name)
    exported.update(name + s for s in ("_bucket", "_sum", "_count"))
if len(exported) < 10:
    sys.exit("could not read the metric names from server/metrics/metrics.cc")

def names(expr):
    return set(re.findall(r"\battn_[a-z_]+\b", expr))

dashboard = json.load(open("deploy/grafana/attn-dashboard.json"))
queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
queries += [v["query"]["query"] for v in dashboard["templating"]["list"]]
used = set().union(*(names(q) for q in queries))
used |= set().union(*(names(r["expr"]) for g in groups for r in g["rules"]))
unknown = used - exported
if unknown:
    sys.exit(f"dashboard or alerts use metrics the server does not export: {sorted(unknown)}")
print(f"dashboard: {len(dashboard['panels'])} panels, {len(queries)} queries; "
      f"{len(used)} metric names, all exported")

# The endpoint picker's configuration (llm-d's EndpointPickerConfig): the
# metrics its engineConfigs map are exported, the pods carry the engine label
# of that mapping, and every plugin a source or profile names is declared.
# The old per-metric flags (--total-queued-requests-metric, ...) are gone
# from the picker; the docs must not send anyone to them.
epp_map = yaml.safe_load(open("deploy/k8s/overlays/inference-pool/epp-config.yaml"))
epp = yaml.safe_load(epp_map["data"]["config.yaml"])
if epp.get("kind") != "EndpointPickerConfig" or not epp.get("apiVersion", "").startswith("llm-d.ai/"):
    sys.exit("epp-config.yaml: not an llm-d.ai EndpointPickerConfig")
declared = {p.get("name", p["type"]) for p in epp["plugins"]}
named = [s["pluginRef"] for s in epp["dataLayer"]["sources"]]
named += [e["pluginRef"] for s in epp["dataLayer"]["sources"] for e in s["extractors"]]
named += [p["pluginRef"] for prof in epp["schedulingProfiles"] for p in prof["plugins"]]
if set(named) - declared:
    sys.exit(f"epp-config.yaml names undeclared plugins: {sorted(set(named) - declared)}")
extractor = next(p for p in epp["plugins"] if p["type"] == "core-metrics-extractor")["parameters"]
engine = next(e for e in extractor["engineConfigs"] if e["name"] == extractor["defaultEngine"])
specs = [engine[k].split("{")[0] for k in ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec")]
if set(specs) - exported:
    sys.exit(f"epp-config.yaml maps metrics the server does not export: {sorted(set(specs) - exported)}")
kustomization = open("deploy/k8s/overlays/inference-pool/kustomization.yaml").read()
if f"value: {engine['name']}" not in kustomization or "engine-type" not in kustomization:
    sys.exit(f"the inference-pool overlay does not label the pods llm-d.ai/engine-type: {engine['name']}")
if re.search(r"--[a-z-]+-metric=", open("docs/deploy.md").read()):
    sys.exit("docs/deploy.md names the endpoint picker's removed metric flags; use epp-config.yaml")
print(f"endpoint picker config: engine {engine['name']} maps {', '.join(specs)}, all exported; "
      f"{len(declared)} plugins declared")

compose = yaml.safe_load(open("deploy/compose/compose.yaml"))
import os
for service in compose["services"].values():
    for volume in service.get("volumes", []):
        source_path = os.path.join("deploy/compose", volume.split(":")[0])
        if not os.path.exists(source_path):
            sys.exit(f"compose mounts {source_path}, which does not exist")
print(f"compose: {len(compose['services'])} services, every mounted file exists")
PY
echo "== Dockerfiles copy every folder the image's build configures"
# The image builds with tests and benchmarks off: every other
# add_subdirectory() of the top CMakeLists.txt must be COPY'd, and the
# installed plugin must be where the build puts it.
$py - <<'PY'
import re, sys
top = open("CMakeLists.txt").read()
top = re.sub(r"if\(ATTN_BUILD_(TESTS|BENCHMARKS)\).*?endif\(\)", "", top, flags=re.S)
folders = re.findall(r"^add_subdirectory\((\w+)\)", top, flags=re.M)
plugin = "model/text/" + "libattn_sentencepiece.so"  # a build output, not a source
bad = []
for dockerfile in ("Dockerfile", "Dockerfile.cuda"):
    text = open(dockerfile).read()
    copied = set(re.findall(r"^COPY (\S+) \1$", text, flags=re.M))
    bad += [f"{dockerfile}: no COPY {f} {f}" for f in folders if f not in copied]
    if f"/build/{plugin}" not in text:
        bad.append(f"{dockerfile}: does not install /build/{plugin}")
# The build's Debian -dev packages (scripts/install_deps.sh) other than the
# tests' and benchmarks', in the build stage; the CUDA image brings its own
# LibTorch.
deps = open("scripts/install_deps.sh").read()
deps = deps[deps.index("PACKAGES=("):deps.index(")", deps.index("PACKAGES=("))]
needed = [p for p in re.findall(r"[\w.+-]+-dev\b", deps)
          if p not in ("libgtest-dev", "libgmock-dev", "libbenchmark-dev")]
for dockerfile in ("Dockerfile", "Dockerfile.cuda"):
    text = open(dockerfile).read()
    for p in needed:
        if p == "libtorch-dev" and dockerfile == "Dockerfile.cuda":
            continue
        if not re.search(rf"\s{re.escape(p)}\s", text):
            bad.append(f"{dockerfile}: the build stage does not install {p}")
if bad:
    sys.exit("\n".join(bad))
print(f"{', '.join(folders)}: copied by both Dockerfiles; {', '.join(needed)} installed")
PY

echo "deploy checks passed"
