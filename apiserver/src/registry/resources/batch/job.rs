//! Jobs (upstream's `SetDefaults_Job`, the job strategy's generated selector, and
//! `ValidateJob`/`ValidateJobUpdate`): unless `manualSelector` is set, a job selects its
//! pods by its uid, with `controller-uid` and `job-name` labels (plain and
//! `batch.kubernetes.io/`) put on its template.

use serde_json::{Value, json};

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::core::pod_spec::{self, Opts, default_template, set_default};
use crate::registry::resources::{at_mut, items_mut};
use crate::validation::{self as v, child, key, label_selector, nonnegative, selector_matches, show};

pub struct JobHooks;

const JOB_NAME: [&str; 2] = ["job-name", "batch.kubernetes.io/job-name"];
const CONTROLLER_UID: [&str; 2] = ["controller-uid", "batch.kubernetes.io/controller-uid"];

/// The generated selector and template labels (upstream's `generateSelector`).
fn generate_selector(job: &mut Value) {
    let name = job["metadata"]["name"].clone();
    let uid = job["metadata"]["uid"].clone();
    let template = &mut job["spec"]["template"];
    if !template["metadata"]["labels"].is_object() {
        template["metadata"]["labels"] = json!({});
    }
    let labels = template["metadata"]["labels"].as_object_mut().expect("just made an object");
    for k in JOB_NAME {
        labels.entry(k).or_insert(name.clone());
    }
    for k in CONTROLLER_UID {
        labels.entry(k).or_insert(uid.clone());
    }
    let sel = &mut job["spec"]["selector"];
    if !sel["matchLabels"].is_object() {
        sel["matchLabels"] = json!({});
    }
    sel["matchLabels"].as_object_mut().expect("just made an object").entry(CONTROLLER_UID[1]).or_insert(uid);
}

/// `validateJobSpec`: what jobs and job templates share. `path` is the spec's.
pub fn validate_job_spec(spec: &Value, path: &str) -> Vec<FieldError> {
    let p = |f: &str| child(path, f);
    let mut errs = Vec::new();
    for f in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
    ] {
        errs.extend(nonnegative(&p(f), &spec[f]));
    }
    let indexed = spec["completionMode"] == "Indexed";
    if let Some(m) = spec["maxFailedIndexes"].as_i64() {
        errs.extend(nonnegative(&p("maxFailedIndexes"), &spec["maxFailedIndexes"]));
        if spec["backoffLimitPerIndex"].is_null() {
            errs.push(FieldError::required(p("backoffLimitPerIndex"), "when maxFailedIndexes is specified"));
        }
        if !indexed {
            errs.push(FieldError::invalid(p("maxFailedIndexes"), m, "requires indexed completion mode"));
        }
    }
    if let Some(b) = spec["backoffLimitPerIndex"].as_i64()
        && !indexed
    {
        errs.push(FieldError::invalid(p("backoffLimitPerIndex"), b, "requires indexed completion mode"));
    }
    if let Some(m) = spec["managedBy"].as_str() {
        if m.len() > 63 {
            errs.push(FieldError {
                detail: "may not be longer than 63".into(),
                ..FieldError::too_long(p("managedBy"), 63)
            });
        }
        if !m.contains('/') {
            errs.push(FieldError::invalid(
                p("managedBy"),
                m,
                "must be a domain-prefixed path (such as \"acme.io/foo\")",
            ));
        }
    }
    if let Some(mode) = spec["completionMode"].as_str() {
        if !["NonIndexed", "Indexed"].contains(&mode) {
            errs.push(FieldError::not_supported(p("completionMode"), mode, &["NonIndexed", "Indexed"]));
        }
        if mode == "Indexed" {
            if spec["completions"].is_null() {
                errs.push(FieldError::required(p("completions"), "when completion mode is Indexed"));
            }
            if let Some(par) = spec["parallelism"].as_i64().filter(|n| *n > 100_000) {
                errs.push(FieldError::invalid(
                    p("parallelism"),
                    par,
                    "must be less than or equal to 100000 when completion mode is Indexed",
                ));
            }
        }
    }
    let failure_policy = &spec["podFailurePolicy"];
    if failure_policy.is_object() {
        let rules = failure_policy["rules"].as_array().map(Vec::as_slice).unwrap_or_default();
        if rules.len() > 20 {
            errs.push(v::too_many(child(&p("podFailurePolicy"), "rules"), rules.len(), 20));
        }
        for (i, rule) in rules.iter().enumerate() {
            let rp = format!("{}.rules[{i}]", p("podFailurePolicy"));
            const ACTIONS: &[&str] = &["Count", "FailIndex", "FailJob", "Ignore"];
            match rule["action"].as_str().unwrap_or_default() {
                "" => errs.push(FieldError::required(
                    format!("{rp}.action"),
                    "valid values: [\"Count\" \"FailIndex\" \"FailJob\" \"Ignore\"]",
                )),
                "FailIndex" if spec["backoffLimitPerIndex"].is_null() => errs.push(FieldError::invalid(
                    format!("{rp}.action"),
                    "FailIndex",
                    "requires the backoffLimitPerIndex to be set",
                )),
                a if !ACTIONS.contains(&a) => {
                    errs.push(FieldError::not_supported(format!("{rp}.action"), a, ACTIONS))
                }
                _ => {}
            }
            let (codes, conds) = (
                rule["onExitCodes"].is_object(),
                rule["onPodConditions"].as_array().is_some_and(|c| !c.is_empty()),
            );
            if codes && conds {
                errs.push(FieldError::invalid(
                    rp.clone(),
                    "",
                    "specifying both OnExitCodes and OnPodConditions is not supported",
                ));
            }
            if !codes && !conds {
                errs.push(FieldError::invalid(
                    rp.clone(),
                    "",
                    "specifying one of OnExitCodes and OnPodConditions is required",
                ));
            }
        }
    }
    if spec["successPolicy"].is_object() && !indexed {
        errs.push(FieldError::invalid(
            p("successPolicy"),
            show(&spec["successPolicy"]),
            "requires indexed completion mode",
        ));
    }
    if let Some(rp) = spec["podReplacementPolicy"].as_str() {
        if failure_policy.is_object() {
            if rp != "Failed" {
                errs.push(FieldError::not_supported(p("podReplacementPolicy"), rp, &["Failed"]));
            }
        } else if !["Failed", "TerminatingOrFailed"].contains(&rp) {
            errs.push(FieldError::not_supported(
                p("podReplacementPolicy"),
                rp,
                &["Failed", "TerminatingOrFailed"],
            ));
        }
    }
    let template = &spec["template"];
    errs.extend(pod_spec::validate_template(template, &p("template"), Opts::default()));
    let restart_path = format!("{}.spec.restartPolicy", p("template"));
    match template["spec"]["restartPolicy"].as_str().unwrap_or_default() {
        "Always" | "" => {
            errs.push(FieldError::required(restart_path, "valid values: \"OnFailure\", \"Never\""))
        }
        r if r != "OnFailure" && r != "Never" => {
            errs.push(FieldError::not_supported(restart_path, r, &["OnFailure", "Never"]))
        }
        r if failure_policy.is_object() && r != "Never" => errs.push(FieldError::invalid(
            restart_path,
            r,
            "only \"Never\" is supported when podFailurePolicy is specified",
        )),
        _ => {}
    }
    errs
}

fn defaulted_template(job: &Value) -> Value {
    let mut t = job["spec"]["template"].clone();
    default_template(&mut t);
    t
}

impl Hooks for JobHooks {
    fn warnings(&self, obj: &Value) -> Vec<String> {
        crate::registry::resources::core::pod_warnings::template_warnings(obj, &["spec", "template"])
    }

    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if spec["completions"].is_null() && spec["parallelism"].is_null() {
            spec["completions"] = json!(1);
        }
        set_default(spec, "parallelism", json!(1));
        let backoff = if spec["backoffLimitPerIndex"].is_null() { 6 } else { i64::from(i32::MAX) };
        set_default(spec, "backoffLimit", json!(backoff));
        set_default(spec, "completionMode", json!("NonIndexed"));
        set_default(spec, "suspend", json!(false));
        for rule in at_mut(spec, &["podFailurePolicy"]).into_iter().flat_map(|p| items_mut(p, "rules")) {
            for c in items_mut(rule, "onPodConditions") {
                if c["status"].as_str().is_none_or(str::is_empty) {
                    c["status"] = json!("True");
                }
            }
        }
        let replacement = if spec["podFailurePolicy"].is_object() { "Failed" } else { "TerminatingOrFailed" };
        set_default(spec, "podReplacementPolicy", json!(replacement));
        set_default(spec, "manualSelector", json!(false));
        if spec["template"].is_object() {
            default_template(&mut spec["template"]);
        }
        // A job without labels takes its template's (which carry the generated ones).
        let template_labels = obj["spec"]["template"]["metadata"]["labels"].clone();
        if template_labels.is_object() && obj["metadata"]["labels"].as_object().is_none_or(|l| l.is_empty()) {
            obj["metadata"]["labels"] = template_labels;
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        if let Some(o) = obj.as_object_mut() {
            o.remove("status");
        }
        if obj["spec"]["manualSelector"].as_bool() != Some(true) {
            generate_selector(obj);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let mut errs = Vec::new();
        let (name, uid) = (&obj["metadata"]["name"], &obj["metadata"]["uid"]);
        if spec["manualSelector"].as_bool() != Some(true) && spec["selector"].is_object() {
            if uid.as_str().is_none_or(str::is_empty) {
                errs.push(FieldError::required("metadata.uid", ""));
            }
            let template_labels = &spec["template"]["metadata"]["labels"];
            for (k, want, required) in [
                (CONTROLLER_UID[0], uid, true),
                (JOB_NAME[0], name, true),
                (CONTROLLER_UID[1], uid, false),
                (JOB_NAME[1], name, false),
            ] {
                let lp = key("spec.template.metadata.labels", k);
                let must = format!("must be '{}'", want.as_str().unwrap_or_default());
                match template_labels.get(k) {
                    None if required => errs.push(FieldError::required(lp, must)),
                    Some(v) if v != want => errs.push(FieldError::invalid(lp, show(template_labels), must)),
                    _ => {}
                }
            }
            let mut expected = json!({ CONTROLLER_UID[0]: uid, JOB_NAME[0]: name });
            if template_labels.get(CONTROLLER_UID[1]).is_some() {
                expected[CONTROLLER_UID[1]] = uid.clone();
                expected[JOB_NAME[1]] = name.clone();
            }
            if !selector_matches(&spec["selector"], &expected) {
                errs.push(FieldError::invalid(
                    "spec.selector",
                    show(&spec["selector"]),
                    "`selector` not auto-generated",
                ));
            }
        }
        errs.extend(validate_job_spec(spec, "spec"));
        if spec["selector"].is_object() {
            errs.extend(label_selector("spec.selector", &spec["selector"]));
            if !selector_matches(&spec["selector"], &spec["template"]["metadata"]["labels"]) {
                errs.push(FieldError::invalid(
                    "spec.template.metadata.labels",
                    show(&spec["template"]["metadata"]["labels"]),
                    "`selector` does not match template `labels`",
                ));
            }
        } else {
            errs.push(FieldError::required("spec.selector", ""));
        }
        if spec["completionMode"] == "Indexed"
            && let Some(c) = spec["completions"].as_i64().filter(|c| *c > 0)
        {
            let host = format!("{}-{}", name.as_str().unwrap_or_default(), c - 1);
            if !v::is_dns1123_label(&host) {
                errs.push(FieldError::invalid(
                    "metadata.name",
                    name.as_str().unwrap_or_default(),
                    format!("will not able to create pod with invalid DNS label: {host}"),
                ));
            }
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let (ns, os) = (&new["spec"], &old["spec"]);
        let mut errs = Vec::new();
        if ns["completionMode"] == "Indexed" {
            if ns["completions"] != os["completions"]
                && !ns["completions"].is_null()
                && ns["completions"] != ns["parallelism"]
            {
                errs.push(FieldError::invalid(
                    "spec.completions",
                    show(&ns["completions"]),
                    "can only be modified in tandem with spec.parallelism",
                ));
            }
        } else {
            errs.extend(v::immutable("spec.completions", &ns["completions"], &os["completions"]));
        }
        errs.extend(v::immutable("spec.selector", &ns["selector"], &os["selector"]));
        // The template is immutable, but for scheduling directives of a suspended job
        // that never started.
        let new_template = defaulted_template(new);
        let mut old_template = defaulted_template(old);
        if os["suspend"].as_bool() == Some(true) && old["status"]["startTime"].is_null() {
            for f in ["nodeSelector", "tolerations", "schedulingGates"] {
                old_template["spec"][f] = new_template["spec"][f].clone();
            }
            old_template["spec"]["affinity"]["nodeAffinity"] =
                new_template["spec"]["affinity"]["nodeAffinity"].clone();
            for f in ["labels", "annotations"] {
                old_template["metadata"][f] = new_template["metadata"][f].clone();
            }
            let strip = |t: &mut Value| {
                for (parent, f) in [
                    ("spec", "nodeSelector"),
                    ("spec", "tolerations"),
                    ("spec", "schedulingGates"),
                    ("metadata", "labels"),
                    ("metadata", "annotations"),
                ] {
                    if t[parent][f].is_null() {
                        t[parent].as_object_mut().map(|o| o.remove(f));
                    }
                }
                if t["spec"]["affinity"]["nodeAffinity"].is_null() {
                    t["spec"]["affinity"].as_object_mut().map(|o| o.remove("nodeAffinity"));
                }
                if t["spec"]["affinity"].as_object().is_some_and(|a| a.is_empty()) {
                    t["spec"].as_object_mut().map(|o| o.remove("affinity"));
                }
            };
            strip(&mut old_template);
        }
        let mut new_cmp = new_template.clone();
        if new_cmp["spec"]["affinity"].as_object().is_some_and(|a| a.is_empty()) {
            new_cmp["spec"].as_object_mut().map(|o| o.remove("affinity"));
        }
        if new_cmp != old_template {
            errs.push(FieldError::invalid("spec.template", show(&ns["template"]), v::IMMUTABLE_MSG));
        }
        for f in ["completionMode", "podFailurePolicy", "backoffLimitPerIndex", "managedBy", "successPolicy"]
        {
            errs.extend(v::immutable(&format!("spec.{f}"), &ns[f], &os[f]));
        }
        errs
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn fields(&self, obj: &Value) -> Vec<(&'static str, String)> {
        vec![("status.successful", obj["status"]["succeeded"].as_i64().unwrap_or(0).to_string())]
    }

    fn field_names(&self) -> &'static [&'static str] {
        &["status.successful"]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Value {
        let mut j = json!({
            "metadata": { "name": "pi", "namespace": "default", "uid": "u-1" },
            "spec": { "template": { "spec": { "containers": [{ "name": "pi", "image": "perl" }], "restartPolicy": "Never" } } },
        });
        JobHooks.prepare_for_create(&mut j);
        JobHooks.default(&mut j);
        j
    }

    #[test]
    fn defaults_and_generated_selector() {
        let j = job();
        let spec = &j["spec"];
        assert_eq!(spec["completions"], 1);
        assert_eq!(spec["parallelism"], 1);
        assert_eq!(spec["backoffLimit"], 6);
        assert_eq!(spec["completionMode"], "NonIndexed");
        assert_eq!(spec["suspend"], false);
        assert_eq!(spec["manualSelector"], false);
        assert_eq!(spec["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(
            spec["selector"],
            json!({ "matchLabels": { "batch.kubernetes.io/controller-uid": "u-1" } })
        );
        let labels = &spec["template"]["metadata"]["labels"];
        assert_eq!(labels["controller-uid"], "u-1");
        assert_eq!(labels["batch.kubernetes.io/controller-uid"], "u-1");
        assert_eq!(labels["job-name"], "pi");
        assert_eq!(labels["batch.kubernetes.io/job-name"], "pi");
        assert_eq!(&j["metadata"]["labels"], labels);
        assert!(JobHooks.validate(&j).is_empty(), "{:?}", JobHooks.validate(&j));
    }

    #[test]
    fn restart_policy_and_counts() {
        let mut j = job();
        j["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        j["spec"]["parallelism"] = json!(-1);
        let texts: Vec<String> = JobHooks.validate(&j).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            vec![
                "spec.parallelism: Invalid value: -1: must be greater than or equal to 0",
                "spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"",
            ]
        );
    }

    #[test]
    fn template_is_immutable_unless_suspended() {
        let old = job();
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("perl:2");
        let texts: Vec<String> =
            JobHooks.validate_update(&new, &old).iter().map(FieldError::to_text).collect();
        assert_eq!(texts.len(), 1);
        assert!(
            texts[0].starts_with("spec.template: Invalid value: ")
                && texts[0].ends_with(": field is immutable")
        );
        let mut suspended = old.clone();
        suspended["spec"]["suspend"] = json!(true);
        let mut moved = suspended.clone();
        moved["spec"]["template"]["spec"]["nodeSelector"] = json!({ "zone": "a" });
        assert!(
            JobHooks.validate_update(&moved, &suspended).is_empty(),
            "{:?}",
            JobHooks.validate_update(&moved, &suspended)
        );
        let mut c = old.clone();
        c["spec"]["completions"] = json!(5);
        assert_eq!(
            JobHooks.validate_update(&c, &old)[0].to_text(),
            "spec.completions: Invalid value: 5: field is immutable"
        );
    }
}
