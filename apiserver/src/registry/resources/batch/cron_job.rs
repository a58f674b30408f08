//! CronJobs (upstream's `SetDefaults_CronJob` and `ValidateCronJobCreate`/`Update`), with
//! the schedule checked as robfig/cron's standard parser does (five fields or a
//! descriptor), with its error wording.

use serde_json::{Value, json};

use super::job::validate_job_spec;
use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::at_mut;
use crate::registry::resources::core::pod_spec::{default_template, set_default};
use crate::validation::{nonnegative, show};

pub struct CronJobHooks;

struct Field {
    min: u32,
    max: u32,
    names: &'static [&'static str],
    /// Value of the first name (0 for days of the week, 1 for months).
    first: u32,
}

const MONTHS: &[&str] = &["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

const FIELDS: [Field; 5] = [
    Field { min: 0, max: 59, names: &[], first: 0 },
    Field { min: 0, max: 23, names: &[], first: 0 },
    Field { min: 1, max: 31, names: &[], first: 0 },
    Field { min: 1, max: 12, names: MONTHS, first: 1 },
    Field { min: 0, max: 6, names: DAYS, first: 0 },
];

fn must_parse_int(expr: &str) -> Result<u32, String> {
    match expr.parse::<i64>() {
        Err(_) => {
            Err(format!("failed to parse int from {expr}: strconv.Atoi: parsing \"{expr}\": invalid syntax"))
        }
        Ok(n) if n < 0 => Err(format!("negative number ({n}) not allowed: {expr}")),
        Ok(n) => Ok(u32::try_from(n).unwrap_or(u32::MAX)),
    }
}

fn int_or_name(expr: &str, f: &Field) -> Result<u32, String> {
    if let Some(i) = f.names.iter().position(|n| n.eq_ignore_ascii_case(expr)) {
        return Ok(i as u32 + f.first);
    }
    must_parse_int(expr)
}

fn range(expr: &str, f: &Field) -> Result<(), String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_high: Vec<&str> = range_and_step[0].split('-').collect();
    let (start, mut end) = if low_high[0] == "*" || low_high[0] == "?" {
        (f.min, f.max)
    } else {
        let start = int_or_name(low_high[0], f)?;
        match low_high.len() {
            1 => (start, start),
            2 => (start, int_or_name(low_high[1], f)?),
            _ => return Err(format!("too many hyphens: {expr}")),
        }
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = must_parse_int(range_and_step[1])?;
            if low_high.len() == 1 {
                end = f.max;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < f.min {
        return Err(format!("beginning of range ({start}) below minimum ({}): {expr}", f.min));
    }
    if end > f.max {
        return Err(format!("end of range ({end}) above maximum ({}): {expr}", f.max));
    }
    if start > end {
        return Err(format!("beginning of range ({start}) beyond end of range ({end}): {expr}"));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    Ok(())
}

/// robfig/cron's `ParseStandard`: `Err` carries its message.
pub fn parse_schedule(spec: &str) -> Result<(), String> {
    let mut spec = spec.trim();
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    if let Some(rest) = spec.strip_prefix("TZ=").or_else(|| spec.strip_prefix("CRON_TZ=")) {
        let (tz, rest) = rest.split_once(' ').unwrap_or((rest, ""));
        if !valid_time_zone(tz) {
            return Err(format!("provided bad location {tz}: unknown time zone {tz}"));
        }
        spec = rest.trim();
    }
    if let Some(d) = spec.strip_prefix('@') {
        return match d {
            "yearly" | "annually" | "monthly" | "weekly" | "daily" | "midnight" | "hourly" => Ok(()),
            _ if d.starts_with("every ") => {
                let dur = d["every ".len()..].trim();
                if parse_go_duration(dur) {
                    Ok(())
                } else {
                    Err(format!("failed to parse duration {spec}: time: invalid duration \"{dur}\""))
                }
            }
            _ => Err(format!("unrecognized descriptor: {spec}")),
        };
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!("expected exactly 5 fields, found {}: [{}]", fields.len(), fields.join(" ")));
    }
    for (expr, f) in fields.iter().zip(FIELDS.iter()) {
        for part in expr.split(',') {
            range(part, f)?;
        }
    }
    Ok(())
}

/// A Go duration (`1h30m`, `5m`, `10s`, `1.5h`).
fn parse_go_duration(s: &str) -> bool {
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    if rest == "0" {
        return true;
    }
    while !rest.is_empty() {
        let n = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        if n == 0 {
            return false;
        }
        rest = &rest[n..];
        let unit = ["ns", "us", "µs", "ms", "s", "m", "h"].into_iter().find(|u| rest.starts_with(u));
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

/// A time zone name that exists (as the host's zone database knows it, when it has one).
fn valid_time_zone(tz: &str) -> bool {
    let shaped = tz.split('/').all(|part| {
        part != "."
            && part != ".."
            && !part.starts_with('-')
            && (1..=14).contains(&part.len())
            && part.chars().all(|c| c.is_ascii_alphanumeric() || "._-+".contains(c))
    });
    let zoneinfo = std::path::Path::new("/usr/share/zoneinfo");
    shaped && (tz == "UTC" || !zoneinfo.is_dir() || zoneinfo.join(tz).is_file())
}

fn validate_spec(spec: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let schedule = spec["schedule"].as_str().unwrap_or_default();
    if schedule.is_empty() {
        errs.push(FieldError::required("spec.schedule", ""));
    } else {
        if let Err(e) = parse_schedule(schedule) {
            errs.push(FieldError::invalid("spec.schedule", schedule, e));
        }
        let tz_allowed = old.is_some_and(|o| o["schedule"].as_str().unwrap_or_default().contains("TZ"));
        if schedule.contains("TZ") {
            if !tz_allowed {
                errs.push(FieldError::invalid(
                    "spec.schedule",
                    schedule,
                    "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
                ));
            } else if !spec["timeZone"].is_null() {
                errs.push(FieldError::invalid(
                    "spec.schedule",
                    schedule,
                    "cannot use both timeZone field and TZ or CRON_TZ in schedule",
                ));
            }
        }
    }
    errs.extend(nonnegative("spec.startingDeadlineSeconds", &spec["startingDeadlineSeconds"]));
    if old.is_none_or(|o| o["timeZone"] != spec["timeZone"])
        && let Some(tz) = spec["timeZone"].as_str()
    {
        if tz.is_empty() {
            errs.push(FieldError::invalid("spec.timeZone", tz, "timeZone must be nil or non-empty string"));
        } else if tz.eq_ignore_ascii_case("local") {
            errs.push(FieldError::invalid(
                "spec.timeZone",
                tz,
                "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
            ));
        } else if !valid_time_zone(tz) {
            errs.push(FieldError::invalid("spec.timeZone", tz, format!("unknown time zone {tz}")));
        }
    }
    match spec["concurrencyPolicy"].as_str().unwrap_or_default() {
        "Allow" | "Forbid" | "Replace" => {}
        "" => errs.push(FieldError::required("spec.concurrencyPolicy", "")),
        other => errs.push(FieldError::not_supported(
            "spec.concurrencyPolicy",
            other,
            &["Allow", "Forbid", "Replace"],
        )),
    }
    let job_spec = &spec["jobTemplate"]["spec"];
    errs.extend(validate_job_spec(job_spec, "spec.jobTemplate.spec"));
    if !job_spec["selector"].is_null() {
        errs.push(FieldError::invalid(
            "spec.jobTemplate.spec.selector",
            show(&job_spec["selector"]),
            "`selector` will be auto-generated",
        ));
    }
    if job_spec["manualSelector"].as_bool() == Some(true) {
        errs.push(FieldError::not_supported(
            "spec.jobTemplate.spec.manualSelector",
            "true",
            &["nil", "false"],
        ));
    }
    errs.extend(nonnegative("spec.successfulJobsHistoryLimit", &spec["successfulJobsHistoryLimit"]));
    errs.extend(nonnegative("spec.failedJobsHistoryLimit", &spec["failedJobsHistoryLimit"]));
    errs
}

impl Hooks for CronJobHooks {
    fn warnings(&self, obj: &Value) -> Vec<String> {
        crate::registry::resources::core::pod_warnings::template_warnings(
            obj,
            &["spec", "jobTemplate", "spec", "template"],
        )
    }

    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if spec["concurrencyPolicy"].as_str().is_none_or(str::is_empty) {
            spec["concurrencyPolicy"] = json!("Allow");
        }
        set_default(spec, "suspend", json!(false));
        set_default(spec, "successfulJobsHistoryLimit", json!(3));
        set_default(spec, "failedJobsHistoryLimit", json!(1));
        if let Some(template) = at_mut(spec, &["jobTemplate", "spec", "template"]) {
            default_template(template);
        }
    }

    /// Create-time checks. `validate` runs for updates too, where the spec rules depend
    /// on the old spec (a `TZ=` schedule stays allowed) and the name length is not
    /// checked: an object with a resourceVersion is an update, checked in
    /// `validate_update` instead.
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        if !obj["metadata"]["resourceVersion"].is_null() {
            return Vec::new();
        }
        let mut errs = Vec::new();
        // The controller appends an 11-character suffix to name its jobs.
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        if name.len() > 52 {
            errs.push(FieldError::invalid("metadata.name", name, "must be no more than 52 characters"));
        }
        errs.extend(validate_spec(&obj["spec"], None));
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        if new["metadata"]["resourceVersion"].is_null() {
            return Vec::new();
        }
        validate_spec(&new["spec"], Some(&old["spec"]))
    }

    fn tracks_generation(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules() {
        for ok in [
            "*/5 * * * *",
            "0 0 * * 0",
            "@hourly",
            "@every 1h30m",
            "0 9-17 * jan-mar mon,fri",
            "TZ=UTC 0 * * * *",
            "? * * * ?",
        ] {
            assert_eq!(parse_schedule(ok), Ok(()), "{ok}");
        }
        assert_eq!(parse_schedule("* * *"), Err("expected exactly 5 fields, found 3: [* * *]".into()));
        assert_eq!(parse_schedule("61 * * * *"), Err("end of range (61) above maximum (59): 61".into()));
        assert_eq!(parse_schedule("@often"), Err("unrecognized descriptor: @often".into()));
        assert_eq!(
            parse_schedule("x * * * *"),
            Err("failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax".into())
        );
        assert_eq!(
            parse_schedule("5-1 * * * *"),
            Err("beginning of range (5) beyond end of range (1): 5-1".into())
        );
        assert_eq!(
            parse_schedule("*/0 * * * *"),
            Err("step of range should be a positive number: */0".into())
        );
    }

    fn cron_job(schedule: &str) -> Value {
        let mut c = json!({
            "metadata": { "name": "hello" },
            "spec": { "schedule": schedule, "jobTemplate": { "spec": { "template": { "spec": {
                "containers": [{ "name": "c", "image": "busybox" }], "restartPolicy": "OnFailure" } } } } },
        });
        CronJobHooks.default(&mut c);
        c
    }

    #[test]
    fn defaults_and_rules() {
        let c = cron_job("*/1 * * * *");
        let spec = &c["spec"];
        assert_eq!(spec["concurrencyPolicy"], "Allow");
        assert_eq!(spec["suspend"], false);
        assert_eq!(spec["successfulJobsHistoryLimit"], 3);
        assert_eq!(spec["failedJobsHistoryLimit"], 1);
        assert_eq!(spec["jobTemplate"]["spec"]["template"]["spec"]["dnsPolicy"], "ClusterFirst");
        assert!(CronJobHooks.validate(&c).is_empty(), "{:?}", CronJobHooks.validate(&c));
        let bad = cron_job("every minute");
        let texts: Vec<String> = CronJobHooks.validate(&bad).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            vec![
                "spec.schedule: Invalid value: \"every minute\": expected exactly 5 fields, found 2: [every minute]"
            ]
        );
        let tz = cron_job("TZ=UTC 0 * * * *");
        assert!(
            CronJobHooks.validate(&tz)[0]
                .to_text()
                .ends_with("cannot use TZ or CRON_TZ in schedule, use timeZone field instead")
        );
    }
}
