//! deploy/ under `podman kube play` (Debian's podman 4.3): `kubectl kustomize` of an overlay
//! renders it, [`Manifests::from_rendered`] turns what kube play cannot run into what it can
//! (each change says which controller or kubelet duty it stands for), and [`KubePlay`] runs
//! the pods on a network of their own, acting as the scheduler and the Service controller.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Mutex,
};

use base64::Engine;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{prereq::run_to_end, wait::WAIT};

/// Kinds of deploy/ that nothing in podman runs or enforces; any other unknown kind fails the
/// test, so a manifest added to deploy/ cannot be skipped unseen.
const NOT_RUN: [(&str, &str); 3] = [
    (
        "Ingress",
        "no ingress controller: the test runs nginx with deploy/nginx's files",
    ),
    ("NetworkPolicy", "podman's network enforces none"),
    (
        "PodDisruptionBudget",
        "no evictions here: the test's roll takes one replica",
    ),
];

/// A workload (Deployment, StatefulSet) as the pods its controller would make.
pub struct Workload {
    pub kind: String,
    pub name: String,
    pub replicas: u64,
    template: Value,
    /// A StatefulSet's volumeClaimTemplates.
    claim_templates: Vec<Value>,
}

/// The rendered manifests, sorted by what the test does with each.
pub struct Manifests {
    config_maps: Vec<Value>,
    /// Secret name → key → value.
    pub secrets: BTreeMap<String, BTreeMap<String, String>>,
    pub workloads: Vec<Workload>,
    /// Service name → its selector.
    services: Vec<(String, BTreeMap<String, String>)>,
    /// The kinds not run, with why.
    pub not_run: Vec<String>,
}

/// `kubectl kustomize DIR`, each document as JSON.
pub async fn kustomize(dir: &Path) -> Vec<Value> {
    let mut command = tokio::process::Command::new("kubectl");
    command.arg("kustomize").arg(dir);
    let output = run_to_end(command, WAIT).await;
    assert!(
        output.status.success(),
        "kubectl kustomize {}",
        dir.display()
    );
    let text = String::from_utf8(output.stdout).expect("YAML is UTF-8");
    serde_norway::Deserializer::from_str(&text)
        .map(|document| Value::deserialize(document).expect("kubectl's YAML"))
        .collect()
}

impl Manifests {
    pub fn from_rendered(documents: Vec<Value>) -> Self {
        let mut manifests = Self {
            config_maps: Vec::new(),
            secrets: BTreeMap::new(),
            workloads: Vec::new(),
            services: Vec::new(),
            not_run: Vec::new(),
        };
        for document in documents {
            let kind = document["kind"].as_str().unwrap_or_default().to_string();
            let name = document["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            match kind.as_str() {
                "ConfigMap" => manifests.config_maps.push(document),
                "Secret" => {
                    manifests.secrets.insert(name, secret_values(&document));
                }
                "Service" => manifests
                    .services
                    .push((name, labels(&document["spec"]["selector"]))),
                "Deployment" | "StatefulSet" => manifests.workloads.push(Workload {
                    kind,
                    name,
                    replicas: document["spec"]["replicas"].as_u64().unwrap_or(1),
                    template: document["spec"]["template"].clone(),
                    claim_templates: list(&document["spec"]["volumeClaimTemplates"]),
                }),
                _ => match NOT_RUN.iter().find(|(k, _)| *k == kind) {
                    Some((_, why)) => manifests.not_run.push(format!("{kind} {name}: {why}")),
                    None => {
                        panic!("deploy/ has a {kind} ({name}) the kube play test does not know")
                    }
                },
            }
        }
        manifests
    }

    pub fn workload(&self, name: &str) -> &Workload {
        self.workloads
            .iter()
            .find(|w| w.name == name)
            .unwrap_or_else(|| panic!("no workload {name} in deploy/"))
    }

    /// The names of the Services that select `workload`'s pods: the DNS names its pods answer
    /// to (podman has no Services; network aliases stand for them).
    pub fn service_names(&self, workload: &Workload) -> Vec<String> {
        let pod_labels = labels(&workload.template["metadata"]["labels"]);
        self.services
            .iter()
            .filter(|(_, selector)| selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)))
            .map(|(name, _)| name.clone())
            .collect()
    }
}

impl Workload {
    /// Pod `index` of this workload, as its controller would make it (`NAME-INDEX`, the
    /// StatefulSet naming; a Deployment's pods have a random suffix instead), with what the
    /// kubelet does that kube play 4.3 leaves out:
    /// - the pod's `securityContext.runAsUser`/`runAsGroup` apply to each container (kube play
    ///   reads them only per container);
    /// - `$(VAR)` in `command`/`args` is the container's variable (kube play passes it as is);
    /// - a volumeClaimTemplate is the claim `TEMPLATE-NAME-INDEX`;
    /// - no `ports`: kube play 4.3 publishes each containerPort on the host's port of that
    ///   number (Kubernetes publishes none without `hostPort`), so two replicas would collide.
    ///   Pods are reached at their addresses on the network, as in a cluster.
    pub fn pod(&self, index: u64, secrets: &BTreeMap<String, BTreeMap<String, String>>) -> Value {
        let mut spec = self.template["spec"].clone();
        let pod_security = spec["securityContext"].clone();
        for container in spec["containers"].as_array_mut().expect("containers") {
            for key in ["runAsUser", "runAsGroup"] {
                if container["securityContext"][key].is_null() && !pod_security[key].is_null() {
                    container["securityContext"][key] = pod_security[key].clone();
                }
            }
            container
                .as_object_mut()
                .expect("a container")
                .remove("ports");
            let env = container_env(container, secrets);
            for key in ["command", "args"] {
                if let Some(words) = container[key].as_array_mut() {
                    for word in words.iter_mut() {
                        *word = Value::String(expand(word.as_str().unwrap_or_default(), &env));
                    }
                }
            }
        }
        for claim in &self.claim_templates {
            let volume = claim["metadata"]["name"]
                .as_str()
                .expect("a claim template's name");
            let claim_name = format!("{volume}-{}-{index}", self.name);
            let volumes = spec["volumes"].as_array_mut().map(std::mem::take);
            let mut volumes = volumes.unwrap_or_default();
            volumes.push(
                json!({ "name": volume, "persistentVolumeClaim": { "claimName": claim_name } }),
            );
            spec["volumes"] = Value::Array(volumes);
        }
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": { "name": self.pod_name(index), "labels": self.template["metadata"]["labels"] },
            "spec": spec,
        })
    }

    pub fn pod_name(&self, index: u64) -> String {
        format!("{}-{index}", self.name)
    }

    /// The claims pod `index` mounts (PersistentVolumeClaim documents).
    pub fn claims(&self, index: u64) -> Vec<Value> {
        self.claim_templates
            .iter()
            .map(|template| {
                let mut claim = template.clone();
                let volume = template["metadata"]["name"].as_str().expect("a claim name");
                claim["apiVersion"] = json!("v1");
                claim["kind"] = json!("PersistentVolumeClaim");
                claim["metadata"] = json!({ "name": format!("{volume}-{}-{index}", self.name) });
                claim
            })
            .collect()
    }

    /// A probe of the pod's first container (`readinessProbe`, `livenessProbe`…).
    pub fn probe(&self, which: &str) -> &Value {
        &self.template["spec"]["containers"][0][which]
    }

    pub fn termination_grace_secs(&self) -> u64 {
        self.template["spec"]["terminationGracePeriodSeconds"]
            .as_u64()
            .unwrap_or(30)
    }

    pub fn pre_stop_sleep_secs(&self) -> u64 {
        self.probe("lifecycle")["preStop"]["sleep"]["seconds"]
            .as_u64()
            .unwrap_or(0)
    }
}

fn list(value: &Value) -> Vec<Value> {
    value.as_array().cloned().unwrap_or_default()
}

fn labels(value: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(value.clone()).unwrap_or_default()
}

/// A Secret's values, from `data` (base64) and `stringData`.
fn secret_values(secret: &Value) -> BTreeMap<String, String> {
    let mut values: BTreeMap<String, String> = labels(&secret["stringData"]);
    for (key, encoded) in labels(&secret["data"]) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .expect("a Secret's data is base64");
        values.insert(key, String::from_utf8(bytes).expect("a text secret"));
    }
    values
}

/// A container's variables with their values (literal or from a Secret).
fn container_env(
    container: &Value,
    secrets: &BTreeMap<String, BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for var in list(&container["env"]) {
        let name = var["name"].as_str().unwrap_or_default().to_string();
        let reference = &var["valueFrom"]["secretKeyRef"];
        let value = match var["value"].as_str() {
            Some(value) => Some(value.to_string()),
            None => reference["name"].as_str().and_then(|secret| {
                let key = reference["key"].as_str()?;
                secrets.get(secret)?.get(key).cloned()
            }),
        };
        if let Some(value) = value {
            env.insert(name, value);
        }
    }
    env
}

/// `$(NAME)` replaced by the variable's value, as Kubernetes expands command and args.
fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = text.to_string();
    for (name, value) in env {
        out = out.replace(&format!("$({name})"), value);
    }
    out
}

/// The pods, secrets, claims and network of one kube play run; all removed when dropped.
pub struct KubePlay {
    pub network: String,
    dir: tempfile::TempDir,
    pods: Mutex<Vec<String>>,
    secrets: Vec<String>,
    volumes: Vec<String>,
}

/// Run `podman ARGS` to its end (its output is printed, shown when a test fails).
pub async fn podman(args: &[&str]) -> std::process::Output {
    let mut command = tokio::process::Command::new("podman");
    command.args(args);
    run_to_end(command, std::time::Duration::from_secs(120)).await
}

/// [`podman`], failing the test unless it succeeds; its stdout, trimmed.
pub async fn podman_ok(args: &[&str]) -> String {
    let output = podman(args).await;
    assert!(output.status.success(), "podman {args:?} failed");
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

impl KubePlay {
    /// A network of this run's own (DNS on, as podman makes new networks) and the Secrets as
    /// podman secrets: kube play 4.3 has no Secret kind, and reads a `secretKeyRef` from the
    /// podman secret of that name holding a JSON object of base64 values.
    pub async fn start(manifests: &Manifests) -> Self {
        let network = format!("mcp-bridge-kube-{:08x}", fastrand::u32(..));
        podman_ok(&["network", "create", &network]).await;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut secrets = Vec::new();
        for (name, values) in &manifests.secrets {
            let encoded: BTreeMap<&String, String> = values
                .iter()
                .map(|(k, v)| (k, base64::engine::general_purpose::STANDARD.encode(v)))
                .collect();
            let file = dir.path().join(format!("secret-{name}.json"));
            std::fs::write(&file, serde_json::to_vec(&encoded).unwrap()).expect("write");
            podman(&["secret", "rm", name]).await;
            podman_ok(&["secret", "create", name, &file.display().to_string()]).await;
            secrets.push(name.clone());
        }
        // kube play makes a volume of each ConfigMap a pod mounts, named after it.
        let volumes = manifests
            .config_maps
            .iter()
            .map(|c| {
                c["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        Self {
            network,
            dir,
            pods: Mutex::new(Vec::new()),
            secrets,
            volumes,
        }
    }

    /// Make the claims as kube play does: a named volume each.
    pub async fn claim(&mut self, claims: Vec<Value>) {
        for claim in claims {
            let name = claim["metadata"]["name"]
                .as_str()
                .expect("a claim name")
                .to_string();
            podman(&["volume", "rm", "--force", &name]).await;
            self.play(&[claim], &[]).await;
            self.volumes.push(name);
        }
    }

    /// `podman kube play` of `pod` with the ConfigMaps it mounts, on this run's network with
    /// `aliases` (the Services that select it) as DNS names.
    pub async fn play_pod(&self, pod: &Value, config_maps: &Manifests, aliases: &[String]) {
        let name = pod["metadata"]["name"]
            .as_str()
            .expect("a pod name")
            .to_string();
        let mut documents = config_maps.config_maps.clone();
        documents.push(pod.clone());
        self.pods.lock().unwrap().push(name);
        self.play(&documents, aliases).await;
    }

    async fn play(&self, documents: &[Value], aliases: &[String]) {
        let yaml: Vec<String> = documents.iter().map(Value::to_string).collect();
        let file = self
            .dir
            .path()
            .join(format!("play-{:08x}.yaml", fastrand::u32(..)));
        std::fs::write(&file, yaml.join("\n---\n")).expect("write the kube YAML");
        let mut network = self.network.clone();
        for alias in aliases {
            network.push_str(&format!(":alias={alias}"));
        }
        let file = file.display().to_string();
        podman_ok(&["kube", "play", "--replace", "--network", &network, &file]).await;
    }

    /// The pod's address on the network.
    pub async fn ip(&self, pod: &str) -> String {
        let infra = podman_ok(&["pod", "inspect", pod, "--format", "{{.InfraContainerID}}"]).await;
        let format = format!(
            "{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}",
            self.network
        );
        podman_ok(&["inspect", &infra, "--format", &format]).await
    }

    /// A file in this run's directory (for a hostPath volume).
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path
    }
}

impl Drop for KubePlay {
    fn drop(&mut self) {
        let run = |args: &[&str]| {
            let _ = std::process::Command::new("podman")
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        };
        for pod in self.pods.lock().unwrap().iter() {
            run(&["pod", "rm", "--force", "--time", "0", pod]);
        }
        for secret in &self.secrets {
            run(&["secret", "rm", secret]);
        }
        for volume in &self.volumes {
            run(&["volume", "rm", "--force", volume]);
        }
        run(&["network", "rm", "--force", &self.network]);
    }
}
