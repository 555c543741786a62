package webhook

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// What the injector looks for and adds in a pod.
const (
	// LabelInject selects the pods that get a sidecar: the value "true".
	LabelInject = "baton.dev/inject"
	// AnnotationLeaseTTL overrides the sidecar's lease TTL, e.g. "30s".
	AnnotationLeaseTTL = "baton.dev/lease-ttl"
	// AnnotationCPURequest, AnnotationCPULimit, AnnotationMemoryRequest and
	// AnnotationMemoryLimit override the sidecar's resources, e.g. "50m" or
	// "64Mi".
	AnnotationCPURequest    = "baton.dev/cpu-request"
	AnnotationCPULimit      = "baton.dev/cpu-limit"
	AnnotationMemoryRequest = "baton.dev/memory-request"
	AnnotationMemoryLimit   = "baton.dev/memory-limit"

	// ContainerName is the sidecar's name among the pod's init containers.
	ContainerName = "baton"
	// VolumeName is the emptyDir that holds the socket.
	VolumeName = "baton-socket"
	// SocketDir is where the socket's volume is mounted in every container.
	SocketDir = "/var/run/baton"
	// SocketPath is the socket, given to the app as $BATON_SOCKET.
	SocketPath = SocketDir + "/baton.sock"
	// EnvSocket is the app's environment variable naming the socket.
	EnvSocket = "BATON_SOCKET"

	tlsVolume = "baton-etcd-tls"
	tlsDir    = "/etc/baton/etcd-tls"
)

// overrides are a pod's annotations, read and checked.
type overrides struct {
	leaseTTL  time.Duration
	resources corev1.ResourceRequirements
	dapr      daprOverrides
	election  electionOverrides
}

// resourceAnnotation says which resource a resource annotation sets, and
// whether as a limit or a request; ok is false for other keys.
func resourceAnnotation(key string) (name corev1.ResourceName, limit, ok bool) {
	switch key {
	case AnnotationCPURequest:
		return corev1.ResourceCPU, false, true
	case AnnotationCPULimit:
		return corev1.ResourceCPU, true, true
	case AnnotationMemoryRequest:
		return corev1.ResourceMemory, false, true
	case AnnotationMemoryLimit:
		return corev1.ResourceMemory, true, true
	}
	return "", false, false
}

// overridesOf reads the baton.dev/ annotations over cfg. An annotation it
// does not know is an error too: a misspelt override would otherwise be
// silently ignored.
func overridesOf(annotations map[string]string, cfg Config) (overrides, error) {
	o := overrides{leaseTTL: cfg.LeaseTTL.Duration, resources: *cfg.Resources.DeepCopy()}
	for key, v := range annotations {
		if !strings.HasPrefix(key, "baton.dev/") {
			continue
		}
		name, limit, isResource := resourceAnnotation(key)
		switch {
		case key == AnnotationDapr || key == AnnotationDaprAppID: // daprOf's
		case key == AnnotationElection || key == AnnotationElectionPort: // electionOf's
		case key == AnnotationLeaderLabel: // the controller's (electionOf checks it)
		case key == AnnotationLeaseTTL:
			d, err := time.ParseDuration(v)
			if err != nil {
				return overrides{}, fmt.Errorf("annotation %s %q: not a duration; write it like 30s or 2m", key, v)
			}
			if err := checkLeaseTTL(d); err != nil {
				return overrides{}, fmt.Errorf("annotation %s: %w", key, err)
			}
			o.leaseTTL = d
		case isResource:
			q, err := resource.ParseQuantity(v)
			if err != nil || q.Sign() <= 0 {
				return overrides{}, fmt.Errorf("annotation %s %q: want a positive quantity such as 50m (CPU) or 64Mi (memory)", key, v)
			}
			list := &o.resources.Requests
			if limit {
				list = &o.resources.Limits
			}
			if *list == nil {
				*list = corev1.ResourceList{}
			}
			(*list)[name] = q
		default:
			return overrides{}, fmt.Errorf("annotation %s: Baton has no such setting; a pod may set %s, %s, %s, %s, %s, %s, %s, %s, %s and %s",
				key, AnnotationLeaseTTL, AnnotationCPURequest, AnnotationCPULimit, AnnotationMemoryRequest, AnnotationMemoryLimit, AnnotationDapr, AnnotationDaprAppID,
				AnnotationElection, AnnotationElectionPort, AnnotationLeaderLabel)
		}
	}
	if err := checkResources(o.resources); err != nil {
		return overrides{}, fmt.Errorf("the baton.dev/ resource annotations with the injector's defaults: %w", err)
	}
	d, err := daprOf(annotations)
	if err != nil {
		return overrides{}, err
	}
	o.dapr = d
	if o.election, err = electionOf(annotations); err != nil {
		return overrides{}, err
	}
	return o, nil
}

// Inject adds the sidecar to pod as cfg and the pod's annotations say: the
// sidecar as the first init container, the socket's emptyDir, and in every
// other container a mount of it and $BATON_SOCKET. It is idempotent: what
// is there already is left alone, so a pod that has the sidecar comes back
// unchanged, and containers added since (by another webhook) get the mount.
// An error leaves pod unchanged and says what in it is wrong: a bad
// annotation, or a name, path or port of the pod's own that the sidecar
// needs.
func Inject(pod *corev1.Pod, cfg Config) error {
	o, err := overridesOf(pod.Annotations, cfg)
	if err != nil {
		return err
	}
	spec := pod.Spec.DeepCopy() // pod is changed only if all goes well
	if err := injectSpec(spec, cfg, o); err != nil {
		return err
	}
	pod.Spec = *spec
	return nil
}

func injectSpec(spec *corev1.PodSpec, cfg Config, o overrides) error {
	hasSidecar := slices.ContainsFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == ContainerName })
	if !hasSidecar {
		if err := checkFree(spec, cfg, o); err != nil {
			return err
		}
	}
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			if list[i].Name == ContainerName {
				continue
			}
			if err := mountSocket(&list[i]); err != nil {
				return err
			}
			if o.dapr.on {
				daprEnv(&list[i])
			}
			if o.election.name != "" {
				electionEnv(&list[i], o.election)
			}
		}
	}
	if hasSidecar {
		return nil
	}
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: VolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	if cfg.EtcdTLSSecret != "" {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: tlsVolume, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: cfg.EtcdTLSSecret},
		}})
	}
	for _, name := range cfg.ImagePullSecrets {
		if !slices.ContainsFunc(spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == name }) {
			spec.ImagePullSecrets = append(spec.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
		}
	}
	spec.InitContainers = append([]corev1.Container{sidecar(cfg, o)}, spec.InitContainers...)
	return nil
}

// checkFree refuses a pod that already uses a name, a path or a port the
// sidecar needs.
func checkFree(spec *corev1.PodSpec, cfg Config, o overrides) error {
	for _, v := range spec.Volumes {
		if v.Name == VolumeName || (v.Name == tlsVolume && cfg.EtcdTLSSecret != "") {
			return fmt.Errorf("the pod has a volume named %s, which the Baton sidecar needs; rename it", v.Name)
		}
	}
	ports := []int32{cfg.HealthPort}
	if cfg.MetricsPort != 0 {
		ports = append(ports, cfg.MetricsPort)
	}
	if o.dapr.on {
		ports = append(ports, DaprHTTPPort, DaprGRPCPort)
	}
	if o.election.name != "" {
		if slices.Contains(ports, o.election.port) {
			return fmt.Errorf("annotation %s %d: a port the sidecar serves already (its healthPort, metricsPort or Dapr's); choose another", AnnotationElectionPort, o.election.port)
		}
		ports = append(ports, o.election.port)
	}
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range list {
			if c.Name == ContainerName {
				return fmt.Errorf("the pod has a container named %s, which the Baton sidecar needs; rename it", ContainerName)
			}
			for _, p := range c.Ports {
				if slices.Contains(ports, p.ContainerPort) {
					return fmt.Errorf("container %s uses port %d, which the Baton sidecar needs (the injector's healthPort and metricsPort, with %s daprd's 3500 and 50001: a pod runs Baton's Dapr API or daprd, not both, and with %s its %s, 4040 by default: a pod runs Baton's candidacy or another election sidecar, not both)",
						c.Name, p.ContainerPort, AnnotationDapr, AnnotationElection, AnnotationElectionPort)
				}
			}
		}
	}
	return nil
}

// mountSocket gives c the socket's volume and $BATON_SOCKET, unless it has
// them; a $BATON_SOCKET of its own is left as it is.
func mountSocket(c *corev1.Container) error {
	mounted := false
	for _, m := range c.VolumeMounts {
		switch {
		case m.Name == VolumeName:
			mounted = true
		case m.MountPath == SocketDir || strings.HasPrefix(SocketDir, strings.TrimSuffix(m.MountPath, "/")+"/"):
			return fmt.Errorf("container %s mounts %s at %s, where the Baton socket goes; mount it elsewhere", c.Name, m.Name, m.MountPath)
		}
	}
	if !mounted {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: VolumeName, MountPath: SocketDir})
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == EnvSocket }) {
		c.Env = append(c.Env, corev1.EnvVar{Name: EnvSocket, Value: SocketPath})
	}
	return nil
}

// sidecar is the Baton container: a native sidecar, started before the
// app's containers (once its startup probe says it can grant) and stopped
// after them.
func sidecar(cfg Config, o overrides) corev1.Container {
	args := []string{
		"serve",
		"--socket=" + SocketPath,
		"--health-addr=:" + strconv.Itoa(int(cfg.HealthPort)),
		"--etcd-endpoints=" + strings.Join(cfg.EtcdEndpoints, ","),
		"--lease-ttl=" + o.leaseTTL.String(),
	}
	if cfg.MetricsPort != 0 {
		args = append(args, "--metrics-addr=:"+strconv.Itoa(int(cfg.MetricsPort)))
	}
	mounts := []corev1.VolumeMount{{Name: VolumeName, MountPath: SocketDir}}
	if cfg.EtcdTLSSecret != "" {
		args = append(args, "--etcd-cacert="+tlsDir+"/ca.crt")
		if cfg.EtcdClientCert {
			args = append(args, "--etcd-cert="+tlsDir+"/tls.crt", "--etcd-key="+tlsDir+"/tls.key")
		}
		mounts = append(mounts, corev1.VolumeMount{Name: tlsVolume, MountPath: tlsDir, ReadOnly: true})
	}
	if cfg.ClusterName != "" {
		args = append(args, "--cluster-name="+cfg.ClusterName)
	}
	args = append(args, daprArgs(cfg, o.dapr)...)
	args = append(args, electionArgs(o.election)...)
	args = append(args, cfg.Args...)
	env := []corev1.EnvVar{
		fieldEnv("POD_NAME", "metadata.name"),
		fieldEnv("POD_NAMESPACE", "metadata.namespace"),
		fieldEnv("NODE_NAME", "spec.nodeName"),
		// The identity lock policies name (--service-account).
		fieldEnv("BATON_SERVICE_ACCOUNT", "spec.serviceAccountName"),
	}
	if cfg.EtcdAuthSecret != "" {
		env = append(env, secretEnv("BATON_ETCD_USERNAME", cfg.EtcdAuthSecret, "username"), secretEnv("BATON_ETCD_PASSWORD", cfg.EtcdAuthSecret, "password"))
	}
	ports := []corev1.ContainerPort{{Name: "baton-health", ContainerPort: cfg.HealthPort, Protocol: corev1.ProtocolTCP}}
	if cfg.MetricsPort != 0 {
		ports = append(ports, corev1.ContainerPort{Name: "baton-metrics", ContainerPort: cfg.MetricsPort, Protocol: corev1.ProtocolTCP})
	}
	probe := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: path, Port: intstr.FromString("baton-health"), Scheme: corev1.URISchemeHTTP,
			}},
			TimeoutSeconds:   1,
			PeriodSeconds:    period,
			SuccessThreshold: 1,
			FailureThreshold: failures,
		}
	}
	return corev1.Container{
		Name:            ContainerName,
		Image:           cfg.Image,
		ImagePullPolicy: cfg.ImagePullPolicy,
		Command:         daprCommand(o.dapr),
		Args:            args,
		Env:             env,
		Ports:           ports,
		Resources:       o.resources,
		VolumeMounts:    mounts,
		RestartPolicy:   new(corev1.ContainerRestartPolicyAlways),
		// The app starts once the sidecar can grant: up to 2 minutes for
		// etcd to answer.
		StartupProbe:             probe("/readyz", 1, 120),
		ReadinessProbe:           probe("/readyz", 5, 2),
		LivenessProbe:            probe("/healthz", 10, 3),
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: new(false),
			ReadOnlyRootFilesystem:   new(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
}

func secretEnv(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key,
	}}}
}
