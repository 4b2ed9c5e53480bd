//! Results: one table on standard output, the same as JSON.

use std::path::Path;

use serde::Serialize;

use crate::Args;

#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub samples: usize,
}

impl Latency {
    pub fn from_samples(mut v: Vec<f64>) -> Option<Latency> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
        Some(Latency {
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            max_ms: *v.last().unwrap(),
            samples: v.len(),
        })
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Rate {
    pub per_sec: f64,
    pub ok: usize,
    pub failed: usize,
    pub latency: Option<Latency>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct BackendResults {
    pub healthz: Option<Rate>,
    pub channels: Option<Rate>,
    pub messages_page: Option<Rate>,
    pub sends: Option<Rate>,
    pub deliveries_per_sec: Option<Rate>,
    pub plain_client_per_sec: Option<Rate>,
    pub delivery_latency_light: Option<Latency>,
    pub delivery_latency_heavy: Option<Latency>,
    pub idle_rss_mb: Option<f64>,
    pub peak_rss_mb: Option<f64>,
    pub startup_ms: Option<f64>,
}

#[derive(Serialize)]
pub struct Report {
    pub machine: String,
    pub duration_s: f64,
    pub connections: usize,
    pub backlog: usize,
    pub results: Vec<(String, BackendResults)>,
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    format!("{cpus} CPUs, {model}")
}

impl Report {
    pub fn new(args: &Args) -> Report {
        Report {
            machine: machine(),
            duration_s: args.duration.as_secs_f64(),
            connections: args.connections,
            backlog: args.backlog,
            results: Vec::new(),
        }
    }

    pub fn add(&mut self, backend: &str, r: BackendResults) {
        self.results.push((backend.to_owned(), r));
    }

    pub fn print(&self) {
        println!(
            "machine: {}; {} connections, {} s per measurement",
            self.machine, self.connections, self.duration_s
        );
        println!(
            "{:<34} {:>18} {:>18}",
            "measurement",
            self.results.first().map(|r| r.0.as_str()).unwrap_or(""),
            self.results.get(1).map(|r| r.0.as_str()).unwrap_or("")
        );
        let rate = |r: &Option<Rate>| {
            r.as_ref()
                .map(|r| format!("{:.0}/s", r.per_sec))
                .unwrap_or_else(|| "n/a".into())
        };
        let lat = |r: &Option<Rate>| {
            r.as_ref()
                .and_then(|r| r.latency.as_ref())
                .map(|l| format!("{:.2}/{:.2} ms", l.p50_ms, l.p99_ms))
                .unwrap_or_else(|| "n/a".into())
        };
        let plain_lat = |l: &Option<Latency>| {
            l.as_ref()
                .map(|l| format!("{:.2}/{:.2} ms", l.p50_ms, l.p99_ms))
                .unwrap_or_else(|| "n/a".into())
        };
        let num = |v: Option<f64>, unit: &str| {
            v.map(|v| format!("{v:.1} {unit}"))
                .unwrap_or_else(|| "n/a".into())
        };
        let ratio = |a: &Option<Rate>, b: &Option<Rate>| match (a, b) {
            (Some(a), Some(b)) if b.per_sec > 0.0 => {
                format!("{:.0}%", 100.0 * a.per_sec / b.per_sec)
            }
            _ => "n/a".into(),
        };
        type Row<'a> = (&'a str, Box<dyn Fn(&BackendResults) -> String + 'a>);
        let rows: Vec<Row<'_>> = vec![
            ("GET /healthz", Box::new(|r| rate(&r.healthz))),
            ("  p50/p99", Box::new(|r| lat(&r.healthz))),
            ("GET /channels", Box::new(|r| rate(&r.channels))),
            ("  p50/p99", Box::new(|r| lat(&r.channels))),
            (
                "  vs /healthz (target >= 60%)",
                Box::new(|r| ratio(&r.channels, &r.healthz)),
            ),
            (
                "GET /messages (page of 50)",
                Box::new(|r| rate(&r.messages_page)),
            ),
            ("  p50/p99", Box::new(|r| lat(&r.messages_page))),
            ("POST /messages (sandbox)", Box::new(|r| rate(&r.sends))),
            ("  p50/p99", Box::new(|r| lat(&r.sends))),
            (
                "  vs GET /channels (target >= 25%)",
                Box::new(|r| ratio(&r.sends, &r.channels)),
            ),
            (
                "webhook deliveries",
                Box::new(|r| rate(&r.deliveries_per_sec)),
            ),
            (
                "plain client, same receiver",
                Box::new(|r| rate(&r.plain_client_per_sec)),
            ),
            (
                "  deliveries vs plain (target >= 50%)",
                Box::new(|r| ratio(&r.deliveries_per_sec, &r.plain_client_per_sec)),
            ),
            (
                "event->delivery light p50/p99",
                Box::new(|r| plain_lat(&r.delivery_latency_light)),
            ),
            (
                "event->delivery heavy p50/p99",
                Box::new(|r| plain_lat(&r.delivery_latency_heavy)),
            ),
            (
                "idle RSS (target < 40 MB)",
                Box::new(|r| num(r.idle_rss_mb, "MiB")),
            ),
            ("peak RSS", Box::new(|r| num(r.peak_rss_mb, "MiB"))),
            (
                "start-up (target < 300 ms)",
                Box::new(|r| num(r.startup_ms, "ms")),
            ),
        ];
        for (label, f) in rows {
            let a = self.results.first().map(|r| f(&r.1)).unwrap_or_default();
            let b = self.results.get(1).map(|r| f(&r.1)).unwrap_or_default();
            println!("{label:<34} {a:>18} {b:>18}");
        }
    }

    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, serde_json::to_vec_pretty(self)?)?;
        Ok(())
    }
}
