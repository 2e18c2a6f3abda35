// Validates rendered Kubernetes objects (a multi-document YAML on stdin)
// against the Kubernetes and Prometheus Operator schemas, offline.
//   kubectl kustomize deploy/k8s/base | node scripts/check/validate_k8s.js
// Needs `npm install kubernetes-models @kubernetes-models/prometheus-operator yaml`
// (NODE_PATH pointing at that node_modules). Exits 1 on any invalid or
// unknown object. kubernetes-models has no Gateway API Inference Extension
// types: an InferencePool is checked here against the fields of its v1 API
// reference, and against the rendered Deployment it must select.
const YAML = require('yaml');

const models = {
  'v1/Namespace': () => require('kubernetes-models/v1/Namespace').Namespace,
  'v1/Service': () => require('kubernetes-models/v1/Service').Service,
  'v1/ConfigMap': () => require('kubernetes-models/v1/ConfigMap').ConfigMap,
  'v1/Secret': () => require('kubernetes-models/v1/Secret').Secret,
  'networking.k8s.io/v1/NetworkPolicy': () =>
    require('kubernetes-models/networking.k8s.io/v1/NetworkPolicy').NetworkPolicy,
  'apps/v1/Deployment': () => require('kubernetes-models/apps/v1/Deployment').Deployment,
  'autoscaling/v2/HorizontalPodAutoscaler': () =>
    require('kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler').HorizontalPodAutoscaler,
  'policy/v1/PodDisruptionBudget': () =>
    require('kubernetes-models/policy/v1/PodDisruptionBudget').PodDisruptionBudget,
  'monitoring.coreos.com/v1/ServiceMonitor': () =>
    require('@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor').ServiceMonitor,
  'monitoring.coreos.com/v1/PrometheusRule': () =>
    require('@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule').PrometheusRule,
};

// inference.networking.k8s.io/v1 InferencePool: the required fields and
// their bounds (selector, 1 to 8 unique target ports, an endpoint picker
// reference), and that it selects the Deployment's pods on a port they have.
function validateInferencePool(pool, objects) {
  const spec = pool.spec || {};
  const fail = (what) => { throw new Error(what); };
  const labels = spec.selector && spec.selector.matchLabels;
  if (!labels || Object.keys(labels).length === 0) fail('spec.selector.matchLabels is required');
  const ports = spec.targetPorts || [];
  if (ports.length < 1 || ports.length > 8) fail('spec.targetPorts needs 1 to 8 ports');
  const numbers = ports.map((p) => p.number);
  if (numbers.some((n) => !Number.isInteger(n) || n < 1 || n > 65535)) {
    fail('spec.targetPorts[].number must be a port number');
  }
  if (new Set(numbers).size !== numbers.length) fail('spec.targetPorts numbers must be unique');
  if (spec.appProtocol && !['http', 'kubernetes.io/h2c'].includes(spec.appProtocol)) {
    fail('spec.appProtocol must be http or kubernetes.io/h2c');
  }
  const picker = spec.endpointPickerRef;
  if (!picker || !picker.name) fail('spec.endpointPickerRef.name is required');
  if (picker.port && !(Number.isInteger(picker.port.number) && picker.port.number > 0)) {
    fail('spec.endpointPickerRef.port.number must be a port number');
  }
  if (picker.failureMode && !['FailOpen', 'FailClose'].includes(picker.failureMode)) {
    fail('spec.endpointPickerRef.failureMode must be FailOpen or FailClose');
  }
  const deployments = objects.filter((o) => o.kind === 'Deployment' &&
      o.metadata.namespace === pool.metadata.namespace);
  const selected = deployments.filter((d) => Object.entries(labels).every(
      ([k, v]) => (d.spec.template.metadata.labels || {})[k] === v));
  if (selected.length === 0) fail(`selects no Deployment's pods (${JSON.stringify(labels)})`);
  for (const d of selected) {
    const open = d.spec.template.spec.containers.flatMap((c) => c.ports || [])
        .map((p) => p.containerPort);
    for (const n of numbers) {
      if (!open.includes(n)) fail(`target port ${n} is not a container port of ${d.metadata.name}`);
    }
  }
}

const input = require('fs').readFileSync(0, 'utf8');
let failures = 0;
let count = 0;
const docs = YAML.parseAllDocuments(input);
const objects = docs.filter((d) => !d.errors.length).map((d) => d.toJSON()).filter(Boolean);
for (const doc of docs) {
  if (doc.errors.length) {
    console.error(`YAML error: ${doc.errors[0].message}`);
    failures++;
    continue;
  }
  const obj = doc.toJSON();
  if (!obj) continue;
  const key = `${obj.apiVersion}/${obj.kind}`;
  const name = `${key} ${obj.metadata && obj.metadata.name}`;
  count++;
  if (key === 'inference.networking.k8s.io/v1/InferencePool') {
    try {
      validateInferencePool(obj, objects);
      console.log(`ok   ${name}`);
    } catch (error) {
      console.error(`FAIL ${name}: ${error.message}`);
      failures++;
    }
    continue;
  }
  if (!models[key]) {
    console.error(`${name}: no schema known for this kind; add it to validate_k8s.js`);
    failures++;
    continue;
  }
  try {
    const Model = models[key]();
    new Model(obj).validate();
    console.log(`ok   ${name}`);
  } catch (error) {
    console.error(`FAIL ${name}: ${error.message}`);
    failures++;
  }
}
if (count === 0) {
  console.error('no objects on stdin');
  process.exit(1);
}
process.exit(failures ? 1 : 0);
