//! Where values come from (the environment, then the TOML file, then the defaults) and the
//! parsers of the settings that are more than a number, a boolean or a duration.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use switchboard_domain::time::{format_duration, parse_duration};

use super::settings::{SETTINGS, env_name};
use super::{ConfigError, RateLimits};

pub(super) struct Sources<'a> {
    pub(super) env: &'a HashMap<String, String>,
    pub(super) file: Option<&'a BTreeMap<String, String>>,
    pub(super) file_path: Option<&'a Path>,
}

impl Sources<'_> {
    pub(super) fn default_of(name: &str) -> &'static str {
        SETTINGS
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.default)
            .unwrap_or_else(|| panic!("unknown setting {name}"))
    }

    /// Where a setting's value came from, for error messages.
    pub(super) fn origin(&self, name: &str) -> String {
        if self.env.contains_key(&env_name(name)) {
            env_name(name)
        } else if self.file.is_some_and(|f| f.contains_key(name)) {
            match self.file_path {
                Some(p) => format!("`{name}` in {}", p.display()),
                None => format!("`{name}` in the configuration file"),
            }
        } else {
            env_name(name)
        }
    }

    pub(super) fn get(&self, name: &str) -> String {
        if let Some(v) = self.env.get(&env_name(name)) {
            return v.trim().to_owned();
        }
        if let Some(v) = self.file.and_then(|f| f.get(name)) {
            return v.trim().to_owned();
        }
        Self::default_of(name).to_owned()
    }

    pub(super) fn error(&self, name: &str, value: &str, expected: &str) -> ConfigError {
        ConfigError(format!("{}: {expected} (got {value:?})", self.origin(name)))
    }

    pub(super) fn error_secret(&self, name: &str, expected: &str) -> ConfigError {
        ConfigError(format!("{}: {expected}", self.origin(name)))
    }

    pub(super) fn number(&self, name: &str, min: u32, max: u32) -> Result<u32, ConfigError> {
        let raw = self.get(name);
        match raw.parse::<u32>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(self.error(
                name,
                &raw,
                &format!("expected a whole number from {min} to {max}"),
            )),
        }
    }

    pub(super) fn boolean(&self, name: &str) -> Result<bool, ConfigError> {
        let raw = self.get(name);
        match raw.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(self.error(
                name,
                &raw,
                "expected true or false (also 1/0, yes/no, on/off)",
            )),
        }
    }

    pub(super) fn duration(
        &self,
        name: &str,
        min: Duration,
        max: Duration,
    ) -> Result<Duration, ConfigError> {
        let raw = self.get(name);
        let d = parse_duration(&raw).map_err(|e| {
            self.error(
                name,
                &raw,
                &format!("expected a duration such as 500ms, 10s, 5m, 2h or 7d; {e}"),
            )
        })?;
        if d < min || d > max {
            return Err(self.error(
                name,
                &raw,
                &format!(
                    "expected a duration from {} to {}",
                    format_duration(min),
                    format_duration(max)
                ),
            ));
        }
        Ok(d)
    }
}

pub(super) fn check_listen(s: &str) -> Result<(), String> {
    if s.parse::<SocketAddr>().is_ok() {
        return Ok(());
    }
    match s.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => Err("expected HOST:PORT such as 127.0.0.1:8080 or 0.0.0.0:8080".into()),
    }
}

pub(super) fn parse_delays(s: &str) -> Result<Vec<Duration>, String> {
    let items: Vec<&str> = s
        .split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .collect();
    if items.is_empty() {
        return Err("expected a comma-separated list of durations such as 30s,5m,30m".into());
    }
    if items.len() > 25 {
        return Err("at most 25 retry delays".into());
    }
    items
        .into_iter()
        .map(|i| {
            let d = parse_duration(i)?;
            if d > Duration::from_secs(7 * 86400) {
                return Err(format!("`{i}` is longer than 7d"));
            }
            Ok(d)
        })
        .collect()
}

pub(super) fn parse_overrides(
    s: &str,
    base: RateLimits,
) -> Result<BTreeMap<i64, RateLimits>, String> {
    let mut out = BTreeMap::new();
    for entry in s.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (org, limits) = entry
            .split_once(':')
            .ok_or_else(|| format!("`{entry}`: expected ORG_ID:reads=N,sends=N,tests=N"))?;
        let org: i64 = org
            .trim()
            .parse()
            .map_err(|_| format!("`{org}` is not an organization id"))?;
        let mut l = base;
        for pair in limits.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| format!("`{pair}`: expected CLASS=N"))?;
            let v: u32 = v
                .trim()
                .parse()
                .ok()
                .filter(|v| (1..=1_000_000).contains(v))
                .ok_or_else(|| format!("`{pair}`: expected a whole number from 1 to 1000000"))?;
            match k.trim() {
                "reads" => l.reads = v,
                "sends" => l.sends = v,
                "tests" => l.tests = v,
                other => {
                    return Err(format!(
                        "`{other}` is not a rate-limit class (reads, sends, tests)"
                    ));
                }
            }
        }
        out.insert(org, l);
    }
    Ok(out)
}

/// Reads a TOML file into setting name → text value. Unknown keys are an error.
pub(super) fn read_toml(path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError(format!(
            "cannot read configuration file {}: {e}",
            path.display()
        ))
    })?;
    parse_toml(&text)
        .map_err(|e| ConfigError(format!("configuration file {}: {e}", path.display())))
}

pub fn parse_toml(text: &str) -> Result<BTreeMap<String, String>, String> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| e.message().to_owned())?;
    let mut out = BTreeMap::new();
    for (key, value) in table {
        if !SETTINGS.iter().any(|s| s.name == key) {
            return Err(format!("unknown setting `{key}`"));
        }
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Array(items) => items
                .into_iter()
                .map(|i| match i {
                    toml::Value::String(s) => Ok(s),
                    other => Err(format!(
                        "`{key}`: expected a list of strings, found {other}"
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?
                .join(","),
            other => return Err(format!("`{key}`: unsupported value {other}")),
        };
        out.insert(key, text);
    }
    Ok(out)
}
