{{/* Names and labels shared by the templates. */}}
{{- define "streambatch.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "streambatch.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "streambatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "streambatch.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "streambatch.selectorLabels" -}}
app.kubernetes.io/name: streambatch-controller
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "streambatch.labels" -}}
{{ include "streambatch.selectorLabels" . }}
app.kubernetes.io/part-of: streambatch
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "streambatch.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "streambatch.workerImage" -}}
{{- printf "%s:%s" .Values.workerImage.repository (default .Chart.AppVersion .Values.workerImage.tag) -}}
{{- end -}}

{{- define "streambatch.workerGpuImage" -}}
{{- printf "%s:%s" .Values.workerGpuImage.repository (default .Chart.AppVersion .Values.workerGpuImage.tag) -}}
{{- end -}}

{{/* The rules on Pipelines, worker pods and Events, used cluster-wide or per namespace: exactly
the requests the controller makes (controller/operator/*.c):
- pipelines: list/watch (informer), get (re-read on a 409 status conflict), patch (its
  finalizer), delete (ttlSecondsAfterFinished); status: update (PUT); finalizers: update, which
  the OwnerReferencesPermissionEnforcement admission plugin requires for worker pods whose
  ownerReference to the Pipeline sets blockOwnerDeletion.
- pods: list/watch (informer and adoption), create, delete. events (core/v1): create.
- secrets: create only (each Pipeline's credentials Secret, controller/operator/kube.h); never
  get, list or watch.
- networkpolicies (with networkPolicy.perPipeline): create (one per Pipeline), get and delete
  (one left by an earlier Pipeline of the same name is replaced; controller/operator/netpol.h). */}}
{{- define "streambatch.workloadRules" -}}
- apiGroups: [streambatch.dev]
  resources: [pipelines]
  verbs: [get, list, watch, patch, delete]
- apiGroups: [streambatch.dev]
  resources: [pipelines/status]
  verbs: [update, patch]
- apiGroups: [streambatch.dev]
  resources: [pipelines/finalizers]
  verbs: [update]
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, create, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
- apiGroups: [""]
  resources: [services]
  verbs: [create, get, delete]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [create, get, delete]
{{- if and .Values.networkPolicy.enabled .Values.networkPolicy.perPipeline }}
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [create, get, delete]
{{- end }}
{{- end -}}
