// Validates rendered Kubernetes objects (a multi-document YAML on stdin)
// against the Kubernetes and Prometheus Operator schemas, offline.
//   kubectl kustomize deploy/k8s/base | node scripts/check/validate_k8s.js
// Needs `npm install kubernetes-models @kubernetes-models/prometheus-operator yaml`
// (NODE_PATH pointing at that node_modules). Exits 1 on any invalid or
// unknown object.
const YAML = require('yaml');

const models = {
  'v1/Namespace': () => require('kubernetes-models/v1/Namespace').Namespace,
  'v1/Service': () => require('kubernetes-models/v1/Service').Service,
  'v1/ConfigMap': () => require('kubernetes-models/v1/ConfigMap').ConfigMap,
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

const input = require('fs').readFileSync(0, 'utf8');
let failures = 0;
let count = 0;
for (const doc of YAML.parseAllDocuments(input)) {
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
