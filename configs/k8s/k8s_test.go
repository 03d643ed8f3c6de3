// Package k8s checks the Kubernetes manifests of this directory (it has
// only tests, so that k8s.io/api and sigs.k8s.io/lws stay out of the
// npuserve binary):
//
//   - every document decodes strictly (unknown or duplicate fields fail)
//     into the upstream API type of its kind;
//   - each container runs what the per-node launch script runs on that
//     node: the pod's environment is built as the kubelet builds it (LWS's
//     variables first, then the container's env with $(VAR) expansion,
//     the downward API's values), the container's arguments are expanded
//     with it and compared with the arguments configs/ascend/*.sh pass to
//     npuserve, and the variables the scripts export with the pod's;
//   - the wiring: ports, probes on /health, Services' selectors, the
//     Ascend resources against TP size and ASCEND_RT_VISIBLE_DEVICES,
//     volumes, start-up and restart policies;
//   - kubectl apply --dry-run=client accepts the files, where kubectl is
//     installed (against a stand-in API server's discovery answers: no
//     cluster is needed or touched).
package k8s

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	lws "sigs.k8s.io/lws/api/leaderworkerset/v1"
	"sigs.k8s.io/yaml"
)

// repo is the repository root; the image has it at /opt/npuserve.
const (
	repo     = "../.."
	imageDir = "/opt/npuserve"
	// npuResource is the Ascend device plugin's resource for 910-series
	// NPUs (the A2's 910B, the A3's chips).
	npuResource corev1.ResourceName = "huawei.com/Ascend910"
)

// objects decodes every document of a manifest file strictly into the API
// type of its apiVersion and kind.
func objects(t *testing.T, file string) []any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []any
	for i := 0; ; i++ {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", file, i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s: document %d: %v", file, i, err)
		}
		var obj any
		var want string
		switch tm.Kind {
		case "Service":
			obj, want = &corev1.Service{}, corev1.SchemeGroupVersion.String()
		case "StatefulSet":
			obj, want = &appsv1.StatefulSet{}, appsv1.SchemeGroupVersion.String()
		case "LeaderWorkerSet":
			obj, want = &lws.LeaderWorkerSet{}, lws.GroupVersion.String()
		default:
			t.Fatalf("%s: document %d: kind %q is not one this test knows", file, i, tm.Kind)
		}
		if tm.APIVersion != want {
			t.Fatalf("%s: %s has apiVersion %q, want %q", file, tm.Kind, tm.APIVersion, want)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("%s: %s (document %d): %v", file, tm.Kind, i, err)
		}
		out = append(out, obj)
	}
	return out
}

func one[T any](t *testing.T, objs []any, name string) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	for _, v := range found {
		if any(v).(metav1.Object).GetName() == name {
			return v
		}
	}
	t.Fatalf("no %T named %q", *new(T), name)
	panic("unreachable")
}

// expand is Kubernetes' $(VAR) expansion of command, args and env values:
// $(NAME) of a defined variable becomes its value, $$ a $, anything else
// stays as written. It also returns the references to undefined names
// (which Kubernetes would pass on literally: a bug in a manifest).
func expand(s string, env map[string]string) (string, []string) {
	var b strings.Builder
	var undefined []string
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String(), undefined
			}
			name := s[i+2 : i+2+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
				undefined = append(undefined, name)
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String(), undefined
}

// pod is what one container of one pod sees: its environment and its
// command line, after the kubelet's expansion.
type pod struct {
	env  map[string]string
	own  []string // the names the container's env sets (not injected)
	args []string // command + args, expanded
}

// instantiate builds a container's environment as the kubelet does: the
// injected variables (LWS puts its own first), then the container's env
// in order, each value expanded with what precedes it; fields are the
// downward API's values by field path.
func instantiate(t *testing.T, c corev1.Container, injected [][2]string, fields map[string]string) pod {
	t.Helper()
	p := pod{env: map[string]string{}}
	for _, kv := range injected {
		p.env[kv[0]] = kv[1]
	}
	for _, e := range c.Env {
		var v string
		switch {
		case e.ValueFrom == nil:
			var undef []string
			if v, undef = expand(e.Value, p.env); len(undef) > 0 {
				t.Errorf("container %s: env %s refers to $(%s), not defined before it", c.Name, e.Name, strings.Join(undef, "), $("))
			}
		case e.ValueFrom.FieldRef != nil:
			var ok bool
			if v, ok = fields[e.ValueFrom.FieldRef.FieldPath]; !ok {
				t.Fatalf("container %s: env %s: field %s is not simulated here", c.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		default:
			t.Fatalf("container %s: env %s: only values and fieldRefs are simulated", c.Name, e.Name)
		}
		if slices.Contains(p.own, e.Name) {
			t.Errorf("container %s: env %s set twice", c.Name, e.Name)
		}
		p.own = append(p.own, e.Name)
		p.env[e.Name] = v
	}
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		x, undef := expand(a, p.env)
		if len(undef) > 0 {
			t.Errorf("container %s: argument %q refers to undefined $(%s)", c.Name, a, strings.Join(undef, "), $("))
		}
		p.args = append(p.args, x)
	}
	return p
}

// stub is a stand-in npuserve that prints its arguments, a separator and
// its environment, NUL-separated.
func stub(t *testing.T) string {
	t.Helper()
	s := filepath.Join(t.TempDir(), "npuserve")
	if err := os.WriteFile(s, []byte("#!/bin/sh\nprintf '%s\\0' \"$@\"\nprintf -- '--env--\\0'\nenv -0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return s
}

// launched is what a stand-in npuserve was started with.
type launched struct {
	args []string          // after "serve"
	env  map[string]string // its whole environment
	// exported are the variables set or changed relative to the
	// environment the command was given.
	exported map[string]string
}

// launch runs argv with env only (plus PATH and NPUSERVE=stub) and
// returns what the stand-in npuserve got.
func launch(t *testing.T, argv []string, env map[string]string) launched {
	t.Helper()
	given := map[string]string{"PATH": os.Getenv("PATH"), "NPUSERVE": stub(t)}
	for k, v := range env {
		given[k] = v
	}
	var list []string
	for k, v := range given {
		list = append(list, k+"="+v)
	}
	c := exec.Command(argv[0], argv[1:]...)
	c.Env = list
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("%q: %v: %s", argv, err, stderr.Bytes())
	}
	parts := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	sep := slices.Index(parts, "--env--")
	if sep < 1 || parts[0] != "serve" {
		t.Fatalf("%q runs npuserve %q, want npuserve serve", argv, parts)
	}
	l := launched{args: parts[1:sep], env: map[string]string{}, exported: map[string]string{}}
	for _, kv := range parts[sep+1:] {
		k, v, _ := strings.Cut(kv, "=")
		l.env[k] = v
		if old, ok := given[k]; (!ok || old != v) && !slices.Contains([]string{"PWD", "OLDPWD", "SHLVL", "_"}, k) {
			l.exported[k] = v
		}
	}
	return l
}

// script runs a launch script of configs/ as a node would, given the
// per-node inputs.
func script(t *testing.T, name string, inputs map[string]string) launched {
	t.Helper()
	return launch(t, []string{filepath.Join(repo, "configs", name)}, inputs)
}

// flag is the value after --name in args ("" when absent).
func flag(args []string, name string) string {
	if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

// inputs are the per-node variables the Ascend scripts read.
var inputs = []string{"LOCAL_IP", "NODE0_IP", "NIC_NAME", "MODEL"}

// checkEnv: every variable the script exports is in the container's
// environment with the same value; the container sets nothing else but
// the scripts' inputs and the variables allowed (each with its reason in
// the manifest).
func checkEnv(t *testing.T, what string, p pod, s launched, allowed ...string) {
	t.Helper()
	for k, v := range s.exported {
		if k == "NPUSERVE" {
			continue
		}
		if got, ok := p.env[k]; !ok || got != v {
			t.Errorf("%s: the script exports %s=%q, the pod has %q (set: %v)", what, k, v, got, ok)
		}
	}
	for _, k := range p.own {
		if _, ok := s.exported[k]; !ok && !slices.Contains(inputs, k) && !slices.Contains(allowed, k) {
			t.Errorf("%s: the pod sets %s, which the script does not export", what, k)
		}
	}
}

// checkResources: requests equal limits for the NPUs, which equal the
// node's device ranks (TP size × local DP size) and ASCEND_RT_VISIBLE_DEVICES.
func checkResources(t *testing.T, what string, c corev1.Container, p pod, args []string) {
	t.Helper()
	tp, _ := strconv.Atoi(flag(args, "--tensor-parallel-size"))
	local, _ := strconv.Atoi(flag(args, "--data-parallel-size-local"))
	if local == 0 {
		local = 1
	}
	want := resource.MustParse(strconv.Itoa(tp * local))
	lim, req := c.Resources.Limits[npuResource], c.Resources.Requests[npuResource]
	if lim.Cmp(want) != 0 || req.Cmp(want) != 0 {
		t.Errorf("%s: %s requests %s limits %s, want %s (TP %d × %d local DP ranks)", what, npuResource, req.String(), lim.String(), want.String(), tp, local)
	}
	if n := len(strings.Split(p.env["ASCEND_RT_VISIBLE_DEVICES"], ",")); n != tp*local {
		t.Errorf("%s: ASCEND_RT_VISIBLE_DEVICES lists %d devices, the node runs %d ranks", what, n, tp*local)
	}
}

// checkVolumes: every mount has its volume, the model is under a mount,
// /dev/shm is memory.
func checkVolumes(t *testing.T, what string, spec corev1.PodSpec, c corev1.Container, model string) {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	var modelMounted, shm bool
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			t.Errorf("%s: mount %s has no volume", what, m.Name)
			continue
		}
		if strings.HasPrefix(model, strings.TrimSuffix(m.MountPath, "/")+"/") {
			modelMounted = true
		}
		if m.MountPath == "/dev/shm" && v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory {
			shm = true
		}
	}
	if !modelMounted {
		t.Errorf("%s: the model %s is under no volume mount", what, model)
	}
	if !shm {
		t.Errorf("%s: no memory-backed /dev/shm", what)
	}
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("%s: hostNetwork %v dnsPolicy %q, want host networking with ClusterFirstWithHostNet", what, spec.HostNetwork, spec.DNSPolicy)
	}
}

// port is the container port named name (0 if none).
func port(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// checkHTTPProbes: startup, readiness and liveness GET /health on the
// API port; the startup window outlasts the head's own start timeout.
func checkHTTPProbes(t *testing.T, what string, c corev1.Container, p pod, apiPort int32) {
	t.Helper()
	for name, pr := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if pr == nil || pr.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", what, name)
			continue
		}
		pp := pr.HTTPGet.Port
		if pp.Type == intstr.String {
			pp = intstr.FromInt32(port(c, pp.StrVal))
		}
		if pr.HTTPGet.Path != "/health" || pp.IntVal != apiPort {
			t.Errorf("%s: %s probe GET %s on port %v, want /health on %d", what, name, pr.HTTPGet.Path, pr.HTTPGet.Port.String(), apiPort)
		}
	}
	checkStartupWindow(t, what, c.StartupProbe, p)
}

func checkStartupWindow(t *testing.T, what string, pr *corev1.Probe, p pod) {
	t.Helper()
	if pr == nil {
		return
	}
	ready, _ := strconv.Atoi(p.env["VLLM_ENGINE_READY_TIMEOUT_S"])
	if ready == 0 {
		ready = 600 // npuserve's default
	}
	if window := int(pr.PeriodSeconds) * int(pr.FailureThreshold); window <= ready {
		t.Errorf("%s: the startup probe gives up after %d s, before the head's start timeout (%d s)", what, window, ready)
	}
}

// selects reports whether selector matches labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

func TestLeaderWorkerSet(t *testing.T) {
	objs := objects(t, "lws.yaml")
	set := one[*lws.LeaderWorkerSet](t, objs, "npuserve")
	svc := one[*corev1.Service](t, objs, "npuserve")
	tmpl := set.Spec.LeaderWorkerTemplate
	if tmpl.Size == nil || *tmpl.Size != 2 {
		t.Fatalf("group size %v, want 2 (the scripts' DP size, one DP rank per node)", ptrString(tmpl.Size))
	}
	if tmpl.RestartPolicy != lws.RecreateGroupOnPodRestart {
		t.Errorf("restartPolicy %q: a lost node fails the group, which must restart whole (RecreateGroupOnPodRestart)", tmpl.RestartPolicy)
	}
	if set.Spec.StartupPolicy == lws.LeaderReadyStartupPolicy {
		t.Error("startupPolicy LeaderReady: the head is ready only after the workers join (deadlock)")
	}
	if tmpl.LeaderTemplate == nil || len(tmpl.LeaderTemplate.Spec.Containers) != 1 || len(tmpl.WorkerTemplate.Spec.Containers) != 1 {
		t.Fatal("want a leader template and a worker template of one container each")
	}
	size := strconv.Itoa(int(*tmpl.Size))
	// What the LWS controller injects (pod_utils.AddLWSVariables): the
	// leader's address in the group's headless Service, the group size,
	// the pod's index in the group.
	leaderAddress := fmt.Sprintf("%s-0.%s.default", set.Name, set.Name)
	lwsEnv := func(index int) [][2]string {
		return [][2]string{{lws.LwsLeaderAddress, leaderAddress}, {lws.LwsGroupSize, size}, {lws.LwsWorkerIndex, strconv.Itoa(index)}}
	}

	// The leader: configs/ascend/a2-node0.sh on node 10.0.0.1.
	lc := tmpl.LeaderTemplate.Spec.Containers[0]
	leader := instantiate(t, lc, lwsEnv(0), map[string]string{"status.podIP": "10.0.0.1"})
	head := script(t, "ascend/a2-node0.sh", map[string]string{"LOCAL_IP": "10.0.0.1", "NIC_NAME": leader.env["NIC_NAME"], "MODEL": leader.env["MODEL"]})
	if len(leader.args) == 0 || leader.args[0] != "serve" || !slices.Equal(leader.args[1:], head.args) {
		t.Errorf("leader runs npuserve\n  %q\nconfigs/ascend/a2-node0.sh runs npuserve serve\n  %q", leader.args, head.args)
	}
	checkEnv(t, "leader", leader, head, "DP_RPC_PORT")
	apiPort, _ := strconv.Atoi(flag(head.args, "--port"))
	rpcPort, _ := strconv.Atoi(flag(head.args, "--data-parallel-rpc-port"))
	if port(lc, "http") != int32(apiPort) || port(lc, "dp-rpc") != int32(rpcPort) {
		t.Errorf("leader ports %+v, want http %d and dp-rpc %d", lc.Ports, apiPort, rpcPort)
	}
	checkHTTPProbes(t, "leader", lc, leader, int32(apiPort))
	checkResources(t, "leader", lc, leader, head.args)
	checkVolumes(t, "leader", tmpl.LeaderTemplate.Spec, lc, leader.env["MODEL"])

	// The worker: configs/ascend/a2-node1.sh on node 10.0.0.2, whose
	// NODE0_IP is the leader's address.
	wc := tmpl.WorkerTemplate.Spec.Containers[0]
	worker := instantiate(t, wc, lwsEnv(1), map[string]string{"status.podIP": "10.0.0.2"})
	node := script(t, "ascend/a2-node1.sh", map[string]string{"LOCAL_IP": "10.0.0.2", "NODE0_IP": leaderAddress,
		"NIC_NAME": worker.env["NIC_NAME"], "MODEL": worker.env["MODEL"]})
	if len(worker.args) == 0 || worker.args[0] != "serve" || !slices.Equal(worker.args[1:], node.args) {
		t.Errorf("worker runs npuserve\n  %q\nconfigs/ascend/a2-node1.sh runs npuserve serve\n  %q", worker.args, node.args)
	}
	checkEnv(t, "worker", worker, node, "DP_RPC_PORT", "NPUSERVE_DP_CONNECT_TIMEOUT")
	if !slices.Contains(worker.args, "--headless") || flag(worker.args, "--data-parallel-address") != leaderAddress {
		t.Errorf("worker %q: want --headless and --data-parallel-address $(LWS_LEADER_ADDRESS)", worker.args)
	}
	if wc.LivenessProbe != nil || wc.ReadinessProbe != nil || wc.StartupProbe != nil {
		t.Error("the worker has probes: a headless node serves no HTTP (it exits when it loses the head)")
	}
	checkResources(t, "worker", wc, worker, node.args)
	checkVolumes(t, "worker", tmpl.WorkerTemplate.Spec, wc, worker.env["MODEL"])
	if lc.Image != wc.Image {
		t.Errorf("leader image %q, worker image %q", lc.Image, wc.Image)
	}

	// The Service reaches the leaders' API port and never a worker.
	podLabels := func(m map[string]string) map[string]string {
		l := map[string]string{lws.SetNameLabelKey: set.Name}
		for k, v := range m {
			l[k] = v
		}
		return l
	}
	if !selects(svc.Spec.Selector, podLabels(tmpl.LeaderTemplate.Labels)) || selects(svc.Spec.Selector, podLabels(tmpl.WorkerTemplate.Labels)) {
		t.Errorf("Service selector %v: want the leader pods %v only (workers %v)", svc.Spec.Selector, tmpl.LeaderTemplate.Labels, tmpl.WorkerTemplate.Labels)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "http" || svc.Spec.Ports[0].Port != int32(apiPort) {
		t.Errorf("Service ports %+v, want %d to the leader's http port", svc.Spec.Ports, apiPort)
	}
}

// sourceDir maps the image's /opt/npuserve onto the repository in a
// container command, so that it runs here.
func sourceDir(t *testing.T, argv []string) []string {
	t.Helper()
	abs, err := filepath.Abs(repo)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, imageDir+"/", abs+"/")
	}
	return out
}

func TestStatefulSet(t *testing.T) {
	objs := objects(t, "statefulset.yaml")
	sts := one[*appsv1.StatefulSet](t, objs, "npuserve-sts")
	nodes := one[*corev1.Service](t, objs, sts.Spec.ServiceName)
	api := one[*corev1.Service](t, objs, "npuserve-sts")
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 2 {
		t.Fatalf("replicas %v, want 2 (the scripts' DP size)", ptrString(sts.Spec.Replicas))
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q: pod 0 is ready only after pod 1 joins it (want Parallel)", sts.Spec.PodManagementPolicy)
	}
	if sts.Spec.Selector == nil || !selects(sts.Spec.Selector.MatchLabels, sts.Spec.Template.Labels) {
		t.Errorf("selector %v does not select the template's labels %v", sts.Spec.Selector, sts.Spec.Template.Labels)
	}
	if nodes.Spec.ClusterIP != corev1.ClusterIPNone || !nodes.Spec.PublishNotReadyAddresses || !selects(nodes.Spec.Selector, sts.Spec.Template.Labels) {
		t.Errorf("Service %s: want headless, publishing not-ready pods, selecting the pods", nodes.Name)
	}
	spec := sts.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatal("want one container")
	}
	c := spec.Containers[0]
	for ord := 0; ord < 3; ord++ {
		name := fmt.Sprintf("%s-%d", sts.Name, ord)
		ip := fmt.Sprintf("10.0.0.%d", ord+1)
		p := instantiate(t, c, nil, map[string]string{"metadata.name": name, "status.podIP": ip})
		if ord == 2 {
			// A third replica has no script: it must fail, saying so.
			cmd := exec.Command(sourceDir(t, p.args)[0], sourceDir(t, p.args)[1:]...)
			cmd.Env = []string{"POD_NAME=" + name, "PATH=" + os.Getenv("PATH")}
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "no launch script") {
				t.Errorf("pod %s: %v %s, want a failure naming the missing script", name, err, out)
			}
			continue
		}
		got := launch(t, sourceDir(t, p.args), p.env)
		in := map[string]string{"LOCAL_IP": ip, "NIC_NAME": p.env["NIC_NAME"], "MODEL": p.env["MODEL"]}
		if ord > 0 {
			in["NODE0_IP"] = fmt.Sprintf("%s-0.%s", sts.Name, sts.Spec.ServiceName)
		}
		want := script(t, fmt.Sprintf("ascend/a2-node%d.sh", ord), in)
		if !slices.Equal(got.args, want.args) {
			t.Errorf("pod %s runs npuserve serve\n  %q\nconfigs/ascend/a2-node%d.sh runs\n  %q", name, got.args, ord, want.args)
		}
		for k, v := range want.exported {
			if k != "NPUSERVE" && got.env[k] != v {
				t.Errorf("pod %s: %s=%q, the script alone exports %q", name, k, got.env[k], v)
			}
		}
		if ord == 0 {
			apiPort, _ := strconv.Atoi(flag(want.args, "--port"))
			rpcPort, _ := strconv.Atoi(flag(want.args, "--data-parallel-rpc-port"))
			if port(c, "http") != int32(apiPort) || port(c, "dp-rpc") != int32(rpcPort) {
				t.Errorf("ports %+v, want http %d and dp-rpc %d", c.Ports, apiPort, rpcPort)
			}
			if len(nodes.Spec.Ports) != 1 || nodes.Spec.Ports[0].Port != int32(rpcPort) {
				t.Errorf("Service %s ports %+v, want the RPC port %d", nodes.Name, nodes.Spec.Ports, rpcPort)
			}
			if len(api.Spec.Ports) != 1 || api.Spec.Ports[0].TargetPort.String() != "http" || api.Spec.Ports[0].Port != int32(apiPort) {
				t.Errorf("Service %s ports %+v, want %d to the http port", api.Name, api.Spec.Ports, apiPort)
			}
			checkResources(t, "pod 0", c, pod{env: got.env}, want.args)
			checkVolumes(t, "pod 0", spec, c, p.env["MODEL"])
			checkProbes(t, c, apiPort, pod{env: got.env})
		}
	}
	pod0 := map[string]string{appsv1.StatefulSetPodNameLabel: sts.Name + "-0"}
	pod1 := map[string]string{appsv1.StatefulSetPodNameLabel: sts.Name + "-1"}
	for k, v := range sts.Spec.Template.Labels {
		pod0[k], pod1[k] = v, v
	}
	if !selects(api.Spec.Selector, pod0) || selects(api.Spec.Selector, pod1) {
		t.Errorf("Service %s selector %v: want pod 0 only", api.Name, api.Spec.Selector)
	}
}

// checkProbes runs the StatefulSet's exec probes with bash: on pod 0 they
// pass when GET /health on the API port answers 200 and fail on 503 or
// no answer; on pod 1 (headless) they pass.
func checkProbes(t *testing.T, c corev1.Container, apiPort int, p pod) {
	t.Helper()
	status := 200
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	_, testPort, _ := net.SplitHostPort(srv.Listener.Addr().String())
	closed := httptest.NewServer(http.NotFoundHandler())
	closedPort := closed.Listener.Addr().(*net.TCPAddr).Port
	closed.Close()
	target := fmt.Sprintf("/dev/tcp/127.0.0.1/%d", apiPort)
	for name, pr := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if pr == nil || pr.Exec == nil || len(pr.Exec.Command) == 0 {
			t.Errorf("no %s exec probe", name)
			continue
		}
		cmd := strings.Join(pr.Exec.Command, "\x00")
		if !strings.Contains(cmd, target) {
			t.Errorf("%s probe does not connect to the API port (%s): %q", name, target, pr.Exec.Command)
			continue
		}
		probe := func(podName, port string, code int) error {
			status = code
			argv := strings.Split(strings.ReplaceAll(cmd, target, "/dev/tcp/127.0.0.1/"+port), "\x00")
			e := exec.Command(argv[0], argv[1:]...)
			e.Env = []string{"POD_NAME=" + podName, "PATH=" + os.Getenv("PATH")}
			out, err := e.CombinedOutput()
			if err != nil && len(out) > 0 {
				return fmt.Errorf("%v: %s", err, out)
			}
			return err
		}
		if err := probe("npuserve-sts-0", testPort, 200); err != nil {
			t.Errorf("%s probe on pod 0 with /health 200: %v", name, err)
		}
		if probe("npuserve-sts-0", testPort, 503) == nil {
			t.Errorf("%s probe on pod 0 passes with /health 503", name)
		}
		if probe("npuserve-sts-0", strconv.Itoa(closedPort), 200) == nil {
			t.Errorf("%s probe on pod 0 passes with nothing listening", name)
		}
		if err := probe("npuserve-sts-1", strconv.Itoa(closedPort), 200); err != nil {
			t.Errorf("%s probe on the headless pod 1: %v", name, err)
		}
	}
	checkStartupWindow(t, "pod 0", c.StartupProbe, p)
}

// TestKubectlDryRun: kubectl apply --dry-run=client accepts the files. A
// stand-in API server answers kubectl's discovery (the kinds' resources)
// and says no object exists yet, so no cluster is needed; kubectl's
// schema validation needs a real API server's OpenAPI documents, so it is
// off (--validate=false): the strict decoding above is that check.
func TestKubectlDryRun(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed")
	}
	resources := map[string][]metav1.APIResource{
		"v1":                      {{Name: "services", SingularName: "service", Namespaced: true, Kind: "Service", Verbs: []string{"get", "create", "patch"}}},
		"apps/v1":                 {{Name: "statefulsets", SingularName: "statefulset", Namespaced: true, Kind: "StatefulSet", Verbs: []string{"get", "create", "patch"}}},
		lws.GroupVersion.String(): {{Name: "leaderworkersets", SingularName: "leaderworkerset", Namespaced: true, Kind: "LeaderWorkerSet", Verbs: []string{"get", "create", "patch"}}},
	}
	var mu sync.Mutex
	var requests []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		write := func(v any) { json.NewEncoder(w).Encode(v) }
		switch p := r.URL.Path; {
		case r.Method != http.MethodGet:
			w.WriteHeader(http.StatusMethodNotAllowed)
		case p == "/api":
			write(metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}})
		case p == "/apis":
			l := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
			for _, gv := range []string{"apps/v1", lws.GroupVersion.String()} {
				g, v, _ := strings.Cut(gv, "/")
				ver := metav1.GroupVersionForDiscovery{GroupVersion: gv, Version: v}
				l.Groups = append(l.Groups, metav1.APIGroup{Name: g, Versions: []metav1.GroupVersionForDiscovery{ver}, PreferredVersion: ver})
			}
			write(l)
		case p == "/api/v1" || strings.HasPrefix(p, "/apis/") && strings.Count(p, "/") == 3:
			gv := strings.TrimPrefix(strings.TrimPrefix(p, "/api/"), "/apis/")
			if rs, ok := resources[gv]; ok {
				write(metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv, APIResources: rs})
				return
			}
			w.WriteHeader(http.StatusNotFound)
		default:
			w.WriteHeader(http.StatusNotFound)
			write(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: 404})
		}
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kubeconfig, nil, 0o600)
	for file, want := range map[string][]string{
		"lws.yaml":         {"leaderworkerset.leaderworkerset.x-k8s.io/npuserve created (dry run)", "service/npuserve created (dry run)"},
		"statefulset.yaml": {"service/npuserve-sts-nodes created (dry run)", "service/npuserve-sts created (dry run)", "statefulset.apps/npuserve-sts created (dry run)"},
	} {
		cmd := exec.Command(kubectl, "apply", "--dry-run=client", "--validate=false", "--server", srv.URL, "--namespace", "default",
			"--request-timeout", "20s", "-f", file)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("kubectl apply --dry-run=client -f %s: %v\n%s", file, err, out)
			continue
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				t.Errorf("kubectl apply --dry-run=client -f %s: no %q in\n%s", file, w, out)
			}
		}
		t.Logf("kubectl apply --dry-run=client -f %s:\n%s", file, bytes.TrimSpace(out))
	}
	if len(requests) == 0 {
		t.Error("kubectl sent the stand-in API server nothing")
	}
}

// TestExpand pins the $(VAR) semantics the comparisons rely on.
func TestExpand(t *testing.T) {
	env := map[string]string{"A": "x", "B": "$(A)"}
	for _, tc := range []struct{ in, want, undef string }{
		{"$(A)", "x", ""},
		{"a$(A)b$(A)", "axbx", ""},
		{"$$(A)", "$(A)", ""},
		{"$(B)", "$(A)", ""}, // values are not expanded twice
		{"$(C)", "$(C)", "C"},
		{"${A} $A $", "${A} $A $", ""},
		{"$(A", "$(A", ""},
	} {
		got, undef := expand(tc.in, env)
		if got != tc.want || strings.Join(undef, ",") != tc.undef {
			t.Errorf("expand(%q) = %q %v, want %q %q", tc.in, got, undef, tc.want, tc.undef)
		}
	}
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}
