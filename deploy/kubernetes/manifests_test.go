// Package manifests tests the Kubernetes manifests of deploy/: every
// kustomization is rendered with kustomize's own library and every object
// is decoded strictly (unknown fields rejected) into its typed API struct,
// so a misspelt field fails here instead of being dropped by the API server.
// It is a module of its own so that k8s.io/api, KEDA's and the Prometheus
// Operator's types stay out of the product's go.mod; `make test` runs it.
package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	kedav1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kustomizations are every kustomize root under deploy/ (relative to this
// folder).
var kustomizations = []string{
	"ncclwatch",
	"canary/pools/h200-ib",
	"canary/pools/a100-roce",
	"../fluent-bit",
	"../prometheus",
}

// typed maps apiVersion/kind to a new typed object.
var typed = map[string]func() any{
	"v1/ConfigMap":                                    func() any { return &corev1.ConfigMap{} },
	"v1/Namespace":                                    func() any { return &corev1.Namespace{} },
	"v1/Service":                                      func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                               func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":                              func() any { return &appsv1.Deployment{} },
	"apps/v1/DaemonSet":                               func() any { return &appsv1.DaemonSet{} },
	"batch/v1/CronJob":                                func() any { return &batchv1.CronJob{} },
	"policy/v1/PodDisruptionBudget":                   func() any { return &policyv1.PodDisruptionBudget{} },
	"rbac.authorization.k8s.io/v1/Role":               func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding":        func() any { return &rbacv1.RoleBinding{} },
	"rbac.authorization.k8s.io/v1/ClusterRole":        func() any { return &rbacv1.ClusterRole{} },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
	"keda.sh/v1alpha1/ScaledObject":                   func() any { return &kedav1.ScaledObject{} },
	"keda.sh/v1alpha1/TriggerAuthentication":          func() any { return &kedav1.TriggerAuthentication{} },
	"monitoring.coreos.com/v1/ServiceMonitor":         func() any { return &monv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule":         func() any { return &monv1.PrometheusRule{} },
}

// decodeStrict decodes one object's YAML into its typed struct, rejecting
// fields the struct does not have.
func decodeStrict(y []byte) (any, string, error) {
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		return nil, "", err
	}
	var head struct{ APIVersion, Kind string }
	if err := json.Unmarshal(j, &head); err != nil {
		return nil, "", err
	}
	gvk := head.APIVersion + "/" + head.Kind
	mk, ok := typed[gvk]
	if !ok {
		return nil, gvk, fmt.Errorf("no typed struct for %s: add it to the table", gvk)
	}
	obj := mk()
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return nil, gvk, fmt.Errorf("%s: %w", gvk, err)
	}
	return obj, gvk, nil
}

// render runs kustomize build on dir and decodes every object strictly.
func render(t *testing.T, dir string) []any {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	var objs []any
	for doc := range strings.SplitSeq(string(out), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj, gvk, err := decodeStrict([]byte(doc))
		if err != nil {
			t.Errorf("kustomize build %s: %v", dir, err)
			continue
		}
		_ = gvk
		objs = append(objs, obj)
	}
	return objs
}

func TestManifestsDecodeStrictly(t *testing.T) {
	kinds := map[string]int{}
	for _, dir := range kustomizations {
		for _, o := range render(t, dir) {
			kinds[fmt.Sprintf("%T", o)]++
		}
	}
	for _, want := range []string{"*v1.Deployment", "*v1.Service", "*v1.PodDisruptionBudget", "*v1alpha1.ScaledObject",
		"*v1alpha1.TriggerAuthentication", "*v1.ServiceMonitor", "*v1.PrometheusRule", "*v1.DaemonSet", "*v1.CronJob"} {
		if kinds[want] == 0 {
			t.Errorf("no %s rendered; kinds = %v", want, kinds)
		}
	}
}

// The strict decoder catches a misspelt field (what this test is for).
func TestDecodeStrictRejectsTypos(t *testing.T) {
	for _, y := range []string{
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 2}\n",
		"apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec: {scaleTargetRef: {name: x}, minReplicas: 1}\n",
		"apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec: {endpoints: [{prot: http}]}\n",
	} {
		if _, _, err := decodeStrict([]byte(y)); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("decodeStrict(%q) = %v; want an unknown field error", y, err)
		}
	}
}

// The service's Deployment is locked down, probed, sized, and reads its
// secrets as files where ncclwatch.yaml says; KEDA scales it on lag between
// 1 and the partition count; a PDB keeps all but one up.
func TestNCCLWatchDeployment(t *testing.T) {
	var (
		dep    *appsv1.Deployment
		pdb    *policyv1.PodDisruptionBudget
		so     *kedav1.ScaledObject
		config string
	)
	for _, o := range render(t, "ncclwatch") {
		switch o := o.(type) {
		case *appsv1.Deployment:
			dep = o
		case *policyv1.PodDisruptionBudget:
			pdb = o
		case *kedav1.ScaledObject:
			so = o
		case *corev1.ConfigMap:
			config = o.Data["ncclwatch.yaml"]
		}
	}
	if dep == nil || pdb == nil || so == nil || config == "" {
		t.Fatalf("rendered deployment %v, pdb %v, scaledobject %v, config %d bytes", dep != nil, pdb != nil, so != nil, len(config))
	}
	pod := dep.Spec.Template.Spec
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext = %+v; want runAsNonRoot and a non-zero runAsUser", psc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Privileged == nil || *sc.Privileged ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("container securityContext = %+v; want read-only root, no privilege escalation, not privileged, drop ALL", sc)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" ||
		c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes = readiness %+v, liveness %+v; want /readyz and /healthz", c.ReadinessProbe, c.LivenessProbe)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources = %+v; want cpu and memory requests and a memory limit", c.Resources)
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("env %s comes from a secret; secrets are mounted files", e.Name)
		}
	}
	secretMount := ""
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				secretMount = m.MountPath
				if !m.ReadOnly {
					t.Errorf("secret volume %s is mounted writable", m.Name)
				}
			}
		}
	}
	if secretMount == "" {
		t.Fatal("no secret volume mounted")
	}
	for _, field := range []string{"password_file: ", "ca_file: "} {
		n := 0
		for line := range strings.SplitSeq(config, "\n") {
			if _, v, ok := strings.Cut(line, field); ok {
				n++
				if filepath.Dir(strings.TrimSpace(v)) != secretMount {
					t.Errorf("ncclwatch.yaml %s%s is not in the secret mount %s", field, v, secretMount)
				}
			}
		}
		if n != 2 {
			t.Errorf("ncclwatch.yaml has %d %s lines; want 2 (kafka, clickhouse)", n, field)
		}
	}
	if strings.Contains(config, "password:") {
		t.Error("ncclwatch.yaml holds an inline password")
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 ||
		pdb.Spec.Selector == nil || pdb.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != dep.Spec.Selector.MatchLabels["app.kubernetes.io/name"] {
		t.Errorf("pdb = %+v; want maxUnavailable 1 over the Deployment's pods", pdb.Spec)
	}
	if so.Spec.ScaleTargetRef == nil || so.Spec.ScaleTargetRef.Name != dep.Name ||
		so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount != 1 || so.Spec.MaxReplicaCount == nil {
		t.Fatalf("scaledobject = %+v; want target %s, min 1, a max", so.Spec, dep.Name)
	}
	if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "kafka" {
		t.Fatalf("triggers = %+v; want one kafka trigger", so.Spec.Triggers)
	}
	md := so.Spec.Triggers[0].Metadata
	if md["consumerGroup"] != "ncclwatch" || md["topic"] != "training-logs" || md["lagThreshold"] == "" {
		t.Errorf("kafka trigger = %v; want the group and topic of ncclwatch.yaml and a lag threshold", md)
	}
	// max = partitions: the README's topic has 12.
	if *so.Spec.MaxReplicaCount != 12 {
		t.Errorf("maxReplicaCount = %d; want 12, the topic's partitions", *so.Spec.MaxReplicaCount)
	}
}
