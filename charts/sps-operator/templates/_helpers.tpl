{{/* Chart name, truncated to the DNS label limit. */}}
{{- define "sps-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release name plus chart name, unless the release already contains it. */}}
{{- define "sps-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sps-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sps-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sps-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sps-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sps-operator
{{- end -}}

{{- define "sps-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sps-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image's tag: image.tag, else the chart's appVersion. */}}
{{- define "sps-operator.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag -}}
{{- end -}}

{{/* repository:tag, or repository:tag@digest: the digest decides what runs, the tag stays
for people and `kubectl sps version`. */}}
{{- define "sps-operator.image" -}}
{{- $ref := printf "%s:%s" .Values.image.repository (include "sps-operator.imageTag" .) -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $ref .Values.image.digest -}}
{{- else -}}
{{- $ref -}}
{{- end -}}
{{- end -}}

{{/* Labels of the operator's pods beyond the selector: `kubectl sps version` finds them
(sps_operator.api.labels.OPERATOR_POD_SELECTOR) and reads the version they run. */}}
{{- define "sps-operator.podLabels" -}}
{{ include "sps-operator.selectorLabels" . }}
app.kubernetes.io/part-of: sps-operator
app.kubernetes.io/component: operator
app.kubernetes.io/version: {{ include "sps-operator.imageTag" . | trunc 63 | quote }}
{{- end -}}

{{/* More than one replica: they elect a leader, and get a PDB and a spread. */}}
{{- define "sps-operator.replicated" -}}
{{- if gt (int .Values.replicaCount) 1 }}true{{ end -}}
{{- end -}}

{{/* The namespaces the operator serves in namespaces mode (validated, deduplicated). */}}
{{- define "sps-operator.watchNamespaces" -}}
{{- if eq .Values.watch.mode "namespaces" -}}
{{- if not .Values.watch.namespaces -}}
{{- fail "watch.mode=namespaces needs at least one namespace in watch.namespaces" -}}
{{- end -}}
{{- .Values.watch.namespaces | uniq | join "," -}}
{{- end -}}
{{- end -}}

{{/*
The namespaced rules the operator needs; rendered into the ClusterRole (cluster mode)
or into a Role in each watched namespace (namespaces mode).
*/}}
{{- define "sps-operator.namespacedRules" -}}
- apiGroups: [sps.dev]
  resources: [spsprofiles]
  # patch: kopf's finalizer only; the operator never writes a spec.
  verbs: [get, list, watch, patch]
- apiGroups: [sps.dev]
  # Merge patches only (kopf and the operator): never read on its own, never replaced.
  resources: [spsprofiles/status]
  verbs: [patch]
- apiGroups: [apps]
  # patch = server-side apply under the field manager sps-operator; and BorrowReplica's
  # one write of a borrow record with the replicas it lends or gives back.
  resources: [deployments]
  verbs: [get, list, watch, patch]
- apiGroups: [apps]
  # StatefulSet targets: the same server-side apply of the table into the pod template.
  resources: [statefulsets]
  verbs: [get, list, watch, patch]
- apiGroups: [leaderworkerset.x-k8s.io]
  # LeaderWorkerSet targets (multi-node groups), where the CRD is installed: the table
  # goes into the leader and worker templates. Harmless where it is not.
  resources: [leaderworkersets]
  verbs: [get, list, watch, patch]
- apiGroups: [policy]
  # BorrowReplica never borrows against a PodDisruptionBudget.
  resources: [poddisruptionbudgets]
  verbs: [list, watch]
- apiGroups: [autoscaling]
  # ... nor from a Deployment whose replicas a HorizontalPodAutoscaler manages.
  resources: [horizontalpodautoscalers]
  verbs: [list, watch]
- apiGroups: [""]
  # Pod -> node (GPU product) and why a Job's pod is not scheduled: the cache only.
  resources: [pods]
  verbs: [list, watch]
- apiGroups: [""]
  # Services' selectors: a profiling pod's labels must never make it one a Service sends
  # traffic to; an External server.url must not name an ExternalName Service.
  # A multi-node clone's headless Service (its pods' DNS names): created per run Job,
  # deleted with it.
  resources: [services]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  # Claims' access modes: a clone of a server with a ReadWriteOnce claim must run on the
  # node that holds it; a ReadWriteOncePod claim is refused. The cache only.
  resources: [persistentvolumeclaims]
  verbs: [list, watch]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  # The per-run profiler Role grants get/patch on the result ConfigMap; RBAC lets the
  # operator grant only what it holds itself.
  resources: [configmaps]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  # The profiling Job's service account: one per run, created and deleted by the operator.
  resources: [serviceaccounts]
  verbs: [get, create, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, delete]
- apiGroups: [""]
  # core/v1 Events, created only (kopf's and the operator's own; never patched).
  resources: [events]
  verbs: [create]
- apiGroups: [kueue.x-k8s.io]
  # A profiling Job queued by Kueue: its Workload's conditions (Kueue's own words on why it
  # is not admitted) and whether the LocalQueue it names exists. Read only; harmless where
  # Kueue is not installed.
  resources: [workloads, localqueues]
  verbs: [get, list, watch]
- apiGroups: [visibility.kueue.x-k8s.io]
  # Kueue's visibility API (an aggregated API server in Kueue's manager): the queued Job's
  # position among the LocalQueue's pending workloads.
  resources: [localqueues/pendingworkloads]
  verbs: [get]
{{- end -}}

{{/* The cluster-scoped rules: a ClusterRole in both modes. */}}
{{- define "sps-operator.clusterRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
{{- if .Values.rbac.nodeAccess }}
- apiGroups: [""]
  # GPU product of the nodes the targets run on (the cache only).
  resources: [nodes]
  verbs: [list, watch]
{{- end }}
{{- end -}}

{{/* Arguments of `sps-operator run`, the image's entry point. */}}
{{- define "sps-operator.runArgs" -}}
- run
{{- if eq .Values.watch.mode "cluster" }}
- --all-namespaces
{{- else }}
{{- range splitList "," (include "sps-operator.watchNamespaces" .) }}
- --namespace={{ . }}
{{- end }}
{{- end }}
- --liveness=http://0.0.0.0:{{ .Values.health.port }}{{ .Values.health.path }}
{{- if gt (int .Values.replicaCount) 1 }}
- --leader-election
- --lease-name={{ include "sps-operator.fullname" . }}
{{- end }}
{{- if .Values.metrics.enabled }}
- --metrics-port={{ .Values.metrics.port }}
{{- end }}
{{- if eq .Values.operator.logLevel "debug" }}
- --debug
{{- else if eq .Values.operator.logLevel "verbose" }}
- --verbose
{{- end }}
- --log-format={{ .Values.operator.logFormat }}
{{- with .Values.operator.profilerImage }}
- --profiler-image={{ . }}
{{- else }}
- --profiler-image={{ include "sps-operator.image" $ }}
{{- end }}
{{- with .Values.jobPolicy }}
{{- range .allowedImages }}
- {{ printf "--allow-job-image=%s" . | quote }}
{{- end }}
{{- range .allowedServiceAccounts }}
- {{ printf "--allow-service-account=%s" . | quote }}
{{- end }}
{{- range .allowedQueues }}
- {{ printf "--allow-queue=%s" . | quote }}
{{- end }}
- {{ printf "--allowed-priority-classes=%s" (join "," .priorityClasses.allowed) | quote }}
- {{ printf "--reserved-priority-classes=%s" (join "," .priorityClasses.reserved) | quote }}
- {{ printf "--allowed-label-keys=%s" (join "," .labelKeys.allowed) | quote }}
- {{ printf "--reserved-label-keys=%s" (join "," .labelKeys.reserved) | quote }}
- {{ printf "--allowed-annotation-keys=%s" (join "," .annotationKeys.allowed) | quote }}
- {{ printf "--reserved-annotation-keys=%s" (join "," .annotationKeys.reserved) | quote }}
- {{ printf "--max-active-deadline-seconds=%d" (int .maxActiveDeadlineSeconds) | quote }}
- {{ printf "--max-run-pods=%d" (int .maxRunPods) | quote }}
- {{ printf "--max-gpus-per-pod=%d" (int .maxGpusPerPod) | quote }}
- {{ printf "--allowed-server-hosts=%s" (join "," .allowedServerHosts) | quote }}
{{- end }}
{{- range $key, $value := .Values.jobDefaults.labels }}
- {{ printf "--job-label=%s=%s" $key $value | quote }}
{{- end }}
{{- range $key, $value := .Values.jobDefaults.annotations }}
- {{ printf "--job-annotation=%s=%s" $key $value | quote }}
{{- end }}
{{- with .Values.jobDefaults.priorityClassName }}
- {{ printf "--job-priority-class=%s" . | quote }}
{{- end }}
- --min-refresh-interval-seconds={{ int .Values.refresh.minIntervalSeconds }}
- --max-concurrent-rollouts={{ int .Values.rollout.maxConcurrent }}
- --workload-progress-seconds={{ int .Values.workloadProgressSeconds }}
{{- if not .Values.rollout.confirmServers }}
- --no-confirm-servers
{{- end }}
- --max-lent-seconds={{ int .Values.borrowPolicy.maxLentSeconds }}
- --max-rollout-hold-seconds={{ int .Values.borrowPolicy.maxRolloutHoldSeconds }}
- --max-pool-turn-seconds={{ int .Values.borrowPolicy.maxPoolTurnSeconds }}
{{- with .Values.operator.extraArgs }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Another release of this chart whose operator would act on the profiles this one watches:
its RoleBinding in a namespace this release watches, or its ClusterRoleBinding to a
ClusterRole that reads SpsProfiles everywhere (watch.mode=cluster), bound to another
ServiceAccount. Two operators on one profile elect no common leader (each release's Lease
is in its own namespace) and would both act. Empty when there is none. Read with `lookup`,
so only on a real install or upgrade (`helm template` and Argo CD see nothing).
*/}}
{{- define "sps-operator.overlappingRelease" -}}
{{- $me := printf "%s/%s" .Release.Namespace (include "sps-operator.serviceAccountName" .) -}}
{{- $found := list -}}
{{- $crbs := lookup "rbac.authorization.k8s.io/v1" "ClusterRoleBinding" "" "" -}}
{{- range $b := ($crbs.items | default list) -}}
{{- if eq (get ($b.metadata.labels | default dict) "app.kubernetes.io/part-of") "sps-operator" -}}
{{- $role := lookup "rbac.authorization.k8s.io/v1" "ClusterRole" "" $b.roleRef.name -}}
{{- $everywhere := false -}}
{{- range $r := ($role.rules | default list) -}}
{{- if has "spsprofiles" ($r.resources | default list) -}}{{- $everywhere = true -}}{{- end -}}
{{- end -}}
{{- range $s := ($b.subjects | default list) -}}
{{- $them := printf "%s/%s" ($s.namespace | default "") $s.name -}}
{{- if and $everywhere (eq $s.kind "ServiceAccount") (ne $them $me) -}}
{{- $found = append $found (printf "the operator of ServiceAccount %s watches every namespace (ClusterRoleBinding %s)" $them $b.metadata.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $bindings := list -}}
{{- if eq .Values.watch.mode "cluster" -}}
{{- $bindings = (lookup "rbac.authorization.k8s.io/v1" "RoleBinding" "" "").items | default list -}}
{{- else -}}
{{- range $ns := splitList "," (include "sps-operator.watchNamespaces" .) -}}
{{- $bindings = concat $bindings ((lookup "rbac.authorization.k8s.io/v1" "RoleBinding" $ns "").items | default list) -}}
{{- end -}}
{{- end -}}
{{- range $b := $bindings -}}
{{- $operator := and (eq $b.roleRef.kind "Role") (not (hasSuffix "-borrow" $b.metadata.name)) (not (hasSuffix "-leader" $b.metadata.name)) -}}
{{- if and $operator (eq (get ($b.metadata.labels | default dict) "app.kubernetes.io/part-of") "sps-operator") -}}
{{- range $s := ($b.subjects | default list) -}}
{{- $them := printf "%s/%s" ($s.namespace | default "") $s.name -}}
{{- if and (eq $s.kind "ServiceAccount") (ne $them $me) -}}
{{- $found = append $found (printf "the operator of ServiceAccount %s watches namespace %s (RoleBinding %s)" $them $b.metadata.namespace $b.metadata.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $found | uniq | join "; " -}}
{{- end -}}
