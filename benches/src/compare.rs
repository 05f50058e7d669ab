//! `volley-bench compare BASELINE RESULTS`: every figure of a run beside the same figure
//! in a saved one, with the change in percent, so a regression shows at a glance.
//! Records are matched within a suite by their text fields (client, link, direction, …)
//! and their counts (bytes, in flight, chunk); per-round lists are left out.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde_json::Value;

pub(crate) fn run(baseline: &Path, results: &Path) -> Result<(), String> {
    let load = |path: &Path| -> Result<Value, String> {
        let text =
            fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))
    };
    let (old, new) = (load(baseline)?, load(results)?);
    let old = figures(&old);
    let new = figures(&new);
    let width = new.keys().map(String::len).max().unwrap_or(0);
    println!(
        "{:<width$}  {:>12}  {:>12}  {:>8}",
        "figure", "baseline", "now", "change"
    );
    let mut missing = 0;
    for (name, value) in &new {
        match old.get(name) {
            Some(&was) if was != 0.0 => println!(
                "{name:<width$}  {was:>12.3}  {value:>12.3}  {:>+7.1}%",
                100.0 * (value - was) / was.abs()
            ),
            Some(&was) => println!("{name:<width$}  {was:>12.3}  {value:>12.3}  {:>8}", "-"),
            None => missing += 1,
        }
    }
    if missing > 0 {
        println!("({missing} figures have no counterpart in the baseline)");
    }
    Ok(())
}

/// Every numeric figure of a `results.json`, named `suite / record key / field`.
fn figures(run: &Value) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Some(suites) = run.as_object() else {
        return out;
    };
    for (suite, report) in suites {
        let Some(records) = report["results"].as_array() else {
            continue;
        };
        for record in records {
            let Some(fields) = record.as_object() else {
                continue;
            };
            let key: Vec<String> = fields
                .iter()
                .filter_map(|(k, v)| match v {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) if is_count(k) => Some(format!("{k}={n}")),
                    _ => None,
                })
                .collect();
            for (field, value) in fields {
                if let (Some(v), false) = (value.as_f64(), is_count(field)) {
                    out.insert(format!("{suite} / {} / {field}", key.join(", ")), v);
                }
            }
        }
    }
    out
}

/// Fields that identify a record rather than measure it.
fn is_count(field: &str) -> bool {
    matches!(field, "bytes" | "in_flight" | "sweep_chunk")
}
