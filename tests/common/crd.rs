//! The `EC2NodeClass` CRDs of karpenter-provider-aws (v1.4.0, v1.6.0, v1.7.0,
//! v1.14.1 and main), read from the shared design folder — data, not code,
//! and never copied into this repository — and what the API server checks
//! when one of our documents is applied:
//! - the `v1` structural schema (`spec.versions[name=v1].schema.
//!   openAPIV3Schema`), validated with `boon` as JSON Schema draft 4 (the
//!   dialect OpenAPI v3 schemas are written in). A structural schema prunes
//!   or (with kubectl's default strict field validation) rejects fields it
//!   does not declare, so every object schema that lists `properties` and
//!   neither `additionalProperties` nor `x-kubernetes-preserve-unknown-
//!   fields` gets `additionalProperties: false`. Kubernetes' own formats are
//!   registered: `int32`, `int64` (ranges) and `duration` (Go durations, not
//!   ISO 8601). Other `x-kubernetes-*` keys carry no JSON Schema meaning and
//!   are ignored;
//! - the `x-kubernetes-validations` CEL rules on every part of the schema our
//!   document reaches, each evaluated by a hand-written equivalent below
//!   ([`evaluate`]). Transition rules (those using `oldSelf`) run only on
//!   update and cannot be checked on a first apply: they are listed as such.
//!   A rule that is reached and not in the list fails the test, so a new
//!   upstream rule cannot pass unread;
//! - the object name rule: `metadata.name` must be a DNS-1123 subdomain
//!   (apiextensions-apiserver validates it for every custom resource).

// Each test binary that includes this file uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{json, Map, Value};

/// The CRD versions that must be present.
pub const VERSIONS: [&str; 5] = ["v1.4.0", "v1.6.0", "v1.7.0", "v1.14.1", "main"];

/// The shared design folder holding `karpenter-crds/`:
/// `$ACCELREADY_SHARED_DIR`, else the first `shared/` beside an ancestor of
/// this repository (CI: `<root>/main` with `<root>/shared`; a worktree at
/// `<root>/wt/<name>` finds the same folder).
pub fn shared_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ACCELREADY_SHARED_DIR") {
        let dir = PathBuf::from(dir);
        assert!(
            dir.join("karpenter-crds").is_dir(),
            "ACCELREADY_SHARED_DIR={} has no karpenter-crds/",
            dir.display()
        );
        return dir;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    repo.ancestors()
        .skip(1)
        .map(|dir| dir.join("shared"))
        .find(|dir| dir.join("karpenter-crds").is_dir())
        .unwrap_or_else(|| {
            panic!(
                "the EC2NodeClass CRDs were not found: no shared/karpenter-crds/ beside {} or above it; \
                 check out the shared design folder next to the repository or set ACCELREADY_SHARED_DIR",
                repo.display()
            )
        })
}

/// One CRD version, compiled.
pub struct Crd {
    pub version: String,
    /// The `v1` openAPIV3Schema as published.
    pub schema: Value,
    compiled: boon::Schemas,
    index: boon::SchemaIndex,
}

/// Every `ec2nodeclasses-<version>.yaml` in the shared folder (at least
/// [`VERSIONS`]), compiled.
pub fn load_all() -> Vec<Crd> {
    let dir = shared_dir().join("karpenter-crds");
    let mut versions: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().to_string_lossy().into_owned();
            let version = name
                .strip_prefix("ec2nodeclasses-")?
                .strip_suffix(".yaml")?;
            Some(version.to_owned())
        })
        .collect();
    versions.sort();
    for required in VERSIONS {
        assert!(
            versions.iter().any(|v| v == required),
            "{}: ec2nodeclasses-{required}.yaml missing",
            dir.display()
        );
    }
    versions
        .into_iter()
        .map(|version| {
            let path = dir.join(format!("ec2nodeclasses-{version}.yaml"));
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let crd: Value =
                serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            compile(version, &crd)
        })
        .collect()
}

fn compile(version: String, crd: &Value) -> Crd {
    assert_eq!(crd["spec"]["names"]["kind"], "EC2NodeClass", "{version}");
    assert_eq!(crd["spec"]["group"], "karpenter.k8s.aws", "{version}");
    let schema = crd["spec"]["versions"]
        .as_array()
        .and_then(|versions| versions.iter().find(|v| v["name"] == "v1"))
        .map(|v| v["schema"]["openAPIV3Schema"].clone())
        .unwrap_or_else(|| panic!("{version}: no v1 openAPIV3Schema"));
    let mut structural = schema.clone();
    close_objects(&mut structural);
    let mut compiler = boon::Compiler::new();
    compiler.set_default_draft(boon::Draft::V4);
    for (name, func) in [
        (
            "int32",
            int32 as fn(&Value) -> Result<(), Box<dyn std::error::Error>>,
        ),
        ("int64", int64),
        ("duration", go_duration),
    ] {
        compiler.register_format(boon::Format { name, func });
    }
    let location = format!("https://crds.invalid/ec2nodeclasses-{version}.json");
    compiler
        .add_resource(&location, structural)
        .unwrap_or_else(|e| panic!("{version}: {e}"));
    let mut compiled = boon::Schemas::new();
    let index = compiler
        .compile(&location, &mut compiled)
        .unwrap_or_else(|e| panic!("{version}: {e:#}"));
    Crd {
        version,
        schema,
        compiled,
        index,
    }
}

/// Structural-schema semantics: an object schema with `properties` accepts
/// no other field unless it says so.
fn close_objects(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let preserves = object.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    if object.contains_key("properties")
        && !object.contains_key("additionalProperties")
        && !preserves
    {
        object.insert("additionalProperties".to_owned(), json!(false));
    }
    for (key, child) in object.iter_mut() {
        match key.as_str() {
            "properties" => {
                if let Some(properties) = child.as_object_mut() {
                    properties.values_mut().for_each(close_objects);
                }
            }
            "items" | "additionalProperties" => close_objects(child),
            "allOf" | "anyOf" | "oneOf" => {
                if let Some(list) = child.as_array_mut() {
                    list.iter_mut().for_each(close_objects);
                }
            }
            _ => {}
        }
    }
}

fn int_in(v: &Value, min: i64, max: i64) -> Result<(), Box<dyn std::error::Error>> {
    match v.as_i64() {
        Some(n) if (min..=max).contains(&n) => Ok(()),
        Some(n) => Err(format!("{n} is out of range").into()),
        None if v.is_number() => Err(format!("{v} is not an integer in range").into()),
        None => Ok(()),
    }
}

fn int32(v: &Value) -> Result<(), Box<dyn std::error::Error>> {
    int_in(v, i32::MIN.into(), i32::MAX.into())
}

fn int64(v: &Value) -> Result<(), Box<dyn std::error::Error>> {
    int_in(v, i64::MIN, i64::MAX)
}

fn go_duration(v: &Value) -> Result<(), Box<dyn std::error::Error>> {
    static PATTERN: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^(?:0|[-+]?(?:[0-9]+(?:\.[0-9]*)?(?:ns|us|µs|ms|s|m|h))+)$")
            .expect("regex compiles")
    });
    match v.as_str() {
        Some(s) if !PATTERN.is_match(s) => Err(format!("'{s}' is not a Go duration").into()),
        _ => Ok(()),
    }
}

impl Crd {
    /// Every check the API server makes on creating `document`; the errors,
    /// one per line, naming this CRD version.
    pub fn check(&self, document: &Value) -> Result<(), String> {
        let mut errors = Vec::new();
        if let Err(error) = self.compiled.validate(document, self.index) {
            errors.push(format!("schema: {error:#}"));
        }
        match document.pointer("/metadata/name").and_then(Value::as_str) {
            Some(name) if dns1123_subdomain(name) => {}
            other => errors.push(format!(
                "metadata.name {other:?} is not a DNS-1123 subdomain"
            )),
        }
        let mut reached = Vec::new();
        rules_reached(&self.schema, document, "", &mut reached);
        for (path, rule, message, this) in reached {
            match evaluate(&rule, this) {
                Some(Outcome::Holds) | Some(Outcome::OnUpdateOnly) => {}
                Some(Outcome::Fails) => errors.push(format!("CEL at {path}: {message} ({rule})")),
                None => errors.push(format!(
                    "CEL at {path}: rule not classified in tests/common/crd.rs (read it, add it to evaluate()): {rule}"
                )),
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "EC2NodeClass CRD {}:\n{}",
                self.version,
                errors.join("\n")
            ))
        }
    }
}

/// `IsDNS1123Subdomain` (k8s.io/apimachinery/pkg/util/validation), written
/// out independently of `src/`.
pub fn dns1123_subdomain(name: &str) -> bool {
    static PATTERN: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
            .expect("regex compiles")
    });
    name.len() <= 253 && PATTERN.is_match(name)
}

/// The CEL rules on each part of `schema` that `document` has a value for:
/// (path, rule, message, the value `self` stands for).
fn rules_reached<'d>(
    schema: &Value,
    document: &'d Value,
    path: &str,
    out: &mut Vec<(String, String, String, &'d Value)>,
) {
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for rule in rules {
            out.push((
                if path.is_empty() {
                    ".".to_owned()
                } else {
                    path.to_owned()
                },
                rule["rule"].as_str().unwrap_or_default().to_owned(),
                rule["message"].as_str().unwrap_or_default().to_owned(),
                document,
            ));
        }
    }
    if let (Some(properties), Some(object)) = (
        schema.get("properties").and_then(Value::as_object),
        document.as_object(),
    ) {
        for (key, child) in properties {
            if let Some(value) = object.get(key) {
                rules_reached(child, value, &format!("{path}.{key}"), out);
            }
        }
    }
    if let (Some(items), Some(list)) = (schema.get("items"), document.as_array()) {
        for (i, value) in list.iter().enumerate() {
            rules_reached(items, value, &format!("{path}[{i}]"), out);
        }
    }
    if let (Some(values), Some(object)) = (
        schema.get("additionalProperties").filter(|v| v.is_object()),
        document.as_object(),
    ) {
        let declared = schema.get("properties").and_then(Value::as_object);
        for (key, value) in object {
            if declared.is_none_or(|d| !d.contains_key(key)) {
                rules_reached(values, value, &format!("{path}.{key}"), out);
            }
        }
    }
}

/// What a CEL rule says about a value.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Holds,
    Fails,
    /// A transition rule (`oldSelf`): evaluated only when an object is
    /// updated, so not on the first apply of a rendered document.
    OnUpdateOnly,
}

fn has(value: &Value, field: &str) -> bool {
    value.get(field).is_some()
}

fn each(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

fn keys(value: &Value) -> impl Iterator<Item = (&String, &Value)> {
    value.as_object().into_iter().flat_map(Map::iter)
}

fn alias_prefix(alias: &str) -> &str {
    alias.split('@').next().unwrap_or_default()
}

/// `!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) &&
/// x.alias.find('^[^@]+') == prefix) ? (self.amiFamily == 'Custom' ||
/// self.amiFamily == family) : true)`
fn alias_matches_family(spec: &Value, prefix: &str, family: &str) -> bool {
    let Some(ami_family) = spec.get("amiFamily").and_then(Value::as_str) else {
        return true;
    };
    let uses_alias = each(&spec["amiSelectorTerms"]).iter().any(|term| {
        term.get("alias")
            .and_then(Value::as_str)
            .is_some_and(|alias| alias_prefix(alias) == prefix && !prefix.is_empty())
    });
    !uses_alias || ami_family == "Custom" || ami_family == family
}

fn alias_in(alias: &Value, families: &[&str]) -> bool {
    alias
        .as_str()
        .is_some_and(|a| families.contains(&alias_prefix(a)))
}

fn windows_alias_is_latest(alias: &Value, windows: &[&str]) -> bool {
    let a = alias.as_str().unwrap_or_default();
    !windows.contains(&alias_prefix(a)) || a.split('@').nth(1) == Some("latest")
}

fn all_keys_in(this: &Value, allowed: &[&str]) -> bool {
    keys(this).all(|(k, _)| allowed.contains(&k.as_str()))
}

fn number(value: &Value) -> Option<f64> {
    value.as_f64()
}

const EVICTION_SIGNALS: [&str; 6] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];

/// Each CEL rule of the EC2NodeClass CRDs that a rendered document reaches,
/// by its exact upstream text, evaluated on `this` (CEL's `self`); `None`
/// for a rule not written out here.
pub fn evaluate(rule: &str, this: &Value) -> Option<Outcome> {
    let holds = |b: bool| Some(if b { Outcome::Holds } else { Outcome::Fails });
    let terms = each(this);
    match rule {
        // .spec
        "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'al2') ? (self.amiFamily == 'Custom' || self.amiFamily == 'AL2') : true)" => {
            holds(alias_matches_family(this, "al2", "AL2"))
        }
        "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'al2023') ? (self.amiFamily == 'Custom' || self.amiFamily == 'AL2023') : true)" => {
            holds(alias_matches_family(this, "al2023", "AL2023"))
        }
        "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'bottlerocket') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Bottlerocket') : true)" => {
            holds(alias_matches_family(this, "bottlerocket", "Bottlerocket"))
        }
        "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'windows2019') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Windows2019') : true)" => {
            holds(alias_matches_family(this, "windows2019", "Windows2019"))
        }
        "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'windows2022') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Windows2022') : true)" => {
            holds(alias_matches_family(this, "windows2022", "Windows2022"))
        }
        "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'windows2025') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Windows2025') : true)" => {
            holds(alias_matches_family(this, "windows2025", "Windows2025"))
        }
        "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))" => {
            holds(has(this, "role") != has(this, "instanceProfile"))
        }
        "self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)" => holds(
            each(&this["amiSelectorTerms"]).iter().any(|x| has(x, "alias")) || has(this, "amiFamily"),
        ),
        "(has(oldSelf.role) && has(self.role)) || (has(oldSelf.instanceProfile) && has(self.instanceProfile))"
        | "self == oldSelf" => Some(Outcome::OnUpdateOnly),
        // .spec.amiSelectorTerms
        "!(self.exists(x, has(x.alias)) && self.size() != 1)" => {
            holds(!(terms.iter().any(|x| has(x, "alias")) && terms.len() != 1))
        }
        "!self.exists(x, has(x.alias) && (has(x.id) || has(x.tags) || has(x.name) || has(x.owner)))" => {
            holds(!terms.iter().any(|x| {
                has(x, "alias") && ["id", "tags", "name", "owner"].iter().any(|f| has(x, f))
            }))
        }
        "!self.exists(x, has(x.id) && (has(x.alias) || has(x.tags) || has(x.name) || has(x.owner)))" => {
            holds(!terms.iter().any(|x| {
                has(x, "id") && ["alias", "tags", "name", "owner"].iter().any(|f| has(x, f))
            }))
        }
        "self.all(x, has(x.tags) || has(x.id) || has(x.name) || has(x.alias) || has(x.ssmParameter))" => {
            holds(terms.iter().all(|x| {
                ["tags", "id", "name", "alias", "ssmParameter"].iter().any(|f| has(x, f))
            }))
        }
        // .spec.amiSelectorTerms[].alias
        "self.matches('^[a-zA-Z0-9]+@.+$')" => {
            static ALIAS: LazyLock<Regex> =
                LazyLock::new(|| Regex::new("^[a-zA-Z0-9]+@.+$").expect("regex compiles"));
            holds(ALIAS.is_match(this.as_str().unwrap_or_default()))
        }
        "self.split('@')[0] in ['al2','al2023','bottlerocket','windows2019','windows2022','windows2025']" => {
            holds(alias_in(this, &["al2", "al2023", "bottlerocket", "windows2019", "windows2022", "windows2025"]))
        }
        "self.split('@')[0] in ['al2','al2023','bottlerocket','windows2019','windows2022']" => {
            holds(alias_in(this, &["al2", "al2023", "bottlerocket", "windows2019", "windows2022"]))
        }
        "self.split('@')[0] in ['windows2019','windows2022','windows2025'] ? self.split('@')[1] == 'latest' : true" => {
            holds(windows_alias_is_latest(this, &["windows2019", "windows2022", "windows2025"]))
        }
        "self.split('@')[0] in ['windows2019','windows2022'] ? self.split('@')[1] == 'latest' : true" => {
            holds(windows_alias_is_latest(this, &["windows2019", "windows2022"]))
        }
        // .spec.{subnet,securityGroup}SelectorTerms
        "!self.all(x, has(x.id) && (has(x.tags) || has(x.name)))" => {
            holds(!terms.iter().all(|x| has(x, "id") && (has(x, "tags") || has(x, "name"))))
        }
        "!self.all(x, has(x.name) && (has(x.tags) || has(x.id)))" => {
            holds(!terms.iter().all(|x| has(x, "name") && (has(x, "tags") || has(x, "id"))))
        }
        "self.all(x, has(x.tags) || has(x.id) || has(x.name))" => {
            holds(terms.iter().all(|x| has(x, "tags") || has(x, "id") || has(x, "name")))
        }
        "!self.all(x, has(x.id) && has(x.tags))" => {
            holds(!terms.iter().all(|x| has(x, "id") && has(x, "tags")))
        }
        "self.all(x, has(x.tags) || has(x.id))" => {
            holds(terms.iter().all(|x| has(x, "tags") || has(x, "id")))
        }
        "self.size() != 0" => holds(!terms.is_empty() || keys(this).next().is_some()),
        // ...[].tags
        "self.all(k, k != '' && self[k] != '')" => {
            holds(keys(this).all(|(k, v)| !k.is_empty() && v != ""))
        }
        // .spec.role
        "self != ''" => holds(this != ""),
        // .spec.kubelet
        "has(self.evictionSoft) ? self.evictionSoft.all(e, (e in self.evictionSoftGracePeriod)):true" => {
            holds(keys(&this["evictionSoft"]).all(|(e, _)| has(&this["evictionSoftGracePeriod"], e)))
        }
        "has(self.evictionSoftGracePeriod) ? self.evictionSoftGracePeriod.all(e, (e in self.evictionSoft)):true" => {
            holds(keys(&this["evictionSoftGracePeriod"]).all(|(e, _)| has(&this["evictionSoft"], e)))
        }
        "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ?  self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent  : true" => {
            match (
                number(&this["imageGCHighThresholdPercent"]),
                number(&this["imageGCLowThresholdPercent"]),
            ) {
                (Some(high), Some(low)) => holds(high > low),
                _ => holds(true),
            }
        }
        "self.all(x, x in ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available'])" => {
            holds(all_keys_in(this, &EVICTION_SIGNALS))
        }
        "self.all(x, !self[x].startsWith('-'))" => {
            holds(keys(this).all(|(_, v)| !v.as_str().unwrap_or_default().starts_with('-')))
        }
        "self.all(x, x=='cpu' || x=='memory' || x=='ephemeral-storage' || x=='pid')" => {
            holds(all_keys_in(this, &["cpu", "memory", "ephemeral-storage", "pid"]))
        }
        _ => None,
    }
}

type Edit = fn(&mut Value);

/// The checker must be able to fail: a rendered document broken in each of
/// the ways the issue found (and a few more) is rejected by every CRD, and
/// every CEL rule any CRD holds at a reached path is classified.
pub fn self_check(crds: &[Crd], good: &Value) {
    for crd in crds {
        crd.check(good).unwrap_or_else(|e| panic!("{e}"));
        let broken: [(&str, Edit); 9] = [
            ("name with '_'", |d| {
                d["metadata"]["name"] = json!("x86_64-gpu")
            }),
            ("discovery tag read as a boolean", |d| {
                d["spec"]["subnetSelectorTerms"][0]["tags"]["karpenter.sh/discovery"] = json!(true)
            }),
            ("unknown spec field", |d| d["spec"]["userdata"] = json!("x")),
            ("empty role", |d| d["spec"]["role"] = json!("")),
            ("alias of another family", |d| {
                d["spec"]["amiSelectorTerms"][0]["alias"] = json!("al2023@latest")
            }),
            ("no subnet terms", |d| {
                d["spec"]["subnetSelectorTerms"] = json!([])
            }),
            ("maxPods over int32", |d| {
                d["spec"]["kubelet"] = json!({"maxPods": 3_000_000_000u64})
            }),
            ("negative reservation", |d| {
                d["spec"]["kubelet"] = json!({"kubeReserved": {"memory": "-1Gi"}})
            }),
            ("no userData type", |d| d["spec"]["userData"] = json!(1)),
        ];
        for (what, edit) in broken {
            let mut document = good.clone();
            edit(&mut document);
            // A free-form spec.kubelet (main) leaves its fields to Karpenter,
            // which checks them after the apply.
            let free_form_kubelet = crd.schema.pointer(
                "/properties/spec/properties/kubelet/x-kubernetes-preserve-unknown-fields",
            ) == Some(&json!(true))
                && (what.contains("maxPods") || what.contains("reservation"));
            assert_eq!(
                crd.check(&document).is_err(),
                !free_form_kubelet,
                "{} accepted/rejected wrongly: {what}",
                crd.version
            );
        }
    }
}
