#!/usr/bin/env bash
# A local KServe to try deploy/kserve/ on: kind + Gateway API (Envoy Gateway) + cert-manager + KServe (Standard mode)
# + KEDA + Prometheus (kube-prometheus-stack), the server image built from this checkout and loaded into kind, the
# default models on a claim, the s2s runtime and the addition InferenceService with its autoscaler.
#
#   deploy/kserve/kind-up.sh            # from the repository root; about 10 minutes
#   kind delete cluster --name s2s      # all gone
#
# Needs Docker, kind, kubectl and helm, and the internet (images and charts). Versions are KServe v0.20.0's own
# (kserve-deps.env in kserve/kserve). Not run by the tests: they check the manifests offline and run the runtime's
# container as a process (tests/test_deploy_kserve.py, tests/test_kserve_runtime.py). docs/DEPLOYMENT.md, "On
# KServe", says what to do with the cluster.
set -euo pipefail

CLUSTER=${CLUSTER:-s2s}
IMAGE=registry.example.com/s2s-server:0.1.0   # the name deploy/kserve/servingruntime.yaml runs
KSERVE_VERSION=v0.20.0
CERT_MANAGER_VERSION=v1.17.0
ENVOY_GATEWAY_VERSION=v1.8.1
KEDA_VERSION=2.18.0
PROMETHEUS_STACK_VERSION=83.4.0

cd "$(dirname "$0")/../.."
for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "kind-up.sh: $tool is not installed" >&2; exit 2; }
done
step() { printf '\n== %s\n' "$*"; }

step "kind cluster $CLUSTER"
kind get clusters | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER" --wait 120s
kubectl config use-context "kind-$CLUSTER"

step "the server image (CPU: the slim Python base), loaded into kind"
docker build -f deploy/docker/server.Dockerfile --build-arg BASE_IMAGE=python:3.12.12-slim-bookworm -t "$IMAGE" .
kind load docker-image "$IMAGE" --name "$CLUSTER"

step "Gateway API and Envoy Gateway: KServe's ingress in Standard mode"
# The chart's CRDs (the Gateway API's and Envoy Gateway's own) server-side: some are too large for a client-side apply.
helm show crds oci://docker.io/envoyproxy/gateway-helm --version "$ENVOY_GATEWAY_VERSION" \
  | kubectl apply --server-side --force-conflicts -f -
kubectl wait --for condition=established --timeout=60s crd/gateways.gateway.networking.k8s.io \
  crd/envoyproxies.gateway.envoyproxy.io
helm upgrade -i eg oci://docker.io/envoyproxy/gateway-helm --version "$ENVOY_GATEWAY_VERSION" \
  --namespace envoy-gateway-system --create-namespace --skip-crds --wait
kubectl create namespace kserve --dry-run=client -o yaml | kubectl apply -f -
kubectl apply -f - <<'EOF'
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: envoy
spec:
  controllerName: gateway.envoyproxy.io/gatewayclass-controller
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: kserve-ingress-gateway
  namespace: kserve
spec:
  gatewayClassName: envoy
  listeners:
    - name: http
      protocol: HTTP
      port: 80
      allowedRoutes:
        namespaces:
          from: All
EOF

step "cert-manager (KServe's webhooks)"
helm repo add jetstack https://charts.jetstack.io --force-update >/dev/null
helm upgrade -i cert-manager jetstack/cert-manager --version "$CERT_MANAGER_VERSION" \
  --namespace cert-manager --create-namespace --set crds.enabled=true --wait

step "KServe $KSERVE_VERSION, Standard mode, routes on the Gateway"
helm upgrade -i kserve-crd oci://ghcr.io/kserve/charts/kserve-crd --version "$KSERVE_VERSION" \
  --namespace kserve --wait
helm upgrade -i kserve-resources oci://ghcr.io/kserve/charts/kserve-resources --version "$KSERVE_VERSION" \
  --namespace kserve --wait \
  --set kserve.controller.deploymentMode=Standard \
  --set kserve.controller.gateway.ingressGateway.enableGatewayApi=true \
  --set kserve.controller.gateway.ingressGateway.className=envoy

step "KEDA $KEDA_VERSION"
helm repo add kedacore https://kedacore.github.io/charts --force-update >/dev/null
helm upgrade -i keda kedacore/keda --version "$KEDA_VERSION" --namespace keda --create-namespace --wait

step "Prometheus (kube-prometheus-stack): every PodMonitor, at http://prometheus-operated.monitoring.svc:9090"
helm repo add prometheus-community https://prometheus-community.github.io/helm-charts --force-update >/dev/null
helm upgrade -i prometheus prometheus-community/kube-prometheus-stack --version "$PROMETHEUS_STACK_VERSION" \
  --namespace monitoring --create-namespace --wait \
  --set grafana.enabled=false --set alertmanager.enabled=false \
  --set nodeExporter.enabled=false --set kubeStateMetrics.enabled=false \
  --set prometheus.prometheusSpec.podMonitorSelectorNilUsesHelmValues=false \
  --set prometheus.prometheusSpec.serviceMonitorSelectorNilUsesHelmValues=false

step "the model repository on the claim s2s-models (kind's local-path volumes: one node, ReadWriteOnce)"
kubectl apply -f - <<'EOF'
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: s2s-models
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 2Gi
---
apiVersion: v1
kind: Pod
metadata:
  name: s2s-models-fill
spec:
  containers:
    - name: fill
      image: busybox:1.37
      command: ["sleep", "3600"]
      volumeMounts:
        - name: models
          mountPath: /models
  volumes:
    - name: models
      persistentVolumeClaim:
        claimName: s2s-models
EOF
kubectl wait --for=condition=Ready pod/s2s-models-fill --timeout=300s
kubectl cp models/addition s2s-models-fill:/models/addition
kubectl exec s2s-models-fill -- chmod -R a+rX /models   # the server runs as uid 10001
kubectl delete pod s2s-models-fill --wait

step "the s2s runtime, its PodMonitor and the addition InferenceService"
kubectl apply -f deploy/kserve/servingruntime.yaml -f deploy/kserve/podmonitor.yaml
kubectl apply -f deploy/kserve/inferenceservice-addition.yaml
kubectl wait --for=condition=Ready inferenceservice/addition --timeout=600s
kubectl get inferenceservice addition

GATEWAY_SVC=$(kubectl get svc -n envoy-gateway-system \
  -l gateway.envoyproxy.io/owning-gateway-name=kserve-ingress-gateway -o jsonpath='{.items[0].metadata.name}')
cat <<EOF

Ready. Reach the gateway (leave it running):
  kubectl port-forward -n envoy-gateway-system svc/$GATEWAY_SVC 8080:80
then follow docs/DEPLOYMENT.md, "On KServe": the model answers at Host addition-default.example.com.
EOF
